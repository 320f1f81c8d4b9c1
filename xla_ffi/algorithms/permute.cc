// Permute, one step: rank r posts its buffer to send_to(r) and receives recv_from(r)'s
// into its output (zeros where no rank sends to it). With peer memory the receiver reads
// the sender's input in place instead, and the ranks end at a common barrier.
#include "algorithms/permute.h"

#include <cstring>

namespace accl {

Status run_permute(Link& link, const std::vector<Buffers>& segments, const CollectiveArgs& peers) {
  const int me = link.rank(), n = link.size();
  if (peers.send_to >= n || peers.recv_from >= n || peers.send_to < -1 || peers.recv_from < -1) {
    return error(Code::kInternal, link.where(), ": a permutation peer outside the group");
  }
  PeerMemory* memory = link.peer_memory();
  for (const Buffers& b : segments) {
    const size_t bytes = b.count * b.elem_size;
    if (bytes == 0) continue;
    if (peers.recv_from < 0) {
      std::memset(b.out, 0, bytes);
    } else if (peers.recv_from == me) {
      std::memmove(b.out, b.in, bytes);
    } else if (memory != nullptr) {
      std::memcpy(b.out, memory->input(peers.recv_from, b.segment), bytes);
    }
    if (memory != nullptr) continue;
    if (peers.send_to >= 0 && peers.send_to != me) {
      ACCL_RETURN_IF_ERROR(link.post_send(peers.send_to, b.in, bytes));
    }
    if (peers.recv_from >= 0 && peers.recv_from != me) {
      ACCL_RETURN_IF_ERROR(link.recv(peers.recv_from, b.out, bytes));
    }
    ACCL_RETURN_IF_ERROR(link.wait_sends());
  }
  return close_in_place_reads(link);
}

}  // namespace accl
