// The by-host reduce-scatter and all-gather and their pipeline stage (InOrderThread) in
// the native self-test (by_host_selftest.cc).
#pragma once

namespace accl {

// Adds its checks and failures (each failure printed) to the counts.
void run_by_host_selftest(int* checks, int* failures);

}  // namespace accl
