// The native side of jax_accl.profiler.trace: while enabled, every all-reduce records
// an event per device (the whole call, and each phase of the hierarchical schedule, per
// rail), on the steady clock; Python takes them and merges them into JAX's trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accl {

struct TraceEvent {
  std::string name;     // e.g. "accl_allreduce ring 16MiB", "inter-host rail0"
  int64_t device = -1;  // the global device id
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t bytes = 0;
  std::string detail;  // group, algorithm, rail
};

int64_t trace_now_ns();
void trace_enable(bool on);
bool trace_enabled();
// Keeps at most kMaxTraceEvents (a few hundred MB); later ones are counted, not kept.
inline constexpr size_t kMaxTraceEvents = 1 << 21;
void trace_record(TraceEvent event);
// The events recorded since the last call, and clears them; *dropped_events (when given)
// counts those past kMaxTraceEvents.
std::vector<TraceEvent> trace_take(uint64_t* dropped_events = nullptr);
std::string human_bytes(uint64_t bytes);

// One line per all-reduce per device on stderr; jax_accl's configuration turns it on
// for JAX_ACCL_DEBUG=DEBUG.
void set_debug_calls(bool on);
bool debug_calls();
void debug_call(const TraceEvent& call);

}  // namespace accl
