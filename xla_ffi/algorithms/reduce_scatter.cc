// Reduce-scatter: rank r ends with the reduction over every rank of that rank's block r.
//
// Ring, steps s = 0..n-2: rank r sends block (r - s - 1) mod n to rank r+1 and receives
//   block (r - s - 2) mod n from rank r-1, reducing it with its own input's block of
//   that index. Step 0 sends from the input; each later step forwards the partial sum
//   it received in the step before (two scratch blocks, used in turn, so a send still
//   in flight is never overwritten). The last step receives block r itself, into `out`.
//   n-1 steps; each rank sends and receives (n-1)·block elements.
// Direct: with peer memory, out = fold over ranks 0..n-1 of their input's block r, read
//   in place; otherwise rank r posts block j of its input to each rank j and folds what
//   it receives, in rank order.
#include <cstring>
#include <vector>

#include "algorithms/scatter_gather.h"

namespace accl {

Status reduce_scatter_ring(Link& link, const BlockBuffers& buf, const Reduction& reduction) {
  const int n = link.size(), me = link.rank();
  const size_t bytes = buf.block_bytes();
  if (n == 1) {
    if (bytes > 0) std::memcpy(buf.out, buf.in, bytes);
    return Status::Ok();
  }
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  // Thread-local, not on this frame: a peer reading a partial sum we posted (peer memory
  // reads the sender's buffer) must still find it after an error returns from here,
  // until the caller's fail() has fenced the peers.
  thread_local std::vector<char> scratch;
  scratch.resize(n > 2 ? 2 * bytes : 0);
  const char* partial = nullptr;  // what the previous step reduced
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(me - s - 1), recv_block = mod(me - s - 2);
    const void* send_from = s == 0 ? buf.in_block(send_block) : partial;
    void* into = s == n - 2 ? buf.out : scratch.data() + (s % 2) * bytes;
    ACCL_RETURN_IF_ERROR(link.post_send(next, send_from, bytes));
    ACCL_RETURN_IF_ERROR(link.recv_reduce(prev, buf.in_block(recv_block), into, bytes, reduction));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
    partial = static_cast<const char*>(into);
  }
  return Status::Ok();
}

Status reduce_scatter_direct(Link& link, const BlockBuffers& buf, const Reduction& reduction) {
  const int n = link.size(), me = link.rank();
  const size_t bytes = buf.block_bytes();
  if (n == 1 || bytes == 0) {
    if (bytes > 0) std::memcpy(buf.out, buf.in, bytes);
    return Status::Ok();
  }
  if (PeerMemory* peers = link.peer_memory()) {
    std::vector<const void*> sources(n);
    for (int r = 0; r < n; ++r) {
      sources[r] = static_cast<const char*>(peers->input(r, buf.segment)) + me * bytes;
    }
    reduction.fold(buf.out, sources.data(), n, buf.block);
    return Status::Ok();
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) ACCL_RETURN_IF_ERROR(link.post_send(peer, buf.in_block(peer), bytes));
  }
  // out = block_0 op block_1 op ... in rank order, our own block taken from `in`.
  for (int r = 0; r < n; ++r) {
    if (r == 0) {
      if (me == 0) {
        std::memcpy(buf.out, buf.in_block(me), bytes);
      } else {
        ACCL_RETURN_IF_ERROR(link.recv(0, buf.out, bytes));
      }
    } else if (r == me) {
      reduction.fn(buf.out, buf.out, buf.in_block(me), buf.block);
    } else {
      ACCL_RETURN_IF_ERROR(link.recv_reduce(r, buf.out, buf.out, bytes, reduction));
    }
  }
  return link.wait_sends();
}

Status run_reduce_scatter(Algorithm algorithm, Link& link,
                          const std::vector<BlockBuffers>& segments, const Reduction& reduction) {
  if (algorithm != Algorithm::kDirect && algorithm != Algorithm::kRing) {
    return error(Code::kInternal, link.where(), ": reduce-scatter runs direct or ring, not ",
                 algorithm_name(algorithm));
  }
  for (const BlockBuffers& buf : segments) {
    ACCL_RETURN_IF_ERROR(algorithm == Algorithm::kRing
                             ? reduce_scatter_ring(link, buf, reduction)
                             : reduce_scatter_direct(link, buf, reduction));
  }
  // Peers may still read our input in place until everybody is done.
  return algorithm == Algorithm::kDirect ? close_in_place_reads(link) : Status::Ok();
}

}  // namespace accl
