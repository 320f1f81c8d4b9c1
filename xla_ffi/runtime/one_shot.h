// Small collectives among the device threads of one process, completed by the last
// rank to arrive. Each rank stages its (small) input in the call and returns at once
// with the call pending; the last rank to arrive computes every rank's output from the
// staged inputs (an all-reduce: reduced once, in rank order, and copied; a
// reduce-scatter: block r of every input reduced into rank r's output; an all-gather:
// the inputs back to back in rank order; a permutation: the input of the rank that
// sends to it, or zeros), writes it and completes every rank's call,
// each on a call thread (call_threads.h: XLA may run the device's next operations
// inside the completion, and they may block). No device thread sleeps in a
// rendezvous, which is what a small all-reduce costs when eight share two cores. The
// pending calls are the other mode of the call's meeting place (spec.group's, whose
// table only its own calls lock); a watchdog fails those whose ranks do not all arrive
// before the deadline, naming the missing ranks (missing_ranks_end, as a rendezvous).
#pragma once

#include <functional>
#include <vector>

#include "runtime/collective_call.h"

namespace accl {

// Joins call `spec` (its collective is spec.signature.collective; a permutation's
// source is spec.args.recv_from); counts[k] elements of segment k in. `done` runs
// exactly once, on this or another thread, after every rank's outputs are written (or
// with the error).
void one_shot(CallSpec spec, const std::vector<const void*>& in, std::vector<void*> out,
              const std::vector<uint64_t>& counts, std::function<void(const Status&)> done);

}  // namespace accl
