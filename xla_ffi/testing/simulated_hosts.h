// The hierarchical all-reduce with a thread per rank on simulated hosts, for the native
// tests (bindings/testing.cc) and the self-test: the layout is real (topology/), the
// processes and hosts are simulated. A simulated process's threads share peer memory
// (LocalExchange, as the runtime's device threads); the tier between processes and the
// tier between hosts use the channels `make_pair` makes (memory rings, shm or TCP).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/dtype.h"
#include "runtime/call_plan.h"
#include "topology/group_layout.h"
#include "transport/channel_link.h"

namespace accl {

struct SimulatedCall {
  std::vector<RankPlace> places;  // where every rank lives
  std::vector<const void*> in;    // per rank
  std::vector<void*> out;
  std::vector<uint64_t> counts;          // elements per rank (ranks may disagree: an error)
  std::vector<uint64_t> segment_counts;  // cut every buffer into these segments (last: rest)
  DType dtype = DType::kI32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm between = Algorithm::kAuto;  // kAuto: the cost model's choice
  int chunks = 0;                        // pipeline chunks; 0: as the runtime chooses
  int rails = 1;                         // the rails the plan counts on between hosts
  double timeout_s = 30.0;
  // Runs on rank r's thread before its call (the self-test arms allocation failures).
  std::function<void(int rank)> before_rank;
};

// What one rank ran: the runtime's plan for the call (runtime/call_plan.h, with the call's
// forced choices) and the phases its run recorded.
struct SimulatedRun {
  CallPlan plan;
  int reduce_scatters = 0;  // local tier phases, every chunk's
  int between_hosts = 0;    // steps between hosts, one per chunk
  int all_gathers = 0;
};

// One status per rank; a malformed call (bad layout, no kernel) fails every rank. An
// exception that unwinds a rank's call (an allocation that failed) is its error; a rank
// that fails poisons all its channels, as the runtime poisons the call's channel space
// (runtime/multiprocess.cc), so that its peers fail at once. With `ran`, also what every
// rank ran.
std::vector<Status> run_on_simulated_hosts(const SimulatedCall& call, const PairMaker& make_pair,
                                           std::vector<SimulatedRun>* ran = nullptr);

}  // namespace accl
