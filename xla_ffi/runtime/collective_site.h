// One lowered jax_accl collective (all-reduce, reduce-scatter or all-gather) in one
// executable (a call site), made once when XLA
// instantiates the executable (the FFI instantiate stage) from the attributes fixed at
// lowering, and shared by every device that runs the executable. Made once: the group
// table (which group and rank each device is, the members' global ids, the labels that
// name the call in errors and profiles), checked then, so a call only looks its device
// up. Per call: the call's index (runtime/call_sequences.h) and the route: small
// in-process calls complete when their last rank arrives (runtime/one_shot.h), every
// other call runs on a call thread of its own (runtime/call_threads.h), in one process
// (runtime/collective_call.h, run_in_process) or across processes (run_across_processes,
// over the group's communicator).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/call_sequences.h"
#include "runtime/collective_call.h"

namespace accl {

// The attributes of the call as lowered (jax_accl/primitives/lowering.py): `groups`, the
// replica groups of partition ids row by row, each padded with -1 to `group_size`;
// `devices`, the global device id of every partition id; `op_id ^ lane` names the op,
// the same in every process; `processes`, how many processes the program spans.
struct SiteAttributes {
  Collective collective = Collective::kAllReduce;  // from the target's name
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
  // A permutation's: the partition id each partition sends to (-1: none).
  std::vector<int64_t> send_to;
  // JAX_ACCL_PIPELINE_CHUNKS as the call was lowered: 0 the cost model's, 1 off, n forced.
  int64_t pipeline_chunks = 0;
};

// One device's buffers of one call: in[k] -> out[k], counts[k] elements of `dtype` in
// and out_counts[k] out (the same for an all-reduce; 1/n of it for a reduce-scatter of
// a group of n, n times for an all-gather).
struct CallBuffers {
  DType dtype = DType::kF32;
  std::vector<const void*> in;
  std::vector<void*> out;
  std::vector<uint64_t> counts;
  std::vector<uint64_t> out_counts;
};

class CollectiveSite {
 public:
  // An error names what is wrong with the attributes.
  static Status make(SiteAttributes attributes, std::unique_ptr<CollectiveSite>* out);

  ~CollectiveSite();
  CollectiveSite(const CollectiveSite&) = delete;
  CollectiveSite& operator=(const CollectiveSite&) = delete;

  const std::string& name() const { return name_; }
  // Device `device`'s (its global id: XLA:CPU's device ordinal) call of launch `run_id`;
  // `done` runs exactly once, on this or another thread, when the outputs are written or
  // with the error. `issued`: when XLA issued it (its trace event starts there).
  void run(int64_t device, int64_t run_id, CallBuffers buffers, Clock::time_point issued,
           std::function<void(const Status&)> done);

 private:
  CollectiveSite();
  struct Member {
    int64_t group = 0;
    int rank = 0;
    std::vector<int64_t> devices;  // the group's global ids, in rank order
    std::string label;             // "<name> group [0 1 2 3]"
    PermutePeers peers;            // a permutation's, as ranks of the group
  };
  // Whether each operand's and result's counts fit the collective over `member`'s group.
  Status check_counts(const Member& member, const CallBuffers& buffers) const;
  // Device `device`'s call of launch `run_id` in `member`'s group, numbered.
  CallSpec spec_of(const Member& member, int64_t device, int64_t run_id, DType dtype,
                   Clock::time_point issued);
  std::string name_;
  Signature signature_;  // op and algorithm; the rest comes from each call's buffers
  int64_t op_key_ = 0;
  uint64_t lane_ = 0;
  double timeout_s_ = 0;
  int pipeline_chunks_ = 0;
  bool in_process_ = true;
  std::map<int64_t, Member> members_;  // by global device id
  std::vector<int64_t> devices_;       // the global id of every partition id
  CallSequences sequences_;
  // Where this process's ranks of its calls meet; calls hold it (CallSpec) to their end.
  std::shared_ptr<Rendezvous> rendezvous_;
};

}  // namespace accl
