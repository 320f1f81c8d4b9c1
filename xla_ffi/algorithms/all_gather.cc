// All-gather: every rank ends with every rank's input, block j from rank j.
//
// Ring: rank r copies its input to its own block of `out`; then, steps s = 0..n-2, it
//   sends block (r - s) mod n to rank r+1 and receives block (r - s - 1) mod n from
//   rank r-1 into `out`. n-1 steps; each rank sends and receives (n-1)·block elements.
// Direct: with peer memory, rank r copies every rank's input, read in place, into its
//   block of `out`; otherwise it posts its input to every rank and receives each
//   rank's into that rank's block.
#include <cstring>

#include "algorithms/scatter_gather.h"

namespace accl {

Status all_gather_ring(Link& link, const BlockBuffers& buf) {
  const int n = link.size(), me = link.rank();
  const size_t bytes = buf.block_bytes();
  if (bytes > 0) std::memcpy(buf.out_block(me), buf.in, bytes);
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(me - s), recv_block = mod(me - s - 1);
    ACCL_RETURN_IF_ERROR(link.post_send(next, buf.out_block(send_block), bytes));
    ACCL_RETURN_IF_ERROR(link.recv(prev, buf.out_block(recv_block), bytes));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
  }
  return Status::Ok();
}

Status all_gather_direct(Link& link, const BlockBuffers& buf) {
  const int n = link.size(), me = link.rank();
  const size_t bytes = buf.block_bytes();
  if (bytes == 0) return Status::Ok();
  if (PeerMemory* peers = link.peer_memory()) {
    for (int r = 0; r < n; ++r) {
      std::memcpy(buf.out_block(r), r == me ? buf.in : peers->input(r, buf.segment), bytes);
    }
    return Status::Ok();
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) ACCL_RETURN_IF_ERROR(link.post_send(peer, buf.in, bytes));
  }
  std::memcpy(buf.out_block(me), buf.in, bytes);
  for (int r = 0; r < n; ++r) {
    if (r != me) ACCL_RETURN_IF_ERROR(link.recv(r, buf.out_block(r), bytes));
  }
  return link.wait_sends();
}

Status run_all_gather(Algorithm algorithm, Link& link, const std::vector<BlockBuffers>& segments) {
  if (algorithm != Algorithm::kDirect && algorithm != Algorithm::kRing) {
    return error(Code::kInternal, link.where(), ": all-gather runs direct or ring, not ",
                 algorithm_name(algorithm));
  }
  for (const BlockBuffers& buf : segments) {
    ACCL_RETURN_IF_ERROR(algorithm == Algorithm::kRing ? all_gather_ring(link, buf)
                                                       : all_gather_direct(link, buf));
  }
  return algorithm == Algorithm::kDirect ? close_in_place_reads(link) : Status::Ok();
}

}  // namespace accl
