#include "runtime/stats.h"

namespace accl {

std::array<AlgorithmStats, kNumAlgorithms>& algorithm_stats() {
  static std::array<AlgorithmStats, kNumAlgorithms> stats;
  return stats;
}

void reset_stats() {
  for (auto& s : algorithm_stats()) {
    s.calls = 0;
    s.bytes = 0;
    s.nanoseconds = 0;
    s.errors = 0;
  }
}

}  // namespace accl
