// The vocabulary of a call, shared by every part of the runtime and by its callers (the
// FFI call sites, the MPI library, the native tests): which call it is (CallKey), what
// every rank must agree on (Signature), its group as the call names it (CallGroup), its
// settings and spec (CallSettings, CallSpec) and one rank's buffers (CallBuffers). A
// leaf: it includes nothing of the runtime, so any file of it can say what a call is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/dtype.h"
#include "common/wait.h"

namespace accl {

class Group;  // runtime/group.h: where a call's ranks of this process meet, its communicator

struct CallKey {
  int64_t run_id = 0;
  int64_t op_id = 0;
  int64_t group = 0;
  uint64_t seq = 0;
  bool operator==(const CallKey& o) const {
    return run_id == o.run_id && op_id == o.op_id && group == o.group && seq == o.seq;
  }
};

struct CallKeyHash {
  size_t operator()(const CallKey& k) const;
};

// What a rank calls: the same on every rank, or the call is refused.
struct Signature {
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t count = 0;        // elements over all segments
  uint32_t segments = 1;     // fused buffers
  uint64_t layout_hash = 0;  // hash of the segments' lengths
  Algorithm algorithm = Algorithm::kAuto;
  Collective collective = Collective::kAllReduce;
  // bfloat16 on the wire: a float32 sum all-reduce whose messages carry bfloat16
  // (transport/wire_link.h), its buffers float32 throughout.
  bool wire_bf16 = false;
  bool operator==(const Signature& o) const {
    return std::tie(dtype, op, count, segments, layout_hash, algorithm, collective, wire_bf16) ==
           std::tie(o.dtype, o.op, o.count, o.segments, o.layout_hash, o.algorithm, o.collective,
                    o.wire_bf16);
  }
};
// Bytes per element on the wire, the unit of the call's plan and stats: bfloat16's for
// a float32 sum sent as bfloat16 (planned as the bfloat16 sum it is), else the dtype's.
inline size_t wire_elem_size(const Signature& s) {
  return s.wire_bf16 ? dtype_size(DType::kBF16) : dtype_size(s.dtype);
}
// Fills count, segments and layout_hash from the segments' lengths.
void describe_layout(const std::vector<uint64_t>& counts, Signature* signature);
std::string describe(const Signature& signature);

// A group as its calls name it: this rank's place in it and where its ranks meet.
struct CallGroup {
  std::vector<int64_t> devices;  // the members' global device ids, in rank order
  int rank = 0;
  uint64_t lane = 0;  // see CallSpec::lane
  std::string label;  // "<name> group [0 1 2 3]"
  // The group's shared state (every rank of this process the same one): where its
  // calls' ranks meet, its communicator across processes.
  std::shared_ptr<Group> group;
  CollectiveArgs args;  // its collective's arguments (a permutation's peers, a root), as ranks
  bool across_processes = false;  // whether the group's devices live in several processes
};

// A call's settings: fixed at lowering (an FFI call site) or at job start (the MPI
// library). The signature's count, segments and layout come from each call's buffers.
struct CallSettings {
  Signature signature;
  double timeout_s = kDefaultCallTimeoutSeconds;
  int pipeline_chunks = 0;  // see CallSpec::pipeline_chunks
};

struct CallSpec {
  CallKey key;
  std::vector<int64_t> devices;  // the group's global ids in rank order
  bool across_processes = false;
  int rank = 0;
  int64_t device = -1;  // the global device id
  int size = 1;
  uint64_t lane = 0;  // the op within its program, the same in every process (a group's
                      // calls of one lane run in order; lanes run concurrently)
  std::string label;  // e.g. "group [0 1 2 3] op 5 seq 0"
  // The call's group (every rank of the call the same one): where its ranks meet.
  std::shared_ptr<Group> group;
  CollectiveArgs args;  // the collective's arguments: peers to send to and receive from, a root
  Signature signature;
  double timeout_s = kDefaultCallTimeoutSeconds;
  // The hierarchy's pipeline chunks between hosts: 0 the cost model's, 1 off, n forced
  // (JAX_ACCL_PIPELINE_CHUNKS, carried like the deadline).
  int pipeline_chunks = 0;
  // When XLA issued the call (the FFI handler ran): the call's trace event and time
  // start there, waiting for a call thread included. Unset (the native tests): when the
  // call starts running.
  Clock::time_point issued{};
  Clock::time_point start() const { return issued == Clock::time_point{} ? Clock::now() : issued; }
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
  bool wire_bf16 = false;  // float32 sums sent as bfloat16 (Signature::wire_bf16)
};

}  // namespace accl
