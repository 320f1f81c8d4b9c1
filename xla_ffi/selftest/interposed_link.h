// A link that passes every call to another, for the self-test's links that interfere
// with some of them (a rank that dies, or fails, at its k-th receive): each receive
// first asks before_receive(), which may end it with an error (or never return).
#pragma once

#include <string>

#include "transport/link.h"

namespace accl {

class InterposedLink : public Link {
 public:
  explicit InterposedLink(Link& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status post_send(int peer, const void* data, size_t bytes) override {
    return inner_.post_send(peer, data, bytes);
  }
  Status wait_sends() override { return inner_.wait_sends(); }
  Status recv(int peer, void* dst, size_t bytes) override {
    ACCL_RETURN_IF_ERROR(before_receive());
    return inner_.recv(peer, dst, bytes);
  }
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override {
    ACCL_RETURN_IF_ERROR(before_receive());
    return inner_.recv_reduce(peer, local, dst, bytes, reduction);
  }
  PeerMemory* peer_memory() override { return inner_.peer_memory(); }
  Status begin_peer_access() override { return inner_.begin_peer_access(); }
  Status check_peer_access() override { return inner_.check_peer_access(); }
  void end_peer_access() override { inner_.end_peer_access(); }
  bool queues_sends() const override { return inner_.queues_sends(); }
  std::string where() const override { return inner_.where(); }

 protected:
  virtual Status before_receive() { return Status::Ok(); }

 private:
  Link& inner_;
};

}  // namespace accl
