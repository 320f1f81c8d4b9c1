// Direct (one-shot) all-reduce, for small messages: one step.
//   Every rank folds all n inputs into its `out` in rank order 0, 1, ..., n-1, so all
//   ranks compute bit-identical results. With peer memory (threads of one process) it
//   reads the inputs in place: small inputs were copied into the exchange when their
//   ranks joined, so the call has a single sync point; larger ones end with the
//   caller's barrier (peers may still be reading our input). Otherwise every rank sends its input
//   to every other rank. Bytes read per rank: n·S, which is why it only wins for small S. In place
//   (in == out), the result is built aside: peers read our input, or our sends read it, until
//   everybody is done; then it is copied over (after a barrier, in memory).
#include "algorithms/algorithm.h"

#include <cstring>
#include <vector>

namespace accl {
namespace {

Status direct_messages(Link& link, const Buffers& buf, const Reduction& reduction);

}  // namespace

Status allreduce_direct(Link& link, const Buffers& buf, const Reduction& reduction) {
  const int n = link.size();
  const size_t bytes = buf.count * buf.elem_size;
  PeerMemory* peers = link.peer_memory();
  if (buf.in == buf.out && bytes > 0 && !(peers && peers->inputs_staged())) {
    // Kept by the thread from call to call: a fresh buffer would cost its page faults
    // (and zeroing) every time.
    thread_local std::vector<char> result;
    if (result.size() < bytes) result.resize(bytes);
    Buffers aside = buf;
    aside.out = result.data();
    if (peers) {
      ACCL_RETURN_IF_ERROR(allreduce_direct(link, aside, reduction));
      ACCL_RETURN_IF_ERROR(peers->barrier());  // nobody reads our input any more
    } else {
      ACCL_RETURN_IF_ERROR(direct_messages(link, aside, reduction));  // sends done on return
    }
    std::memcpy(buf.out, result.data(), bytes);
    release_if_large(result);
    return Status::Ok();
  }
  if (peers) {
    if (bytes > 0) {
      std::vector<const void*> sources(n);
      for (int r = 0; r < n; ++r) sources[r] = peers->input(r, buf.segment);
      reduction.fold(buf.out, sources.data(), n, buf.count);
    }
    return Status::Ok();
  }
  return direct_messages(link, buf, reduction);
}

Status direct_post(Link& link, const Buffers& buf) {
  const size_t bytes = buf.count * buf.elem_size;
  for (int peer = 0; peer < link.size(); ++peer) {
    if (peer != link.rank()) ACCL_RETURN_IF_ERROR(link.post_send(peer, buf.in, bytes));
  }
  return Status::Ok();
}

Status direct_receive(Link& link, const Buffers& buf, const Reduction& reduction) {
  const int n = link.size(), me = link.rank();
  const size_t bytes = buf.count * buf.elem_size;
  // out = in_0; then out = out op in_r for r = 1..n-1. When me == 0, `out` can
  // start from our own input without a copy by folding in_0 as the first operand.
  for (int r = 1; r < n; ++r) {
    const void* acc = (r == 1) ? nullptr : buf.out;  // running sum, once it exists
    if (r == 1) {
      if (me == 0) {
        ACCL_RETURN_IF_ERROR(link.recv_reduce(1, buf.in, buf.out, bytes, reduction));
        continue;
      }
      ACCL_RETURN_IF_ERROR(link.recv(0, buf.out, bytes));
      acc = buf.out;
    }
    if (r == me) {
      if (bytes > 0) reduction.fn(buf.out, acc, buf.in, buf.count);
    } else {
      ACCL_RETURN_IF_ERROR(link.recv_reduce(r, acc, buf.out, bytes, reduction));
    }
  }
  return Status::Ok();
}

namespace {

Status direct_messages(Link& link, const Buffers& buf, const Reduction& reduction) {
  ACCL_RETURN_IF_ERROR(direct_post(link, buf));
  ACCL_RETURN_IF_ERROR(direct_receive(link, buf, reduction));
  return link.wait_sends();
}

}  // namespace
}  // namespace accl
