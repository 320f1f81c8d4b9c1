// Process-wide counters: calls, bytes and time per algorithm and per collective; bytes per
// transport and rail ("memory", "shm", "tcp:<interface>"); time per phase of the hierarchical
// all-reduce. Lock-free updates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "algorithms/algorithm.h"
#include "transport/channel.h"

namespace accl {

struct AlgorithmStats {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> bytes{0};  // payload bytes of the calls (per rank)
  std::atomic<uint64_t> nanoseconds{0};
  std::atomic<uint64_t> errors{0};
};

std::array<AlgorithmStats, kNumAlgorithms>& algorithm_stats();
// The same counters per collective (all-reduce, reduce-scatter, all-gather, permute).
std::array<AlgorithmStats, kNumCollectives>& collective_stats();

// Counters of one transport or rail; entries live as long as the process.
TrafficStats& traffic_stats(const std::string& key);
std::map<std::string, const TrafficStats*> all_traffic_stats();

enum class Phase : int { kLocalReduceScatter = 0, kBetweenHosts = 1, kLocalAllGather = 2 };
inline constexpr int kNumPhases = 3;
const char* phase_name(Phase phase);
std::array<std::atomic<uint64_t>, kNumPhases>& phase_nanoseconds();

// Calls begun and not yet completed in this process (every path, one per rank), and the
// most seen at once since the last reset_stats(): more than the process's devices means
// calls of one device overlapped.
void call_began();
void call_ended();
int64_t max_calls_in_flight();
int64_t calls_in_flight();  // now

// jax_accl call sites alive in this process: one per lowered call of each executable,
// made when XLA instantiates the executable and freed with it (runtime/collective_site.h).
void call_site_made();
void call_site_freed();
int64_t call_sites();

// Calls XLA made into jax_accl's MPI ABI (xla_ffi/mpiabi/), by MPI function name
// ("MPI_Allreduce"); entries live as long as the process.
AlgorithmStats& xla_collective_stats(const std::string& function);
std::map<std::string, const AlgorithmStats*> all_xla_collective_stats();

void reset_stats();

}  // namespace accl
