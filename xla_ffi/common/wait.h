// Blocking waits with deadlines. Eight device threads share two cores here, so a
// waiter spins briefly, then sleeps in the kernel (futex) in short slices, checking
// its deadline and the abort flag of its collective between slices.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/cpu.h"
#include "common/status.h"

namespace accl {

// A collective's deadline where nobody set one: JAX_ACCL_TIMEOUT_S's default
// (jax_accl/config.py), which the job passes down with every call.
inline constexpr double kDefaultCallTimeoutSeconds = 120.0;

using Clock = std::chrono::steady_clock;

// jax_accl.abort(): bumps the process's abort generation, which ends every abortable
// wait that began before it (they notice within one sleep slice). Defined in wait.cc, not
// inline here: the Python modules, built with hidden visibility, would each keep a copy
// of their own instead of the shared core's (libaccl_core.so).
extern std::atomic<uint64_t> g_abort_generation;
inline uint64_t abort_generation() { return g_abort_generation.load(std::memory_order_acquire); }
inline void abort_pending_waits() { g_abort_generation.fetch_add(1, std::memory_order_acq_rel); }
// Set while jax_accl stops (World::stop: jax.distributed.shutdown() or exit), which ends
// the pending waits as abort() does: their errors say why.
extern std::atomic<bool> g_stopping;
// Set with g_stopping where the process leaves the job (its exit, jax.distributed's
// shutdown), not where it restarts its jax_accl among the live processes.
extern std::atomic<bool> g_leaving;
// Ends the pending waits as abort_pending_waits() does, their errors giving `why` instead
// of naming jax_accl.abort() (runtime/stall.cc: XLA:CPU never started a launch's devices).
void abort_pending_waits_because(const std::string& why);
// The `why` of the abort that ended waits begun in `generation`, or "" (jax_accl.abort()).
std::string abort_reason(uint64_t generation);

struct Deadline {
  static constexpr uint64_t kNotAbortable = ~uint64_t{0};
  Clock::time_point at;
  uint64_t generation = kNotAbortable;  // the abort generation it began in

  // A call's deadline: ends at `seconds` from now, or at the next jax_accl.abort().
  static Deadline after_seconds(double seconds) { return {in(seconds), abort_generation()}; }
  // Ends at its time only (the acceptor's handshakes, which serve later calls too).
  static Deadline unabortable_after(double seconds) { return {in(seconds), kNotAbortable}; }

  bool aborted() const { return generation != kNotAbortable && generation != abort_generation(); }
  bool expired() const { return aborted() || Clock::now() >= at; }
  // What ended an aborted wait: the abort's reason where it gave one, else a stop or
  // jax_accl.abort().
  std::string abort_words() const {
    std::string why = abort_reason(generation);
    return why.empty() ? stop_or_abort() : why;
  }
  // The error of a wait that ended, `where` and while `waiting` for what: kAborted
  // naming jax_accl.abort(), or kTimeout naming JAX_ACCL_TIMEOUT_S.
  Status ended(const std::string& where, const std::string& waiting) const {
    if (aborted()) {
      if (std::string why = abort_reason(generation); !why.empty()) {
        return Status(Code::kAborted, where + ": " + why + " (while " + waiting + ")");
      }
      return Status(Code::kAborted, where + ": " + stop_or_abort() + " while " + waiting);
    }
    return Status(Code::kTimeout, where + ": timed out " + waiting + " (JAX_ACCL_TIMEOUT_S)");
  }

 private:
  static const char* stop_or_abort() {
    return g_stopping.load(std::memory_order_acquire)
               ? "jax_accl stopped (jax.distributed.shutdown() or exit)"
               : "aborted by jax_accl.abort()";
  }
  static Clock::time_point in(double seconds) {
    return Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
};

// A 32-bit word that threads wait on. Writers call store_and_wake; waiters sleep on
// the word itself, and the waiter count keeps the wake syscall off the fast path.
class Flag {
 public:
  uint32_t load() const { return value_.load(std::memory_order_acquire); }
  void store_and_wake(uint32_t value);
  bool compare_exchange(uint32_t expected, uint32_t desired);
  uint32_t fetch_add_and_wake(uint32_t delta);
  // Wake everybody (used on abort).
  void wake_all();

  // Waits until pred(load()) holds. Returns kTimeout at the deadline and kAborted as
  // soon as *abort becomes true (abort may be null).
  template <typename Pred>
  Status wait(Pred pred, const Deadline& deadline, const std::atomic<bool>* abort) {
    for (int spin = 0; spin < 256; ++spin) {
      if (pred(load())) return Status::Ok();
      cpu_relax();
    }
    for (;;) {
      uint32_t seen = load();
      if (pred(seen)) return Status::Ok();
      if (abort != nullptr && abort->load(std::memory_order_acquire)) {
        return Status(Code::kAborted, "aborted");
      }
      if (deadline.expired()) return deadline.ended("wait", "waiting");
      sleep_while_equal(seen);
    }
  }

 private:
  void sleep_while_equal(uint32_t seen);
  std::atomic<uint32_t> value_{0};
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace accl
