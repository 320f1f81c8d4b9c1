// The index of each call of one lowered collective (one call site): the k-th execution
// of the site by device `device` within launch `run_id` is call k there. Every device
// of a group runs the same ops the same number of times per launch, so the index
// matches across the group's ranks. Each group counts its own calls (runtime/group.h: no
// table is shared by the process, nor by a site's groups). Counters idle for more than twice the
// longest timeout seen (and a minute) are dropped: by then every member of the group is done with
// that launch, or has failed.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "common/wait.h"

namespace accl {

class CallSequences {
 public:
  uint64_t next(int64_t device, int64_t run_id, double timeout_s);

 private:
  struct Key {
    int64_t device, run_id;
    bool operator==(const Key& o) const { return device == o.device && run_id == o.run_id; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Counter {
    uint64_t next = 0;
    Clock::time_point used;
  };
  std::mutex mutex_;
  std::unordered_map<Key, Counter, KeyHash> counters_;
  double longest_timeout_s_ = 0;
  Clock::time_point last_sweep_;
};

}  // namespace accl
