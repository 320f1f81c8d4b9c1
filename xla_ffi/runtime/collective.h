// The table of collectives: one row per collective the runtime carries, holding all the
// runtime asks about what a call computes (its sizes, its kernel, its plan, its runners
// on each tier). The rest of the runtime looks a call up here instead of switching on
// its kind, so a new collective is its algorithm files and one row (its FFI target, named
// here, is registered from the table: bindings/module.cc).
//
//   collective      output per rank   reduces  one process      flat           by host
//   all-reduce      = input           yes      one-shot, flat   flat           the hierarchy
//   reduce-scatter  input / n         yes      one-shot, flat   direct, ring   scatter-gather
//   all-gather      input · n         no       one-shot, flat   direct, ring   scatter-gather
//   permute         = input           no       one-shot, flat   direct         -
//   all-to-all      = input           no       one-shot, flat   direct         two tiers
//   ragged a2a      = output operand  no       flat             direct         -
//   broadcast       = input           no       one-shot, flat   direct         -
//   reduce          = input           yes      one-shot, flat   direct         -
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/permute.h"
#include "algorithms/scatter_gather.h"
#include "common/wait.h"
#include "runtime/call_plan.h"

namespace accl {

// One segment of a one-shot call (runtime/one_shot.cc) as its last rank writes it:
// every rank's staged input and output of that segment.
struct OneShotSegment {
  int size = 0;
  uint64_t count = 0;  // elements of each rank's input
  std::vector<const void*> staged;
  std::vector<char*> outputs;
  const std::vector<int>* recv_from = nullptr;  // a permutation's source of each rank
  const Reduction* reduction = nullptr;
  int root = -1;  // a rooted collective's root
};

// A collective's two-tier schedule by host (algorithms/scatter_gather_by_host.cc,
// all_to_all_by_host.cc).
using ByHostRunner = Status (*)(Link& in_host, Link& between_hosts, const HostGrid& grid,
                                Algorithm in_host_algorithm, Algorithm between_algorithm,
                                const std::vector<BlockBuffers>& segments,
                                const Reduction& reduction, const ByHostPipeline& pipeline,
                                const Deadline& deadline);

// What a row runs where its plan says kHierarchical (by host), said by the row itself.
enum class ByHost {
  kNever,      // never planned so (a permutation, a ragged all-to-all)
  kHierarchy,  // the all-reduce's tiers: its threads, its host, between hosts
               // (runtime/hierarchical_call.h, which meets the process's ranks)
  kTwoTiers,   // the row's by_host runner: in the host, then between hosts
};

struct CollectiveRow {
  Collective id;
  const char* target;      // "accl_allreduce": its XLA FFI target, its trace events' prefix
  const char* flat_phase;  // "flat": the trace phase of a flat schedule across processes
  bool reduces = false;    // has a reduce kernel (the signature's op)
  bool permutes = false;   // each rank has a peer to send to and one to receive from
  bool rooted = false;     // the group has a root (a rank of it, CollectiveArgs::root)
  // Its operands are the data, the output and a layout table (a ragged all-to-all): its
  // FFI target has an execute handler of its own.
  bool layout_table = false;
  // Elements of a rank's output, for `in` elements of input, in a group of `n`; and a
  // rank's block, the unit of the scatter-gather schedules. Null: sizes the call's own
  // layout describes (a ragged all-to-all's table).
  uint64_t (*output_count)(uint64_t in, uint64_t n) = nullptr;
  uint64_t (*block_count)(uint64_t in, uint64_t n) = nullptr;
  // e.g. "sum", "reduce-scatter (max)", "all-gather": what a rank calls, for errors.
  std::string (*what)(ReduceOp op);
  // The plan of a group on any layout (runtime/call_plan.h's plan_call asks it where the
  // one-shot protocol does not run); the model's time of a plan.
  CallPlan (*plan)(const GroupLayout& layout, int rank, const PlanRequest& request,
                   const CostModel& model);
  double (*predict)(const GroupLayout& layout, const CallPlan& plan, const PlanRequest& request,
                    const CostModel& model);
  // The runners: the one-shot's last rank (null: never one-shot), a flat schedule over
  // one link (all segments), and what runs by host (`by_host_runner`, for kTwoTiers).
  void (*one_shot)(const OneShotSegment& segment) = nullptr;
  Status (*run_flat)(Algorithm algorithm, Link& link, const std::vector<Buffers>& segments,
                     int size, const Reduction& reduction, const CollectiveArgs& args);
  ByHost by_host = ByHost::kNever;
  ByHostRunner by_host_runner = nullptr;
};

const CollectiveRow& collective_row(Collective collective);

// A segment's blocks for the scatter-gather schedules of `collective` among `size` ranks.
std::vector<BlockBuffers> blocks_of(Collective collective, const std::vector<Buffers>& segments,
                                    int size);

}  // namespace accl
