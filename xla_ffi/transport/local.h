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
  // `bytes`: the total size of a rank's segments, which decides eager staging.
  LocalExchange(int size, std::string label, size_t bytes);

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

  // Messages up to this size are copied into the exchange when a rank joins, so that
  // readers never wait for the owner of the original buffer (one sync point per call).
  static constexpr size_t kEagerBytes = 64 << 10;
  // Publishes rank's segments (before it counts as arrived); copies small inputs eagerly.
  void publish(int rank, const std::vector<Buffers>& segments);
  const void* input(int rank, int segment) const { return inputs_[rank][segment]; }
  void* output(int rank, int segment) const { return outputs_[rank][segment]; }
  bool staged() const { return staged_; }
  Flag& barrier_flag() { return barrier_; }
  // Ranks whose link is gone (they touch no buffer of the call any more).
  Flag& departed() { return departed_; }

 private:
  int size_;
  std::string label_;
  std::vector<Mailbox> mailboxes_;
  std::vector<std::vector<const void*>> inputs_;  // [rank][segment]
  std::vector<std::vector<void*>> outputs_;
  std::vector<char> staging_;
  size_t staged_bytes_ = 0;
  bool staged_ = false;
  Flag barrier_;
  Flag departed_;
  std::atomic<bool> aborted_{false};
  mutable std::atomic<int> abort_rank_{-1};
  std::string abort_reason_;
};

class LocalLink final : public Link, public PeerMemory {
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
  PeerMemory* peer_memory() override { return this; }

  const void* input(int rank, int segment) const override {
    return exchange_->input(rank, segment);
  }
  void* output(int rank, int segment) const override { return exchange_->output(rank, segment); }
  bool inputs_staged() const override { return exchange_->staged(); }
  Status barrier() override;

  // Marks the exchange failed and withdraws this rank's unread messages, waiting for
  // readers already inside them; the destructor then waits (up to kDrainSeconds) until
  // every other rank has left the call, since they may read this rank's input or write
  // its output in place until then. Only then can the caller's buffers be released.
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
  uint32_t barriers_ = 0;  // barriers this rank has passed
};

}  // namespace accl
