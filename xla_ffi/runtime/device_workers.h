// One worker thread per device for the all-reduces that block (the multi-step
// algorithms, and everything across processes). The FFI handler hands such a call to
// its device's worker and returns a pending future, so no XLA thread ever blocks inside
// jax_accl: XLA may run a device's next operations on whatever thread completed the
// previous one (for instance the thread that completed a one-shot call), and a blocking
// wait there could hold up other devices' work. Jobs of one device run in order.
#pragma once

#include <cstdint>
#include <functional>

namespace accl {

void run_on_device_worker(int64_t device, std::function<void()> job);

}  // namespace accl
