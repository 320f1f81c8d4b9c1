#include "runtime/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace accl {
namespace {

std::atomic<bool> enabled{false};
std::atomic<bool> debug{false};
std::mutex mutex;
uint64_t dropped = 0;  // events past kMaxTraceEvents in this recording
std::vector<TraceEvent>& events() {
  static std::vector<TraceEvent> list;
  return list;
}

}  // namespace

int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void trace_enable(bool on) { enabled.store(on, std::memory_order_release); }
bool trace_enabled() { return enabled.load(std::memory_order_relaxed); }

void trace_record(TraceEvent event) {
  if (!trace_enabled()) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (events().size() < kMaxTraceEvents) {
    events().push_back(std::move(event));
  } else {
    ++dropped;
  }
}

std::vector<TraceEvent> trace_take(uint64_t* dropped_events) {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<TraceEvent> out;
  out.swap(events());
  if (dropped_events != nullptr) *dropped_events = dropped;
  dropped = 0;
  return out;
}

void set_debug_calls(bool on) { debug.store(on, std::memory_order_release); }
bool debug_calls() { return debug.load(std::memory_order_relaxed); }

void debug_call(const TraceEvent& call) {
  std::fprintf(stderr, "jax_accl DEBUG: device %lld: %s in %.3f ms (%s)\n",
               static_cast<long long>(call.device), call.name.c_str(),
               (call.end_ns - call.start_ns) * 1e-6, call.detail.c_str());
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 3) value /= 1024, ++unit;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g%s", value, units[unit]);
  return buf;
}

}  // namespace accl
