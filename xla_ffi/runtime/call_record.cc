#include "runtime/call_record.h"

#include <chrono>

#include "runtime/collective.h"
#include "runtime/stats.h"
#include "runtime/trace.h"

namespace accl {
namespace {

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void record_call(Algorithm algorithm, const CallSpec& spec, Clock::time_point start,
                 Clock::time_point end, uint64_t bytes) {
  for (AlgorithmStats* stats : {&algorithm_stats()[static_cast<int>(algorithm)],
                                &collective_stats()[static_cast<int>(spec.signature.collective)]}) {
    stats->calls.fetch_add(1, std::memory_order_relaxed);
    stats->bytes.fetch_add(bytes, std::memory_order_relaxed);
    stats->nanoseconds.fetch_add(ns_of(end) - ns_of(start), std::memory_order_relaxed);
  }
  if (trace_enabled() || debug_calls()) {
    const char* target = collective_row(spec.signature.collective).target;
    TraceEvent call{str_cat(target, " ", algorithm_name(algorithm), " ", human_bytes(bytes)),
                    spec.device,
                    ns_of(start),
                    ns_of(end),
                    bytes,
                    spec.label};
    if (debug_calls()) debug_call(call);
    trace_record(std::move(call));
  }
}

void record_error(Algorithm algorithm, Collective collective) {
  algorithm_stats()[static_cast<int>(algorithm)].errors.fetch_add(1, std::memory_order_relaxed);
  collective_stats()[static_cast<int>(collective)].errors.fetch_add(1, std::memory_order_relaxed);
}

void trace_phase(const char* name, const CallSpec& spec, Clock::time_point from, uint64_t moved) {
  if (!trace_enabled()) return;
  trace_record(TraceEvent{name, spec.device, ns_of(from), ns_of(Clock::now()), moved, spec.label});
}

void trace_rails(const char* phase, const std::map<std::string, uint64_t>& sent_by_rail,
                 int64_t device, Clock::time_point start, Clock::time_point end,
                 const std::string& detail) {
  if (!trace_enabled()) return;
  for (const auto& [rail, bytes] : sent_by_rail) {
    const bool between_hosts = rail != "shm" && rail != "memory";
    trace_record(TraceEvent{str_cat(phase, between_hosts ? " rail " : " ", rail), device,
                            ns_of(start), ns_of(end), bytes, detail});
  }
}

void record_hierarchy_phases(const HierarchyResult& result, Algorithm between,
                             const CallSpec& spec) {
  uint64_t between_bytes = 0;
  for (const PhaseRecord& p : result.times) {
    if (p.kind == PhaseRecord::kBetweenHosts) between_bytes += p.bytes;
  }
  auto& phase_ns = phase_nanoseconds();
  for (const PhaseRecord& p : result.times) {
    if (p.kind == PhaseRecord::kStep) {  // a step between hosts: traced, not a phase of stats
      if (trace_enabled()) {
        trace_record(TraceEvent{p.peer >= 0
                                    ? str_cat("step between hosts ", p.tier, " from ", p.peer)
                                    : str_cat("step between hosts ", p.tier, " sends"),
                                spec.device, ns_of(p.start), ns_of(p.end), p.bytes,
                                str_cat(spec.label, ", chunk ", p.chunk)});
      }
      continue;
    }
    phase_ns[static_cast<int>(p.kind)].fetch_add(ns_of(p.end) - ns_of(p.start),
                                                 std::memory_order_relaxed);
    if (!trace_enabled()) continue;
    if (p.kind == PhaseRecord::kBetweenHosts) {
      std::map<std::string, uint64_t> share;
      for (const auto& [rail, sent] : result.sent_by_rail) {
        share[rail] =
            between_bytes ? static_cast<uint64_t>(double(sent) * p.bytes / between_bytes) : 0;
      }
      trace_rails(str_cat("inter-host ", algorithm_name(between)).c_str(), share, spec.device,
                  p.start, p.end, spec.label);
    } else {
      const char* name = p.kind == PhaseRecord::kReduceScatter
                             ? (p.tier == 0 ? "local reduce-scatter" : "host reduce-scatter")
                             : (p.tier == 0 ? "local all-gather" : "host all-gather");
      trace_record(
          TraceEvent{name, spec.device, ns_of(p.start), ns_of(p.end), p.bytes, spec.label});
    }
  }
}

}  // namespace accl
