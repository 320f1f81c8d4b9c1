// Measured one-host times (`python -m jax_accl.bench --calibrate`): for a group shape
// (processes x devices per process), the seconds per all-reduce of each forced algorithm
// at a grid of sizes. Where a shape has them, the automatic choice on one host takes
// the algorithm with the least interpolated time instead of the cost model's guess:
// between grid sizes time is interpolated linearly in bytes, below the grid it is the
// smallest size's time (latency-bound), above it the largest size's time scaled with
// the bytes (bandwidth-bound; so the largest size's winner wins above the grid).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "algorithms/algorithm.h"

namespace accl {

struct MeasuredTimes {
  Algorithm algorithm;
  std::vector<double> seconds;  // one per grid size
};

// Replaces the times of shape processes x k (an empty `times` forgets the shape).
// Throws std::invalid_argument on a grid that is not increasing or a row of another length.
void set_measured_one_host(int processes, int k, std::vector<size_t> sizes,
                           std::vector<MeasuredTimes> times);
void clear_measured_one_host();
// The measured interpolation of `algorithm` at `bytes` on processes x k, if measured.
std::optional<double> measured_one_host_seconds(int processes, int k, Algorithm algorithm,
                                                size_t bytes);

}  // namespace accl
