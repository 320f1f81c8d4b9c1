// Ring all-reduce: reduce-scatter, then all-gather; bandwidth-optimal for large S.
//   The buffer is cut into n blocks. Reduce-scatter, steps s = 0..n-2: rank r sends
//   block (r - s) mod n to rank r+1 and receives block (r - s - 1) mod n from rank r-1,
//   reducing it with its own input into `out` (each block arrives once; step 0 sends from
//   `in`, later steps forward the partial sums received in the step before). Afterwards rank r
//   holds the full reduction of block (r + 1) mod n. All-gather, steps s = 0..n-2: rank r sends
//   block (r + 1 - s) mod n to rank r+1 and receives block (r - s) mod n from rank r-1 into `out`.
//   2(n-1) steps; each rank sends and receives 2(n-1)/n · S bytes.
#include "algorithms/algorithm.h"

namespace accl {

Status allreduce_ring(Link& link, const Buffers& buf, const Reduction& reduction) {
  const int n = link.size(), me = link.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  const Blocks blocks{buf.count, n};
  auto mod = [n](int v) { return ((v % n) + n) % n; };
  auto bytes_of = [&](int b) { return blocks.length(b) * buf.elem_size; };

  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(me - s), recv_block = mod(me - s - 1);
    const void* send_from =
        (s == 0) ? buf.in_at(blocks.begin(send_block)) : buf.out_at(blocks.begin(send_block));
    // Each block arrives here once, so its local operand is always our own input.
    const void* local = buf.in_at(blocks.begin(recv_block));
    ACCL_RETURN_IF_ERROR(link.post_send(next, send_from, bytes_of(send_block)));
    ACCL_RETURN_IF_ERROR(link.recv_reduce(prev, local, buf.out_at(blocks.begin(recv_block)),
                                          bytes_of(recv_block), reduction));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
  }
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(me + 1 - s), recv_block = mod(me - s);
    ACCL_RETURN_IF_ERROR(
        link.post_send(next, buf.out_at(blocks.begin(send_block)), bytes_of(send_block)));
    ACCL_RETURN_IF_ERROR(
        link.recv(prev, buf.out_at(blocks.begin(recv_block)), bytes_of(recv_block)));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
  }
  return Status::Ok();
}

}  // namespace accl
