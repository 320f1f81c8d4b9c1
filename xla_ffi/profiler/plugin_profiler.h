// jax_accl's native events in every profiling session of the process: a profiler plugin
// (plugin_abi.h) that XLA's profiler starts and stops with each session (jax.profiler.
// trace, start_trace/stop_trace, a capture through jax.profiler.start_server) and asks
// for a plane, "/device:CUSTOM:jax_accl": a line per device, an event per all-reduce
// (its algorithm, bytes and call) and per phase of its schedule (the reduce-scatter and
// all-gather of each tier, the step between hosts on each rail with the rail's bytes,
// cross-memory attach), on the profiler's clock. Outside a session nothing is recorded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/plugin_abi.h"
#include "runtime/trace.h"

namespace accl {

inline constexpr const char* kProfilerPlaneName = "/device:CUSTOM:jax_accl";
// Clear of the ids XLA gives its own planes (0, 1, ... in order of creation).
inline constexpr int64_t kProfilerPlaneId = 100;

// The PJRT_Api head whose extension chain holds the profiler extension; lives forever.
const xla_abi::PjrtApiHead* profiler_plugin_api();

// The serialized XSpace of `events` (steady-clock ns), shifted by `clock_offset_ns` onto
// the profiler's clock.
std::string events_to_xspace(const std::vector<TraceEvent>& events, int64_t clock_offset_ns);

// The profiler's clock (epoch ns, as XLA's host tracer reads it) minus the trace clock.
int64_t profiler_clock_offset_ns();

}  // namespace accl
