// Threads for the all-reduces that block (the multi-step algorithms, and everything
// across processes). The FFI handler hands such a call to a call thread and returns a
// pending future, so no XLA thread ever blocks inside jax_accl. Every call gets a thread
// of its own: XLA:CPU runs independent calls of one device concurrently, in an order
// that may differ by device, so calls queued behind each other on one thread per device
// could wait for each other. The thread that finishes a call completes its future, and
// XLA continues the device's program on it; the next call takes another thread.
// Idle threads are kept for reuse (a few of them for long).
#pragma once

#include <functional>

namespace accl {

void run_on_call_thread(std::function<void()> job);

}  // namespace accl
