#include "common/wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <deque>
#include <mutex>
#include <string>

namespace accl {

std::atomic<uint64_t> g_abort_generation{0};
std::atomic<bool> g_stopping{false};
std::atomic<bool> g_leaving{false};

namespace {
// The reasons of the last aborts that gave one, by the generation whose waits each
// ended (a few: a waiter reads its own soon after, even if another abort came since).
struct AbortReason {
  std::mutex mutex;
  std::deque<std::pair<uint64_t, std::string>> recent;
};
AbortReason& abort_reason_slot() {
  static AbortReason* r = new AbortReason;  // never destroyed: waits may outlive exit
  return *r;
}
}  // namespace

void abort_pending_waits_because(const std::string& why) {
  AbortReason& r = abort_reason_slot();
  // The generation this abort ends, taken as it ends it (a concurrent abort() ends the
  // next one, with its own words).
  std::lock_guard<std::mutex> lock(r.mutex);
  r.recent.emplace_back(g_abort_generation.fetch_add(1, std::memory_order_acq_rel), why);
  if (r.recent.size() > 8) r.recent.pop_front();
}

std::string abort_reason(uint64_t generation) {
  AbortReason& r = abort_reason_slot();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& [ended, why] : r.recent) {
    if (ended == generation) return why;
  }
  return std::string();
}

namespace {
long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}
// A sleeping waiter re-checks abort flags and deadlines at least this often.
constexpr long kSliceNs = 5'000'000;
}  // namespace

void Flag::store_and_wake(uint32_t value) {
  value_.store(value, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) != 0) wake_all();
}

bool Flag::compare_exchange(uint32_t expected, uint32_t desired) {
  bool swapped = value_.compare_exchange_strong(expected, desired, std::memory_order_seq_cst);
  if (swapped && waiters_.load(std::memory_order_seq_cst) != 0) wake_all();
  return swapped;
}

uint32_t Flag::fetch_add_and_wake(uint32_t delta) {
  uint32_t before = value_.fetch_add(delta, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) != 0) wake_all();
  return before;
}

void Flag::wake_all() { futex(&value_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr); }

void Flag::sleep_while_equal(uint32_t seen) {
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  if (value_.load(std::memory_order_seq_cst) == seen) {
    timespec slice{0, kSliceNs};
    futex(&value_, FUTEX_WAIT_PRIVATE, seen, &slice);
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace accl
