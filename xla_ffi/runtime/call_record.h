// What a finished call leaves behind, recorded in one place: the stats of its algorithm
// and collective (runtime/stats.h), and where tracing is on (runtime/trace.h) its event,
// one per rail it used and one per phase of the hierarchy.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "algorithms/algorithm.h"
#include "common/wait.h"
#include "runtime/collective_call.h"
#include "runtime/hierarchical_call.h"

namespace accl {

// One rank's finished call run by `algorithm`: stats, and the trace event and debug line
// when those are on. record_error counts a failed call.
void record_call(Algorithm algorithm, const CallSpec& spec, Clock::time_point start,
                 Clock::time_point end, uint64_t bytes);
void record_error(Algorithm algorithm, Collective collective);

// A phase of a call from `from` until now, `moved` bytes (when tracing).
void trace_phase(const char* name, const CallSpec& spec, Clock::time_point from, uint64_t moved);

// One trace event per rail that carried bytes during [start, end).
void trace_rails(const char* phase, const std::map<std::string, uint64_t>& sent_by_rail,
                 int64_t device, Clock::time_point start, Clock::time_point end,
                 const std::string& detail);

// The hierarchy's phases: each phase's time in the stats; when tracing, an event per
// phase of the host's tiers ("local" the threads', "host" the processes') and, between
// hosts (`between` ran there), one per rail and chunk (a chunk's share of the rail).
void record_hierarchy_phases(const HierarchyResult& result, Algorithm between,
                             const CallSpec& spec);

}  // namespace accl
