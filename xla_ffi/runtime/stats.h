// Process-wide counters: calls, bytes and time per algorithm. Lock-free updates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "algorithms/algorithm.h"

namespace accl {

struct AlgorithmStats {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> bytes{0};  // payload bytes of the calls (per rank)
  std::atomic<uint64_t> nanoseconds{0};
  std::atomic<uint64_t> errors{0};
};

std::array<AlgorithmStats, kNumAlgorithms>& algorithm_stats();
void reset_stats();

}  // namespace accl
