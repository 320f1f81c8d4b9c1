// In-process transport: the device threads of one process read each other's buffers
// directly. A send publishes a pointer in a mailbox; the receiver copies or reduces
// straight from the sender's memory (no staging copy) and marks the mailbox done,
// which is when the sender may reuse its memory.
//
// Mailbox state word = message_seq * 4 + phase, phase one of POSTED, READING, DONE,
// WITHDRAWN. The receiver claims a POSTED message by CAS to READING, so a sender that
// aborts can withdraw an unread message without racing a reader.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/wait.h"
#include "transport/link.h"

namespace accl {

// Shared by the ranks of one collective call.
class LocalExchange {
 public:
  LocalExchange(int size, std::string label);

  int size() const { return size_; }
  const std::string& label() const { return label_; }

  // Abort: every rank waiting in this exchange fails promptly with `reason`.
  void abort(int rank, const std::string& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string abort_reason() const;

  struct Mailbox {
    Flag state;
    const void* data = nullptr;
    size_t bytes = 0;
    char pad[64 - sizeof(Flag) - sizeof(void*) - sizeof(size_t)];
  };
  Mailbox& mailbox(int src, int dst) { return mailboxes_[src * size_ + dst]; }
  const std::atomic<bool>* abort_flag() const { return &aborted_; }

 private:
  int size_;
  std::string label_;
  std::vector<Mailbox> mailboxes_;
  std::atomic<bool> aborted_{false};
  mutable std::atomic<int> abort_rank_{-1};
  std::string abort_reason_;
};

class LocalLink final : public Link {
 public:
  LocalLink(std::shared_ptr<LocalExchange> exchange, int rank, Deadline deadline);
  ~LocalLink() override;

  int rank() const override { return rank_; }
  int size() const override { return exchange_->size(); }
  Status post_send(int peer, const void* data, size_t bytes) override;
  Status wait_sends() override;
  Status recv(int peer, void* dst, size_t bytes) override;
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override;
  std::string where() const override;

  // Marks the exchange failed and withdraws this rank's unread messages, waiting for
  // readers already inside them, so that the caller's buffers can be released.
  void fail(const Status& status);

 private:
  Status wait_state(LocalExchange::Mailbox& box, uint32_t want, int peer, const char* what);
  Status claim(int peer, size_t bytes, LocalExchange::Mailbox** box);
  void release(LocalExchange::Mailbox& box);

  std::shared_ptr<LocalExchange> exchange_;
  int rank_;
  Deadline deadline_;
  std::vector<uint32_t> sent_;      // messages posted to each peer
  std::vector<uint32_t> received_;  // messages received from each peer
  bool failed_ = false;
};

}  // namespace accl
