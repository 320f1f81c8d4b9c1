// Blocking waits with deadlines. Eight device threads share two cores here, so a
// waiter spins briefly, then sleeps in the kernel (futex) in short slices, checking
// its deadline and the abort flag of its collective between slices.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/status.h"

namespace accl {

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point at;
  static Deadline after_seconds(double seconds) {
    return {Clock::now() +
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))};
  }
  bool expired() const { return Clock::now() >= at; }
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
      __builtin_ia32_pause();
    }
    for (;;) {
      uint32_t seen = load();
      if (pred(seen)) return Status::Ok();
      if (abort != nullptr && abort->load(std::memory_order_acquire)) {
        return Status(Code::kAborted, "aborted");
      }
      if (deadline.expired()) return Status(Code::kTimeout, "timed out");
      sleep_while_equal(seen);
    }
  }

 private:
  void sleep_while_equal(uint32_t seen);
  std::atomic<uint32_t> value_{0};
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace accl
