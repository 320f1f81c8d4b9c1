// The MPI ABI layer's part of the native self-test (mpiabi_selftest.cc).
#pragma once

namespace accl {

// Adds its checks and failures (each failure printed) to the counts.
void run_mpiabi_selftest(int* checks, int* failures);

}  // namespace accl
