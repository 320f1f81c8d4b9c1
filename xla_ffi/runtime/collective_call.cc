#include "runtime/collective_call.h"

#include <chrono>

#include "runtime/call_record.h"
#include "runtime/collective.h"

namespace accl {

Status reduction_for(const CallSpec& spec, Reduction* reduction) {
  const Signature& sig = spec.signature;
  reduction->elem_size = dtype_size(sig.dtype);
  // An all-gather or a permutation moves data and never reduces it.
  if (!collective_row(sig.collective).reduces) return Status::Ok();
  reduction->fn = reduce_kernel(sig.dtype, sig.op);
  reduction->many = reduce_many_kernel(sig.dtype, sig.op);
  if (reduction->fn == nullptr) {
    return error(Code::kInvalidArgument, "rank ", spec.rank, " of ", spec.label, ": ",
                 reduce_op_name(sig.op), " is not defined for ", dtype_name(sig.dtype));
  }
  return Status::Ok();
}

Status run_collective(Collective collective, Algorithm algorithm, Link& link,
                      const std::vector<Buffers>& segments, int size, const Reduction& reduction,
                      const PermutePeers& peers) {
  return collective_row(collective).run_flat(algorithm, link, segments, size, reduction, peers);
}

Status run_in_process(CallSpec spec, const std::vector<const void*>& in,
                      const std::vector<void*>& out, const std::vector<uint64_t>& counts) {
  describe_layout(counts, &spec.signature);
  const Signature& sig = spec.signature;
  Reduction reduction;
  ACCL_RETURN_IF_ERROR(reduction_for(spec, &reduction));
  if (spec.rank < 0 || spec.rank >= spec.size) {
    return error(Code::kInvalidArgument, "rank ", spec.rank, " outside group of ", spec.size);
  }
  if (spec.rendezvous == nullptr) {
    return error(Code::kInternal, spec.label, ": the call has no rendezvous to meet in");
  }
  const auto start = spec.start();
  const Deadline deadline = Deadline::after_seconds(spec.timeout_s);
  const size_t elem = reduction.elem_size;
  const Algorithm algorithm =
      collective_row(sig.collective).plan_local(spec.size, sig.count * elem, sig.algorithm);

  // An exception (an allocation that failed) fails the call like any error: the other
  // ranks learn it at once instead of at their deadline (before the join, by leaving
  // it; join_call handles its own).
  std::vector<Buffers> segments;
  try {
    for (size_t k = 0; k < counts.size(); ++k) {
      segments.push_back(Buffers{in[k], out[k], counts[k], elem, static_cast<int>(k)});
    }
  } catch (const std::exception& e) {
    spec.rendezvous->leave(spec.key, spec.rank, spec.size, spec.label,
                           error(Code::kInternal, e.what()));
    throw;
  }
  std::shared_ptr<LocalExchange> exchange;
  Status s = spec.rendezvous->join(spec.key, spec.rank, spec.size, sig, spec.label, deadline,
                                   segments, &exchange);
  if (s.ok()) {
    std::unique_ptr<LocalLink> link;
    try {
      link = std::make_unique<LocalLink>(exchange, spec.rank, deadline);
      s = run_collective(sig.collective, algorithm, *link, segments, spec.size, reduction,
                         spec.peers);
    } catch (const std::exception& e) {
      s = error(Code::kInternal, spec.label, ": ", e.what());
    }
    if (!s.ok()) {
      if (link) {
        link->fail(s);
      } else {
        exchange->abort(spec.rank, s.message());
      }
    }
  }
  if (!s.ok()) {
    record_error(algorithm, sig.collective);
    return s;
  }
  record_call(algorithm, spec, start, Clock::now(), sig.count * elem);
  return Status::Ok();
}

}  // namespace accl
