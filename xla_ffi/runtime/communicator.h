// A group of devices across processes as jax_accl runs its calls of every collective
// on it: where its ranks live (the layout, derived once per group), a call's schedule
// (the runtime's plan, runtime/call_plan.h, on this layout: which algorithm runs, and
// for the hierarchy the algorithm between hosts and the pipeline's chunks), and the
// group's channels, epoch by epoch.
//
// Recovery. Every rank of the group makes the same calls of a lane in the same order, so
// a call has the same index c on every rank. When call f fails, the first later call of this
// process (index c > f) first agrees with every other process of the group on epoch e + 1
// (jax_accl/recovery.py: each announces "call f failed, I am in call c" in jax.distributed's
// key-value store, then all commit the latest such c, S, within the call's deadline). Calls
// from S on run in a fresh channel space, and this call fails at once if c < S (a peer is
// further on: it came late, or left an earlier agreement by its deadline); the old space's channels
// close when its last call returns, and frames of epoch e can never be read in epoch e + 1 (other
// connections, other segments, the epoch in every frame). A process whose failed call
// is another (one of its ranks finished call f) makes the agreement fail on every
// process, naming both: the processes disagree on which steps happened, which only
// the program can settle. A rank of this process that is still behind, beginning a
// call of an epoch the group has left, fails that call at once. A process that has not
// failed yet is not waited for in vain: its next call on the old channels, which its
// peers poisoned, fails at once and it joins the agreement. Nor is a process known to
// have ended (a peer on shared memory whose pid is gone): every call after the failed
// one fails at once, naming it, without an agreement.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/wait.h"
#include "runtime/call_plan.h"
#include "runtime/channel_space.h"
#include "topology/group_layout.h"

namespace accl {

// How the processes of a group agree to start epoch `epoch` (installed by jax_accl's
// bootstrap: jax_accl/distributed.py, over jax.distributed's key-value store).
struct EpochAgreement {
  uint64_t group;              // the group's id, the same in every process
  uint32_t epoch;              // the epoch to start
  uint64_t failed_call;        // the call whose failure ends the current epoch
  uint64_t call;               // the call this process is in now
  std::vector<int> processes;  // the group's processes, this one included
  int me;                      // this process
  Deadline deadline;
};
// On success *start is the call the new epoch starts at: the latest call any process
// of the group is in (jax_accl/recovery.py).
using AgreeOnEpoch = std::function<Status(const EpochAgreement&, uint64_t* start)>;
void set_epoch_agreement(AgreeOnEpoch agree);

class Communicator {
 public:
  // `devices`: the group's global ids in rank order; `places[r]`: where rank r lives;
  // `rails`: this process's rails between hosts; `process`: this process's index;
  // `maker`: the process's transports (the World). Without a `maker` it only plans.
  static Status make(ChannelMaker* maker, int process, const std::vector<int64_t>& devices,
                     uint64_t lane, const std::vector<RankPlace>& places, int rails,
                     std::shared_ptr<Communicator>* out);

  const GroupLayout& layout() const { return layout_; }
  int rails() const { return rails_; }
  // The schedule of rank `rank`'s call of `bytes`: `forced` as the caller asked (kAuto:
  // the cost model's choice); `cma`: cross-memory attach is allowed (one host, and the
  // World's setting), which the plan uses unless the group learnt it is refused. The
  // runtime's plan (runtime/call_plan.h) on this group's layout and rails.
  // `chunks`: the pipeline's (0 the cost model's, 1 off, n forced).
  CallPlan plan(int rank, size_t bytes, Algorithm forced, bool cma, Collective collective,
                int chunks) const;

  // Begins the next call of this process's rank on global device `device`: *call is its
  // index, *space the channel space it runs in: the current epoch's, or after a failed
  // call the next epoch's, once the group's processes agreed on it (see the top of this
  // file). `where` names the call in errors.
  Status begin_call(int64_t device, const std::string& where, const Deadline& deadline,
                    uint64_t* call, std::shared_ptr<ChannelSpace>* space);
  // A lane's calls of one device run one after another, in the order begin_call numbered
  // them (programs dispatched one after another may overlap on a device, and their
  // calls would share the lane's channels): wait_turn waits, within the deadline, until
  // every earlier call of `device` ended; end_turn ends call `call` (on every path).
  Status wait_turn(int64_t device, uint64_t call, const std::string& where,
                   const Deadline& deadline);
  void end_turn(int64_t device, uint64_t call);
  // Whether cross-memory attach works between this group's processes (one host): unknown
  // (nullopt) until the group's first call that would use it probes it, then what every
  // member learnt alike. A lane's calls run one after another on every member, so the
  // members of one call never disagree on whether it probes.
  std::optional<bool> cross_memory_usable() const;
  void set_cross_memory_usable(bool usable);

  // Call `call`, run in `space`, failed: the group's next call recovers first.
  void call_failed(uint64_t call, const ChannelSpace& space);
  uint64_t recoveries() const;

  // Realignment after a failed step (jax_accl.recover()). XLA starts no call of a launch
  // after a failed one, so a launch that failed in one process may never make its later
  // calls there while another process made (and failed) them: that lane's calls would
  // stop counting the same steps in both. position() is where this process is in the lane:
  // the index of its ranks' next call (the highest) and the current epoch's failed call
  // (kNoCall: none); align() moves every rank of this process to call `next_call`, the
  // calls before it given up, with `failed_call` failed (the group's next call then
  // starts a new epoch, as after any failed call). Only while no call of the lane runs.
  static constexpr uint64_t kNoCall = ~uint64_t{0};
  struct Position {
    uint32_t epoch;
    uint64_t next_call;
    uint64_t failed_call;
  };
  Position position() const;
  void align(uint64_t next_call, uint64_t failed_call);
  const std::vector<int>& processes() const { return processes_; }

 private:
  ChannelMaker* maker_ = nullptr;
  int process_ = 0;  // this process's index
  std::vector<int64_t> devices_;
  uint64_t lane_ = 0;
  std::vector<int> processes_;  // the group's, ascending
  GroupLayout layout_;
  int rails_ = 1;
  mutable std::mutex mutex_;             // held by the thread that recovers; the others wait for it
  std::shared_ptr<ChannelSpace> space_;  // the current epoch's
  uint64_t epoch_start_ = 0;             // the index of the current epoch's first call
  uint64_t failed_call_ = kNoCall;       // the current epoch's first failed call
  std::map<int64_t, uint64_t> next_call_;  // per device of this process
  uint64_t first_call_ = 0;                // no rank's next call is before it (align)
  std::atomic<uint64_t> recoveries_{0};    // read without mutex_ (stats() during a recovery)
  std::atomic<int> cross_memory_{-1};      // -1 unknown, 0 refused, 1 usable
  std::mutex turn_mutex_;                  // never held across a wait for anything but a turn
  std::condition_variable turn_changed_;
  std::map<int64_t, uint64_t> turn_;                // per device: the next call to run
  std::map<int64_t, std::set<uint64_t>> finished_;  // per device: ended out of turn
  uint64_t first_turn_ = 0;                         // no device's turn is before it (align)
};

}  // namespace accl
