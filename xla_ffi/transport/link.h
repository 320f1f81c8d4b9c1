// The point-to-point vocabulary every algorithm speaks. A Link is one rank's view of
// its group: it can post a send to a peer, receive a peer's message into memory, or
// receive it and reduce it with local data in one pass. Algorithms never touch
// sockets or shared memory directly.
//
// Rules: at most one outstanding send per peer (post_send waits for the previous
// one to that peer); messages between two ranks arrive in the order they were sent;
// the sent memory must stay untouched until wait_sends() returns.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "reduce/reduce.h"

namespace accl {

// One rank's buffers: `count` elements of `elem_size` bytes; in and out are either the
// same buffer (an in-place all-reduce: every algorithm handles it) or do not overlap.
// A call may all-reduce several such segments (fused leaves of a pytree); `segment` is
// the index under which peers published theirs (PeerMemory), `offset` how far into it
// this piece starts (a chunk of a pipelined call).
struct Buffers {
  const void* in;
  void* out;
  size_t count;
  size_t elem_size;
  int segment = 0;
  size_t offset = 0;  // where `in` and `out` start in the published segment, in elements
  const char* in_at(size_t elem) const { return static_cast<const char*>(in) + elem * elem_size; }
  char* out_at(size_t elem) const { return static_cast<char*>(out) + elem * elem_size; }
};

// How to combine two runs of elements.
struct Reduction {
  ReduceFn fn = nullptr;
  size_t elem_size = 0;
  ReduceManyFn many = nullptr;  // optional one-pass form of folding fn over k inputs
  // Where `local` and `dst` of a receive hold elements of another size than the message
  // (bfloat16 on the wire: float32 buffers, bfloat16 messages; transport/wire_link.h):
  // their element size; 0: elem_size. Element i of the message meets element i of both.
  size_t out_elem_size = 0;
  // How a rank's input becomes its result where no other rank adds to it (a group of
  // one): nullptr a copy; bfloat16 on the wire rounds it (dst may equal src).
  void (*copy)(void* dst, const void* src, size_t count) = nullptr;

  size_t out_elem() const { return out_elem_size ? out_elem_size : elem_size; }
  // dst = src, `count` elements of `elem` bytes, as a group of one returns it.
  void copy_alone(void* dst, const void* src, size_t count, size_t elem) const {
    if (copy != nullptr) {
      copy(dst, src, count);
    } else if (dst != src && count > 0) {
      std::memcpy(dst, src, count * elem);
    }
  }

  // dst = srcs[0] op srcs[1] op ... op srcs[k-1], left to right (k >= 2); dst may be srcs[0].
  void fold(void* dst, const void* const* srcs, int k, size_t count) const {
    if (many != nullptr) {
      many(dst, srcs, k, count);
      return;
    }
    fn(dst, srcs[0], srcs[1], count);
    for (int r = 2; r < k; ++r) fn(dst, dst, srcs[r], count);
  }
};

// Direct access to the buffers of the other ranks, where the transport has it (the
// device threads of one process). Published when the ranks join the call.
class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  // Rank r's input of segment `segment`: its own buffer, or an eager copy in the
  // exchange (inputs_staged()).
  virtual const void* input(int rank, int segment) const = 0;
  virtual void* output(int rank, int segment) const = 0;
  // True when inputs are eager copies owned by the exchange: readers need no barrier.
  virtual bool inputs_staged() const = 0;
  // Waits until every rank of the group has reached its barrier the same number of times.
  virtual Status barrier() = 0;
};

// Another process's memory, read and written directly (cross-memory attach, transport/
// cma.h), for the processes of one host. An algorithm names a process by the handle
// its peer sent it over the link, and an address in that process.
class ProcessMemory {
 public:
  virtual ~ProcessMemory() = default;
  virtual uint64_t handle() const = 0;  // this process, as its peers name it
  // Copies `bytes` from `remote` in process `peer` into `local`, or from `local` there.
  virtual Status read(uint64_t peer, uint64_t remote, void* local, size_t bytes) = 0;
  virtual Status write(uint64_t peer, uint64_t remote, const void* local, size_t bytes) = 0;
  // read, never short-cut for this process (a handle from another namespace may equal
  // ours): whether `peer` can be read at all.
  virtual Status probe(uint64_t peer, uint64_t remote, void* local, size_t bytes) = 0;
};

class Link {
 public:
  virtual ~Link() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Makes `bytes` at `data` available to `peer` as the next message from this rank.
  virtual Status post_send(int peer, const void* data, size_t bytes) = 0;
  // Waits until every posted send has been consumed by its receiver.
  virtual Status wait_sends() = 0;
  // Receives the next message from `peer` (it must be `bytes` long) into `dst`.
  virtual Status recv(int peer, void* dst, size_t bytes) = 0;
  // Receives the next message from `peer` and stores dst = local op message.
  // `local` may equal `dst`.
  virtual Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                             const Reduction& reduction) = 0;
  // Peers' memory, or nullptr where the transport only moves messages.
  virtual PeerMemory* peer_memory() { return nullptr; }
  // Around a phase that reads or writes peers' buffers by other means than messages
  // (cross-memory attach): begin fails if a peer has failed already, check (between
  // tiles) as soon as one fails; a failing peer does not return before every rank in
  // such a phase has ended it. Links without such peers accept the calls.
  virtual Status begin_peer_access() { return Status::Ok(); }
  virtual Status check_peer_access() { return Status::Ok(); }
  virtual void end_peer_access() {}
  // True where post_send only queues (any number of sends in flight per peer, driven
  // by every later wait), so a schedule may post ahead of what it receives.
  virtual bool queues_sends() const { return false; }
  // The bytes a message of `bytes` of the caller's buffers takes on the wire (bfloat16 on
  // the wire: half, transport/wire_link.h): what schedules cut and choose by, so that a
  // call plans its messages as the bfloat16 sum it is.
  virtual size_t wire_bytes(size_t bytes) const { return bytes; }
  // A label for error messages, e.g. "rank 3 of group [0 1 2 3], op 17 seq 2".
  virtual std::string where() const = 0;
};

}  // namespace accl
