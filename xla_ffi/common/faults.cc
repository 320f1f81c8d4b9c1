#include "common/faults.h"

#include <atomic>
#include <cerrno>
#include <new>
#include <system_error>

namespace accl {
namespace {
std::atomic<int> g_fault{0};
std::atomic<int> g_left{0};
}  // namespace

void inject_fault(Fault fault, int times) {
  g_left.store(0);
  g_fault.store(static_cast<int>(fault));
  g_left.store(fault == Fault::kNone ? 0 : times);
}

void fault_point() {
  int left = g_left.load(std::memory_order_relaxed);
  while (left > 0 && !g_left.compare_exchange_weak(left, left - 1)) {
  }
  if (left <= 0) return;
  if (static_cast<Fault>(g_fault.load()) == Fault::kThreadStart) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "injected: thread start");
  }
  throw std::bad_alloc();
}

}  // namespace accl
