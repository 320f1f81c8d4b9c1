// A link that passes every call to another, for the self-test's links that interfere
// with some of them (a rank that dies, or fails, at its k-th receive): each receive
// first asks before_receive(), which may end it with an error (or never return).
#pragma once

#include "transport/forwarding_link.h"

namespace accl {

class InterposedLink : public ForwardingLink {
 public:
  explicit InterposedLink(Link& inner) : ForwardingLink(inner) {}
  Status recv(int peer, void* dst, size_t bytes) override {
    ACCL_RETURN_IF_ERROR(before_receive());
    return inner_.recv(peer, dst, bytes);
  }
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override {
    ACCL_RETURN_IF_ERROR(before_receive());
    return inner_.recv_reduce(peer, local, dst, bytes, reduction);
  }

 protected:
  virtual Status before_receive() { return Status::Ok(); }
};

}  // namespace accl
