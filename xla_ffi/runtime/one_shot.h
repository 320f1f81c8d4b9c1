// Small all-reduces among the device threads of one process, completed by the last
// rank to arrive. Each rank stages its (small) input in the call and returns at once
// with the call pending; the last rank to arrive reduces the inputs once, in rank
// order, writes the result into every rank's output and completes every rank's call,
// each on a call thread (call_threads.h: XLA may run the device's next operations
// inside the completion, and they may block). No device thread sleeps in a
// rendezvous, which is what a small all-reduce costs when eight share two cores. A watchdog fails
// calls whose ranks do not all arrive before the deadline, naming the missing ranks.
#pragma once

#include <functional>
#include <vector>

#include "runtime/allreduce.h"

namespace accl {

// Joins call `spec`; `done` runs exactly once, on this or another thread, after every
// rank's outputs are written (or with the error).
void allreduce_one_shot(CallSpec spec, const std::vector<const void*>& in,
                        const std::vector<void*>& out, const std::vector<uint64_t>& counts,
                        std::function<void(const Status&)> done);

}  // namespace accl
