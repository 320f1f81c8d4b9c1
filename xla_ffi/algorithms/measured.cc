#include "algorithms/measured.h"

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace accl {
namespace {

// Set from Python (import, calibration), read by device threads choosing an algorithm.
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::pair<int, int>, std::vector<MeasuredLine>>& registry() {
  static std::map<std::pair<int, int>, std::vector<MeasuredLine>> shapes;
  return shapes;
}

}  // namespace

Status set_measured_one_host(int processes, int k, std::vector<MeasuredLine> lines) {
  for (const MeasuredLine& line : lines) {
    for (double v : {line.latency_s, line.per_byte_s}) {
      if (!(v >= 0) || std::isinf(v)) {
        return error(Code::kInvalidArgument, "calibrated line of ", algorithm_name(line.algorithm),
                     ": coefficients must be finite and >= 0");
      }
    }
  }
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (lines.empty()) {
    registry().erase({processes, k});
  } else {
    registry()[{processes, k}] = std::move(lines);
  }
  return Status::Ok();
}

void clear_measured_one_host() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().clear();
}

std::optional<double> measured_one_host_seconds(int processes, int k, Algorithm algorithm,
                                                size_t bytes) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find({processes, k});
  if (it == registry().end()) return std::nullopt;
  for (const MeasuredLine& line : it->second) {
    if (line.algorithm == algorithm) return line.latency_s + double(bytes) * line.per_byte_s;
  }
  return std::nullopt;
}

}  // namespace accl
