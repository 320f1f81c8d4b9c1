// The one hash of the core's keys, tags and layouts: FNV-1a over 64-bit words. Fast and
// the same in every process; not cryptographic (what must resist a stranger, segment
// names and proofs, is HMAC-SHA256 under the job's secret: common/sha256.h).
#pragma once

#include <cstdint>

namespace accl {

class Fnv64 {
 public:
  Fnv64() = default;
  explicit Fnv64(uint64_t start) : h_(start) {}
  Fnv64& mix(uint64_t word) {
    h_ = (h_ ^ word) * kPrime;
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  static constexpr uint64_t kOffset = 1469598103934665603ull;
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h_ = kOffset;
};

}  // namespace accl
