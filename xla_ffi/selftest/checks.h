// What the self-test's parts share: counted checks, and running a call's ranks on threads
// over random integer inputs whose sum is known exactly.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace accl {

// Counts checks and failures; prints each failure, prefixed with `who` where set.
struct Checks {
  int checks = 0, failures = 0;
  std::string who;
  void expect(bool ok, const std::string& what) {
    ++checks;
    if (ok) return;
    ++failures;
    if (who.empty()) {
      std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    } else {
      std::fprintf(stderr, "FAIL (%s): %s\n", who.c_str(), what.c_str());
    }
  }
};

inline std::vector<std::vector<int32_t>> random_inputs(int n, size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count));
  for (auto& v : in) {
    for (auto& x : v) x = static_cast<int32_t>(rng());
  }
  return in;
}

// The element-wise sum, wrapping as the int32 kernels do.
inline std::vector<int32_t> reference_sum(const std::vector<std::vector<int32_t>>& in) {
  std::vector<int32_t> out(in[0].size(), 0);
  for (const auto& v : in) {
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = static_cast<int32_t>(static_cast<uint32_t>(out[i]) + static_cast<uint32_t>(v[i]));
  }
  return out;
}

// Runs body(rank) on n threads; returns the statuses.
inline std::vector<Status> on_threads(int n, const std::function<Status(int)>& body) {
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { status[r] = body(r); });
  for (auto& t : threads) t.join();
  return status;
}

}  // namespace accl
