// Ring all-reduce, streamed: the ring's schedule (algorithms/ring.cc) over a link that
// queues sends, with no pause between its steps.
//   The buffer is cut into n blocks and every block into m pieces (m from the block's
//   size, the same on every rank). The ring's 2(n-1) steps are as in ring.cc: step
//   s < n-1 sends block (r - s) mod n to rank r+1 and reduces block (r - s - 1) mod n
//   from rank r-1; step n-1+t sends block (r + 1 - t) mod n and receives block (r - t)
//   mod n. What step s+1 sends is what step s received, so piece j of step s+1 is
//   posted as soon as piece j of step s has arrived (and, in the reduce-scatter, been
//   reduced), while pieces j+1.. of step s are still on their way: every rank keeps a
//   piece ahead on the wire and the link never drains between steps (ring.cc waits for
//   each step's sends before the next; on a shaped wire each such pause costs the queue's
//   drain and refill). All m pieces of step 0 are posted at once.
//   Each rank sends and receives 2(n-1)/n · S bytes in 2(n-1)·m messages to one peer
//   and from one peer. Memory: a piece is overwritten only by a receive that depends
//   on the piece having been received downstream first (the final value of a block
//   travels the ring after every rank's partial sum of it), so no send is still reading
//   memory a receive writes.
#include <algorithm>

#include "algorithms/algorithm.h"

namespace accl {
namespace {
constexpr size_t kRingPieceBytes = 64 << 10;
constexpr int kRingMaxPieces = 16;
}  // namespace

int ring_stream_pieces(size_t bytes, int n) {
  const size_t block = bytes / std::max(1, n);
  return static_cast<int>(std::clamp<size_t>(block / kRingPieceBytes, 1, kRingMaxPieces));
}

bool ring_streams(const Link& link, size_t bytes) {
  return link.size() > 2 && link.queues_sends() && ring_stream_pieces(bytes, link.size()) > 1;
}

Status allreduce_ring_streamed(Link& link, const Buffers& buf, const Reduction& reduction) {
  const int n = link.size(), me = link.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const int pieces = ring_stream_pieces(link.wire_bytes(buf.count * buf.elem_size), n);
  const int steps = 2 * (n - 1);
  const Blocks blocks{buf.count, n};
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  // The blocks step s sends and receives.
  auto sent_block = [&](int s) { return s < n - 1 ? mod(me - s) : mod(me + 1 - (s - n + 1)); };
  auto received_block = [&](int s) { return s < n - 1 ? mod(me - s - 1) : mod(me - (s - n + 1)); };
  // Piece j of block b: its first element and length.
  auto piece = [&](int b, int j) {
    const Blocks parts{blocks.length(b), pieces};
    return std::pair<size_t, size_t>{blocks.begin(b) + parts.begin(j), parts.length(j)};
  };
  auto post = [&](int s, int j) {
    const auto [at, count] = piece(sent_block(s), j);
    const void* from = s == 0 ? static_cast<const void*>(buf.in_at(at)) : buf.out_at(at);
    return link.post_send(next, from, count * buf.elem_size);
  };
  for (int j = 0; j < pieces; ++j) ACCL_RETURN_IF_ERROR(post(0, j));
  for (int s = 0; s < steps; ++s) {
    for (int j = 0; j < pieces; ++j) {
      const auto [at, count] = piece(received_block(s), j);
      const size_t bytes = count * buf.elem_size;
      // In the reduce-scatter each block arrives here once: its local operand is our input.
      ACCL_RETURN_IF_ERROR(
          s < n - 1 ? link.recv_reduce(prev, buf.in_at(at), buf.out_at(at), bytes, reduction)
                    : link.recv(prev, buf.out_at(at), bytes));
      if (s + 1 < steps) ACCL_RETURN_IF_ERROR(post(s + 1, j));
    }
  }
  return link.wait_sends();
}

}  // namespace accl
