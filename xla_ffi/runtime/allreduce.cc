#include "runtime/allreduce.h"

#include <chrono>

#include "algorithms/select.h"
#include "runtime/stats.h"
#include "runtime/trace.h"

namespace accl {

Status allreduce_local(CallSpec spec, const std::vector<const void*>& in,
                       const std::vector<void*>& out, const std::vector<uint64_t>& counts) {
  describe_layout(counts, &spec.signature);
  const Signature& sig = spec.signature;
  ReduceFn fn = reduce_kernel(sig.dtype, sig.op);
  if (fn == nullptr) {
    return error(Code::kInvalidArgument, "rank ", spec.rank, " of ", spec.label, ": ",
                 reduce_op_name(sig.op), " is not defined for ", dtype_name(sig.dtype));
  }
  if (spec.rank < 0 || spec.rank >= spec.size) {
    return error(Code::kInvalidArgument, "rank ", spec.rank, " outside group of ", spec.size);
  }
  const auto start = std::chrono::steady_clock::now();
  const Deadline deadline = Deadline::after_seconds(spec.timeout_s);
  const size_t elem = dtype_size(sig.dtype);
  // Within one process "hierarchical" has a single level: the automatic choice.
  Algorithm algorithm = (sig.algorithm == Algorithm::kAuto ||
                         sig.algorithm == Algorithm::kHierarchical)
                            ? choose_algorithm(spec.size, sig.count * elem, /*peer_memory=*/true,
                                               cost_model())
                            : sig.algorithm;
  AlgorithmStats& stats = algorithm_stats()[static_cast<int>(algorithm)];

  std::vector<Buffers> segments;
  for (size_t k = 0; k < counts.size(); ++k) {
    segments.push_back(Buffers{in[k], out[k], counts[k], elem, static_cast<int>(k)});
  }
  std::shared_ptr<LocalExchange> exchange;
  Status s =
      join_call(spec.key, spec.rank, spec.size, sig, spec.label, deadline, segments, &exchange);
  if (s.ok()) {
    LocalLink link(exchange, spec.rank, deadline);
    s = run_allreduce(algorithm, link, segments, Reduction{fn, elem});
    if (!s.ok()) link.fail(s);
  }
  if (!s.ok()) {
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  stats.calls.fetch_add(1, std::memory_order_relaxed);
  stats.bytes.fetch_add(sig.count * elem, std::memory_order_relaxed);
  const auto end = std::chrono::steady_clock::now();
  stats.nanoseconds.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count(),
      std::memory_order_relaxed);
  if (trace_enabled() || debug_calls()) {
    auto ns = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    TraceEvent call{str_cat("accl_allreduce ", algorithm_name(algorithm), " ",
                            human_bytes(sig.count * elem)),
                    spec.device, ns(start), ns(end), sig.count * elem, spec.label};
    if (debug_calls()) debug_call(call);
    trace_record(std::move(call));
  }
  return Status::Ok();
}

}  // namespace accl
