// A link that passes every call to another: the base of links that watch or interfere
// with some calls of a link they wrap (the self-test's failing ranks, the timed steps
// between hosts), each overriding only those.
#pragma once

#include <string>

#include "transport/link.h"

namespace accl {

class ForwardingLink : public Link {
 public:
  explicit ForwardingLink(Link& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status post_send(int peer, const void* data, size_t bytes) override {
    return inner_.post_send(peer, data, bytes);
  }
  Status wait_sends() override { return inner_.wait_sends(); }
  Status recv(int peer, void* dst, size_t bytes) override { return inner_.recv(peer, dst, bytes); }
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override {
    return inner_.recv_reduce(peer, local, dst, bytes, reduction);
  }
  PeerMemory* peer_memory() override { return inner_.peer_memory(); }
  Status begin_peer_access() override { return inner_.begin_peer_access(); }
  Status check_peer_access() override { return inner_.check_peer_access(); }
  void end_peer_access() override { inner_.end_peer_access(); }
  bool queues_sends() const override { return inner_.queues_sends(); }
  size_t wire_bytes(size_t bytes) const override { return inner_.wire_bytes(bytes); }
  std::string where() const override { return inner_.where(); }

 protected:
  Link& inner_;
};

}  // namespace accl
