// Calibrated one-host times (`python -m jax_accl.bench --calibrate`): for a group shape
// (processes x devices per process), each candidate algorithm's time per all-reduce as
// a line, latency + bytes·per_byte, fitted to its times measured there at sizes from
// 1 KiB to 4 MiB. Where a shape has lines for all its candidates, the automatic choice on
// one host takes the least of them instead of the cost model's general guess.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/status.h"

namespace accl {

struct MeasuredLine {
  Algorithm algorithm;
  double latency_s;
  double per_byte_s;
};

// Replaces the lines of shape processes x k (none: forgets the shape); an invalid-argument
// error (and nothing replaced) on a negative or non-finite coefficient.
Status set_measured_one_host(int processes, int k, std::vector<MeasuredLine> lines);
void clear_measured_one_host();
// The calibrated time of `algorithm` at `bytes` on processes x k, if calibrated.
std::optional<double> measured_one_host_seconds(int processes, int k, Algorithm algorithm,
                                                size_t bytes);

}  // namespace accl
