// Telling XLA:CPU's own deadlock from a late rank (issue 47). With many launches of a
// multi-device program in flight, XLA:CPU's client can stop running a launch on some of
// its devices for good: it runs each device's part of a launch, and the dispatch of the
// next launches, on one thread pool of max(cores, devices) threads, and a dispatch blocks
// its thread once the device has 32 launches in flight (jaxlib 0.10's PjRt CPU client:
// CpuPjRtRawLoadedExecutable::Execute's ScopedAcquire on the device's semaphore). The
// devices that got a thread then wait in their first collective (jax_accl's or XLA's) for
// devices that never start: jax.lax collectives end in XLA's "Termination timeout" abort.
//
// It can only happen where the pool has fewer than two threads per device of the process
// (with two, a launch's devices have threads beside the at most one blocked dispatch per
// device): jax_accl sizes it so (jax_accl/cpu_threads.py), and there no call is ever taken
// for stalled. Where the pool is smaller, or of a size jax_accl does not know, a waiting
// call is that deadlock when every rank it waits for runs on a device of this process that
// has begun no jax_accl call of the launch, and the process has been idle (no thread
// computing) for a while, watched without a gap (a stopped process is not an idle one): a
// device that is merely slow computes, and one that has begun the launch holds a thread
// of its own. The call then fails within seconds with
// stall_message, instead of at its timeout. A device only late (a host callback, a
// debugger's prompt) is waited for to the deadline wherever the pool has two threads per
// device.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/wait.h"

namespace accl {

// Device `device` (its global id) begins a jax_accl call of launch `run_id`, and ends
// it (each begun call ends once: its completion, whatever its status).
void note_launch_begun(int64_t device, int64_t run_id);
void note_call_ended(int64_t device);
// How many jax_accl calls device `device` is in now (begun and not ended).
int calls_in_progress(int64_t device);

// Whether a call waiting since `since` for the ranks of `devices` whose `present` flag is 0
// (`devices[r]` rank r's global id; -1 unknown) is XLA:CPU's deadlock: waited at least
// stall_seconds(), none of those devices has begun launch `run_id` or is in a call, and this
// process's threads but jax_accl's call threads (which wait, polling) used less than kIdleCores of
// a core over the last kIdleSeconds. Cheap enough to ask every few milliseconds (it samples the
// process's CPU time at most every 250 ms).
bool xla_launch_stalled(const std::vector<int64_t>& devices, const std::vector<uint8_t>& present,
                        int64_t run_id, Clock::time_point since);

// Why such a call fails: what happened and what to do (its caller names the call).
std::string stall_message(const std::vector<int64_t>& devices, const std::vector<uint8_t>& present,
                          int64_t run_id, Clock::time_point since);

// A call across processes, watched from its start to its end: a watchdog thread ends
// every pending wait of the process (abort_pending_waits_because, with stall_message) once
// such a call has waited stall_seconds() for devices of this process that XLA:CPU never
// started on its launch, the process idle. Its peers in other processes then fail at once
// too. (A call within the process checks this while it waits: rendezvous, one-shot.)
uint64_t watch_call(int64_t run_id, const std::vector<int64_t>& devices);
void unwatch_call(uint64_t token);

// What the watchdog above reported when it ended this process's pending calls ("": none),
// for a call across processes that began after it (`generation`, its deadline's abort
// generation, is newer than the stall's abort): such a call that fails says it too (its
// peers aborted because of the stall, or it began out of step), so that whichever call's
// error the program reads names the stall. Kept until such a call succeeds, or the
// World stops (forget_stall_report).
std::string stall_report(uint64_t generation);
void note_call_across_processes_succeeded(uint64_t generation);
void forget_stall_report();

// XLA:CPU's pool as the client was made: `threads` threads (0: unknown, e.g. the client
// was made before jax_accl was imported) for `devices` devices of this process. Until set,
// unknown. Only a pool of fewer than 2 x devices threads, or an unknown one, can stall.
void set_xla_pool(int threads, int devices);
std::pair<int, int> xla_pool();
bool xla_pool_can_stall();

// JAX_ACCL_STALL_S: how long a call waits for such devices before it fails (0: never,
// the call waits to its deadline as for a late rank); 10 s unless set.
std::atomic<double>& stall_seconds();
inline constexpr double kIdleSeconds = 5.0;
inline constexpr double kIdleCores = 0.05;

}  // namespace accl
