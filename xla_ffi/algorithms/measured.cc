#include "algorithms/measured.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace accl {
namespace {

struct Shape {
  std::vector<size_t> sizes;
  std::vector<MeasuredTimes> times;
};

// Set from Python (import, calibration), read by device threads choosing an algorithm.
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::pair<int, int>, Shape>& registry() {
  static std::map<std::pair<int, int>, Shape> shapes;
  return shapes;
}

double interpolate(const std::vector<size_t>& sizes, const std::vector<double>& t, size_t bytes) {
  if (bytes <= sizes.front()) return t.front();
  if (bytes >= sizes.back()) return t.back() * double(bytes) / double(sizes.back());
  size_t i = 1;
  while (sizes[i] < bytes) ++i;  // sizes[i-1] < bytes <= sizes[i]
  const double x0 = double(sizes[i - 1]), x1 = double(sizes[i]);
  return t[i - 1] + (t[i] - t[i - 1]) * (double(bytes) - x0) / (x1 - x0);
}

}  // namespace

void set_measured_one_host(int processes, int k, std::vector<size_t> sizes,
                           std::vector<MeasuredTimes> times) {
  for (size_t i = 1; i < sizes.size(); ++i) {
    if (sizes[i] <= sizes[i - 1]) throw std::invalid_argument("measured sizes must increase");
  }
  for (const MeasuredTimes& row : times) {
    if (row.seconds.size() != sizes.size()) {
      throw std::invalid_argument(std::string("measured times of ") +
                                  algorithm_name(row.algorithm) + ": one per size expected");
    }
  }
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (sizes.empty() || times.empty()) {
    registry().erase({processes, k});
  } else {
    registry()[{processes, k}] = Shape{std::move(sizes), std::move(times)};
  }
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
  for (const MeasuredTimes& row : it->second.times) {
    if (row.algorithm == algorithm) return interpolate(it->second.sizes, row.seconds, bytes);
  }
  return std::nullopt;
}

}  // namespace accl
