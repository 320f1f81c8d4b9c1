// One rank's collective call (any row of runtime/collective.h), from every caller (the
// XLA FFI handler's call sites, the MPI library, the native tests) through one function:
// make_call builds the call's spec and start_call runs it. An in-process call runs by
// its plan (runtime/call_plan.h's plan_call, asked once): small ones of XLA's device
// threads by the one-shot protocol (complete when their last rank arrives,
// runtime/one_shot.h), the others to their end among the device threads of this process
// (validate, meet the other ranks in the rendezvous, run the plan's schedule over the
// in-process transport, record). A call across processes runs by runtime/multiprocess.cc
// over the group's communicator, which plans it. A call that is not one-shot runs on a
// call thread of its own (runtime/call_threads.h) or on the caller's thread (run_call,
// for callers that wait).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/call.h"
#include "runtime/call_plan.h"
#include "runtime/group.h"
#include "runtime/rendezvous.h"

namespace accl {

// The spec of call `key` of `group`'s rank (the one place a call's spec is made);
// `issued`: when the caller issued it (the epoch: when it starts running). Its label
// is the group's and the call's index (key.seq).
CallSpec make_call(const CallGroup& group, const CallKey& key, const CallSettings& settings,
                   DType dtype, Clock::time_point issued = {});

// Which thread runs a call: a call thread of its own (XLA's FFI handler, which returns a
// pending future and must not block; its small in-process calls take the one-shot
// protocol, which blocks no thread at all), or the caller's, which waits for the call
// anyway (the MPI library, the native tests): there the call runs its schedule, never
// the one-shot protocol (a waiting thread gains nothing from it).
enum class RunOn { kCallThread, kCallerThread };

// The one function every call goes through. Starts call `spec` on `buffers` (which stay
// valid until `done` runs): `done` runs exactly once, when the outputs are written or
// with the error; with kCallerThread before start_call returns, and an exception (an
// allocation that failed) reaches the caller instead (the MPI library's entry points
// name it). A call thread's calls count in stats()'s calls in flight; the MPI library
// counts its entry points itself.
void start_call(CallSpec spec, CallBuffers buffers, std::function<void(const Status&)> done,
                RunOn run_on = RunOn::kCallThread);

// start_call on the caller's thread: the call's end (within its deadline).
Status run_call(CallSpec spec, CallBuffers buffers);

// The reduce kernel of spec.signature, or an error naming the rank and the call.
Status reduction_for(const CallSpec& spec, Reduction* reduction);

// The runtime's plan (runtime/call_plan.h) of call `spec` among the device threads of this
// process, counts[k] elements of spec.signature's dtype in segment k: `one_shot` where the
// one-shot protocol may run (a call's start; a group across processes that turns out to
// live in one asks for its flat schedule).
CallPlan plan_in_process_call(const CallSpec& spec, const std::vector<uint64_t>& counts,
                              bool one_shot);

// Runs `collective` by `algorithm` over `link` (its row's flat runner): an all-reduce of
// each segment, a reduce-scatter (a segment's `count` is its n blocks of input, n =
// `size`), an all-gather (`count` is its input, one block), a permutation among
// `peers`, an all-to-all (n blocks in, n out) or a ragged all-to-all (the data and its
// layout table).
Status run_collective(Collective collective, Algorithm algorithm, Link& link,
                      const std::vector<Buffers>& segments, int size, const Reduction& reduction,
                      const CollectiveArgs& args);

// start_call's routes besides the one-shot protocol (runtime/one_shot.h). One rank's call
// over its segments in this process, by the schedule `algorithm` (the call's plan):
// `in[k]` -> `out[k]`, counts[k] elements of input each (an all-reduce's output is as large; a
// reduce-scatter's 1/size of it, an all-gather's size times). spec.signature's
// count/segments/layout are filled from `counts`.
Status run_in_process(CallSpec spec, const std::vector<const void*>& in,
                      const std::vector<void*>& out, const std::vector<uint64_t>& counts,
                      Algorithm algorithm);

// The same call for a group whose devices (spec.devices) live in several processes.
// Groups that stay inside this process go to run_in_process.
Status run_across_processes(CallSpec spec, const std::vector<const void*>& in,
                            const std::vector<void*>& out, const std::vector<uint64_t>& counts);

}  // namespace accl
