// One lowered jax_accl collective (any row of runtime/collective.h) in one executable (a
// call site), made once when XLA instantiates the executable (the FFI instantiate stage)
// from the attributes fixed at lowering, and shared by every device that runs the
// executable. Made once: the group table (which group and rank each device is, the
// members' global ids, the labels that name the call in errors and profiles), checked
// then, so a call only looks its device up, numbers itself (its group's count, group.h)
// and goes through the runtime's one door (runtime/collective_call.h, start_call).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/collective_call.h"

namespace accl {

// The attributes of the call as lowered (jax_accl/primitives/lowering.py): `groups`, the
// replica groups of partition ids row by row, each padded with -1 to `group_size`;
// `devices`, the global device id of every partition id; `op_id ^ lane` names the op,
// the same in every process; `processes`, how many processes the program spans.
struct SiteAttributes {
  Collective collective = Collective::kAllReduce;
  std::vector<int64_t> groups;
  int64_t group_size = 0;
  int64_t op = 0;
  int64_t algorithm = 0;
  int64_t op_id = 0;
  int64_t lane = 0;
  int64_t timeout_ms = 0;
  std::string name;
  std::vector<int64_t> devices;
  int64_t processes = 1;
  // The collective's arguments, as its row reads them: a permutation's partition id each
  // partition sends to (-1: none); a rooted collective's root, a rank of every group.
  std::vector<int64_t> args;
  // JAX_ACCL_PIPELINE_CHUNKS as the call was lowered: 0 the cost model's, 1 off, n forced.
  int64_t pipeline_chunks = 0;
};

class CollectiveSite {
 public:
  // An error names what is wrong with the attributes.
  static Status make(SiteAttributes attributes, std::unique_ptr<CollectiveSite>* out);

  ~CollectiveSite();
  CollectiveSite(const CollectiveSite&) = delete;
  CollectiveSite& operator=(const CollectiveSite&) = delete;

  const std::string& name() const { return name_; }
  Collective collective() const { return settings_.signature.collective; }
  ReduceOp op() const { return settings_.signature.op; }
  // Device `device`'s (its global id: XLA:CPU's device ordinal) call of launch `run_id`;
  // `done` runs exactly once, on this or another thread, when the outputs are written or
  // with the error (an exception while starting it included). `issued`: when XLA issued
  // it (its trace event starts there).
  void run(int64_t device, int64_t run_id, CallBuffers buffers, Clock::time_point issued,
           std::function<void(const Status&)> done);

 private:
  CollectiveSite();
  struct Reply;
  // run's work, which may throw (run makes an exception the call's error).
  void start(int64_t device, int64_t run_id, CallBuffers buffers, Clock::time_point issued,
             const std::shared_ptr<Reply>& reply);
  struct Member {
    int64_t group = 0;  // the group's index among the site's
    CallGroup call_group;
  };
  // Whether each operand's and result's counts fit the collective over `member`'s group.
  Status check_counts(const Member& member, const CallBuffers& buffers) const;
  std::string name_;
  CallSettings settings_;  // the signature's op, algorithm and collective
  int64_t op_key_ = 0;
  // The members by global device id: the ids sorted (a call's lookup reads them in a
  // row, where a tree's nodes were scattered cache lines to miss on every call), and
  // each id's member at the same index.
  std::vector<int64_t> member_ids_;
  std::vector<Member> members_;
  std::vector<int64_t> devices_;  // the global id of every partition id
};

}  // namespace accl
