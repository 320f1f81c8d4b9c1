#include "runtime/call_sequences.h"

#include <algorithm>
#include <chrono>

#include "common/hash.h"

namespace accl {
namespace {
// Run ids are not ordered (JAX starts each executable's launch ids at a hash of it), so
// finished launches are recognised by their counters' idleness, not by their ids.
constexpr size_t kSweepAbove = 4096;
}  // namespace

size_t CallSequences::KeyHash::operator()(const Key& k) const {
  return Fnv64().mix(static_cast<uint64_t>(k.device)).mix(static_cast<uint64_t>(k.run_id)).value();
}

uint64_t CallSequences::next(int64_t device, int64_t run_id, double timeout_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  longest_timeout_s_ = std::max(longest_timeout_s_, timeout_s);
  const auto idle = std::chrono::duration<double>(std::max(60.0, 2 * longest_timeout_s_));
  if (counters_.size() > kSweepAbove && now - last_sweep_ > std::chrono::seconds(1)) {
    last_sweep_ = now;
    for (auto it = counters_.begin(); it != counters_.end();) {
      it = (now - it->second.used > idle) ? counters_.erase(it) : std::next(it);
    }
  }
  Counter& counter = counters_[Key{device, run_id}];
  counter.used = now;
  return counter.next++;
}

}  // namespace accl
