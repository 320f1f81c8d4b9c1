// Two lanes of cross-memory-attach all-reduces in this process at once, for the tests of
// the ptrace permission (transport/cma.h), in the native tests (bindings/testing.cc) and
// the self-test. Every rank is a thread of this process, and every access a peer makes
// is checked as Yama's ptrace_scope 1 would check it: refused unless this process lets
// its user's processes attach (cross_memory_attach_allowed()).
//
// Lane A's probe always fails (as for a peer in another pid namespace), lane B's succeeds.
// First lane A runs alone; then lane B's ranks enter their call (they hold the
// permission) and wait before probing until lane A has run again, found cross-memory
// attach unusable and ended: lane B must then still probe, copy and finish by it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accl {

struct CmaLanesReport {
  bool allowed_before = false;          // before either lane
  bool allowed_after_lone_lane = true;  // once lane A alone ended
  bool lane_a_usable = true;            // what lane A's ranks found (false by design)
  bool allowed_while_b_waits = false;   // lane A ended again, lane B inside its call
  bool lane_b_usable = false;           // what lane B's ranks found
  bool lane_b_exact = false;            // lane B's outputs are the sum
  uint64_t lane_b_bytes = 0;            // lane B's bytes read and written by cross-memory attach
  uint64_t refused = 0;                 // accesses refused for want of the permission
  bool allowed_after = true;            // once both lanes ended
  std::vector<std::string> errors;      // one per failed rank, lane named
};

CmaLanesReport run_cma_lanes(int ranks, size_t count, double timeout_s);

}  // namespace accl
