// Two ranks, streamed: the all-reduce between two hosts on a fast wire and a slow one.
//   The buffer is cut into C chunks (C = bytes / 1 MiB, 2..16), each into two halves;
//   rank r reduces half r of every chunk. Each rank sends G_c (its copy of the peer's
//   half of chunk c) and, once it has reduced its own half of chunk c with the peer's
//   G_c, R_c (that half's result). Sends, in this order on the link (the same on both
//   ranks, so each receives in the order the other sends):
//     G_0 G_1 | R_0 G_2 | R_1 G_3 | ... | R_{C-2} | R_{C-1}
//   Receives: G_0 and G_1, then for c = 0.. : R_c into the output, G_{c+2} reduced (each
//   G_c received posts R_c and G_{c+2}). Like halving-doubling for two, each rank sends
//   and receives S bytes and reduces S/2, every result byte received straight into the
//   output; unlike it, the results of chunk c travel while chunk c+1's halves do, so the
//   wire never pauses between the reduce-scatter and the all-gather (on a shaped link a
//   pause costs the queue's drain, ~12% of a 16 MiB call at 300 Mbit/s).
//   In place (in == out) it is safe to receive R_c over the memory G_c was sent from:
//   the peer posts R_c only after it has received all of G_c.
#include <algorithm>

#include "algorithms/algorithm.h"

namespace accl {
namespace {
constexpr size_t kPairChunkBytes = 1 << 20;
constexpr int kPairMaxChunks = 16;
}  // namespace

bool pair_streams(const Link& link, size_t bytes) {
  return link.size() == 2 && link.queues_sends() && bytes >= 2 * kPairChunkBytes;
}

Status allreduce_pair_streamed(Link& link, const Buffers& buf, const Reduction& reduction) {
  const int me = link.rank(), peer = 1 - me;
  const size_t bytes = link.wire_bytes(buf.count * buf.elem_size);
  const int chunks =
      static_cast<int>(std::clamp<size_t>(bytes / kPairChunkBytes, 2, kPairMaxChunks));
  const Blocks blocks{buf.count, chunks};
  // Half h of chunk c: its first element and length.
  auto half = [&](int c, int h) {
    const Blocks halves{blocks.length(c), 2};
    return std::pair<size_t, size_t>{blocks.begin(c) + halves.begin(h), halves.length(h)};
  };
  auto send_given = [&](int c) {  // G_c: our copy of the peer's half
    const auto [at, n] = half(c, peer);
    return link.post_send(peer, buf.in_at(at), n * buf.elem_size);
  };
  ACCL_RETURN_IF_ERROR(send_given(0));
  ACCL_RETURN_IF_ERROR(send_given(1));
  auto reduce_own = [&](int c) {  // the peer's G_c into our half; then R_c and G_{c+2}
    const auto [at, n] = half(c, me);
    ACCL_RETURN_IF_ERROR(
        link.recv_reduce(peer, buf.in_at(at), buf.out_at(at), n * buf.elem_size, reduction));
    ACCL_RETURN_IF_ERROR(link.post_send(peer, buf.out_at(at), n * buf.elem_size));
    return c + 2 < chunks ? send_given(c + 2) : Status::Ok();
  };
  ACCL_RETURN_IF_ERROR(reduce_own(0));
  ACCL_RETURN_IF_ERROR(reduce_own(1));
  for (int c = 0; c < chunks; ++c) {
    const auto [at, n] = half(c, peer);  // R_c: the peer's half, reduced
    ACCL_RETURN_IF_ERROR(link.recv(peer, buf.out_at(at), n * buf.elem_size));
    if (c + 2 < chunks) ACCL_RETURN_IF_ERROR(reduce_own(c + 2));
  }
  return link.wait_sends();
}

}  // namespace accl
