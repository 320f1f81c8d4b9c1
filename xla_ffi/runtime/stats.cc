#include "runtime/stats.h"

#include <memory>
#include <mutex>

namespace accl {
namespace {

std::mutex& traffic_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::unique_ptr<TrafficStats>>& traffic_map() {
  static std::map<std::string, std::unique_ptr<TrafficStats>> m;
  return m;
}

std::map<std::string, std::unique_ptr<AlgorithmStats>>& xla_collective_map() {
  static std::map<std::string, std::unique_ptr<AlgorithmStats>> m;
  return m;
}

void zero(AlgorithmStats& s) {
  s.calls = 0;
  s.bytes = 0;
  s.nanoseconds = 0;
  s.errors = 0;
}

}  // namespace

std::array<AlgorithmStats, kNumAlgorithms>& algorithm_stats() {
  static std::array<AlgorithmStats, kNumAlgorithms> stats;
  return stats;
}

std::array<AlgorithmStats, kNumCollectives>& collective_stats() {
  static std::array<AlgorithmStats, kNumCollectives> stats;
  return stats;
}

TrafficStats& traffic_stats(const std::string& key) {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  auto& slot = traffic_map()[key];
  if (!slot) slot = std::make_unique<TrafficStats>();
  return *slot;
}

AlgorithmStats& xla_collective_stats(const std::string& function) {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  auto& slot = xla_collective_map()[function];
  if (!slot) slot = std::make_unique<AlgorithmStats>();
  return *slot;
}

std::map<std::string, const AlgorithmStats*> all_xla_collective_stats() {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  std::map<std::string, const AlgorithmStats*> out;
  for (auto& [key, value] : xla_collective_map()) out[key] = value.get();
  return out;
}

std::map<std::string, const TrafficStats*> all_traffic_stats() {
  std::lock_guard<std::mutex> lock(traffic_mutex());
  std::map<std::string, const TrafficStats*> out;
  for (auto& [key, value] : traffic_map()) out[key] = value.get();
  return out;
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kLocalReduceScatter: return "local_reduce_scatter";
    case Phase::kBetweenHosts: return "between_hosts";
    case Phase::kLocalAllGather: return "local_all_gather";
  }
  return "?";
}

std::array<std::atomic<uint64_t>, kNumPhases>& phase_nanoseconds() {
  static std::array<std::atomic<uint64_t>, kNumPhases> ns{};
  return ns;
}

namespace {
std::atomic<int64_t> g_in_flight{0};
std::atomic<int64_t> g_max_in_flight{0};
std::atomic<int64_t> g_call_sites{0};
}  // namespace

void call_site_made() { g_call_sites.fetch_add(1, std::memory_order_relaxed); }
void call_site_freed() { g_call_sites.fetch_sub(1, std::memory_order_relaxed); }
int64_t call_sites() { return g_call_sites.load(std::memory_order_relaxed); }

void call_began() {
  const int64_t now = g_in_flight.fetch_add(1, std::memory_order_relaxed) + 1;
  int64_t seen = g_max_in_flight.load(std::memory_order_relaxed);
  while (now > seen && !g_max_in_flight.compare_exchange_weak(seen, now)) {
  }
}

void call_ended() { g_in_flight.fetch_sub(1, std::memory_order_relaxed); }

int64_t max_calls_in_flight() { return g_max_in_flight.load(std::memory_order_relaxed); }
int64_t calls_in_flight() { return g_in_flight.load(std::memory_order_relaxed); }

void reset_stats() {
  g_max_in_flight = g_in_flight.load();
  for (auto& s : algorithm_stats()) zero(s);
  for (auto& s : collective_stats()) zero(s);
  streamed_segments().pair = 0;
  streamed_segments().ring = 0;
  std::lock_guard<std::mutex> lock(traffic_mutex());
  for (auto& [name, s] : xla_collective_map()) zero(*s);
  for (auto& [key, t] : traffic_map()) {
    t->bytes_sent = 0;
    t->bytes_received = 0;
    t->messages_sent = 0;
  }
  for (auto& p : phase_nanoseconds()) p = 0;
}

}  // namespace accl
