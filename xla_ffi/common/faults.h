// Faults that tests inject into jax_accl's native core, where a call starts (the MPI
// library, xla_ffi/mpiabi/, and the FFI call sites, runtime/collective_site.cc): only the
// test harness arms them (jax_accl._accl_testing.arm_fault, the native
// self-test); jax_accl._accl, no setting and no environment variable can. An armed
// fault makes the next fault points throw what a failed allocation or thread start
// throws, so that the library's handling of real ones is tested.
#pragma once

namespace accl {

enum class Fault : int {
  kNone = 0,
  kAllocation = 1,   // std::bad_alloc, as operator new throws
  kThreadStart = 2,  // std::system_error (EAGAIN), as std::thread's constructor throws
};

// Arms `fault` for the next `times` fault points of the process (kNone or 0: disarms).
void inject_fault(Fault fault, int times);
// A fault point: throws the armed fault's exception if one is left (counting it down),
// else does nothing. Costs one atomic load when nothing is armed.
void fault_point();

}  // namespace accl
