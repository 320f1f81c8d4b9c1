// Halving-doubling all-reduce (Rabenseifner), for any group size.
//   Let p be the largest power of two <= n and e = n - p. Fold: rank p + j (j < e) sends
//   its input to rank j, which reduces it into `out`; ranks >= p then wait. Ranks 0..p-1
//   keep their order as virtual ids v (the rank mapping: on a fat tree whose leaves hold
//   consecutive ranks, every step's flows then use distinct links; see jax_accl.plan),
//   and the buffer is cut into p blocks.
//   Reduce-scatter by recursive halving, mask = p/2, p/4, ..., 1: v exchanges with
//   v ^ mask, keeps the half of its current window on its side of the mask bit, sends
//   the other half and reduces the partner's copy of the kept half into `out`.
//   After log2(p) steps v holds the full reduction of block v.
//   All-gather by recursive doubling, mask = 1, 2, ..., p/2: v sends its window to
//   v ^ mask and receives the partner's adjacent window, doubling it.
//   Unfold: rank j < e sends the result to rank p + j.
//   2·log2(p) steps (+2 when n is not a power of two); 2(p-1)/p · S bytes per rank.
#include "algorithms/algorithm.h"

namespace accl {

Status allreduce_halving_doubling(Link& link, const Buffers& buf, const Reduction& reduction) {
  const int n = link.size(), me = link.rank();
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  const size_t total_bytes = buf.count * buf.elem_size;

  // Fold: rank p + j hands its input to rank j and waits for the result.
  bool have_out = false;  // does `out` already hold this rank's partial sums?
  if (me >= p) {
    ACCL_RETURN_IF_ERROR(link.post_send(me - p, buf.in, total_bytes));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
    return link.recv(me - p, buf.out, total_bytes);  // unfold
  }
  if (me < extra) {
    ACCL_RETURN_IF_ERROR(link.recv_reduce(me + p, buf.in, buf.out, total_bytes, reduction));
    have_out = true;
  }
  const int v = me;
  auto real_rank = [](int virt) { return virt; };
  const Blocks blocks{buf.count, p};
  auto bytes_of = [&](int first, int last) { return blocks.span(first, last) * buf.elem_size; };

  int lo = 0, hi = p;  // window of blocks this rank is responsible for
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int partner = real_rank(v ^ mask), mid = (lo + hi) / 2;
    const bool keep_low = (v & mask) == 0;
    const int keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    const int give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    const size_t give = blocks.begin(give_lo), keep = blocks.begin(keep_lo);
    const void* send_from = have_out ? static_cast<const void*>(buf.out_at(give)) : buf.in_at(give);
    const void* local = have_out ? static_cast<const void*>(buf.out_at(keep)) : buf.in_at(keep);
    ACCL_RETURN_IF_ERROR(link.post_send(partner, send_from, bytes_of(give_lo, give_hi)));
    ACCL_RETURN_IF_ERROR(
        link.recv_reduce(partner, local, buf.out_at(keep), bytes_of(keep_lo, keep_hi), reduction));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
    have_out = true;
    lo = keep_lo;
    hi = keep_hi;
  }
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = real_rank(v ^ mask), width = hi - lo;
    const bool partner_above = (v & mask) == 0;
    const int other_lo = partner_above ? hi : lo - width, other_hi = other_lo + width;
    ACCL_RETURN_IF_ERROR(link.post_send(partner, buf.out_at(blocks.begin(lo)), bytes_of(lo, hi)));
    ACCL_RETURN_IF_ERROR(
        link.recv(partner, buf.out_at(blocks.begin(other_lo)), bytes_of(other_lo, other_hi)));
    ACCL_RETURN_IF_ERROR(link.wait_sends());
    lo = partner_above ? lo : other_lo;
    hi = partner_above ? other_hi : hi;
  }
  if (me < extra) {  // hand the result back to the folded rank
    ACCL_RETURN_IF_ERROR(link.post_send(me + p, buf.out, total_bytes));
    return link.wait_sends();
  }
  return Status::Ok();
}

}  // namespace accl
