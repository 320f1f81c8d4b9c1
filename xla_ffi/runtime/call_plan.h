// The runtime's plan of a call: the one place where a call's schedule is chosen, plan_call.
// Every path of the runtime asks it: a call among the device threads of this process (on
// one_process_layout, which one-shot protocol or flat schedule it runs) and the
// Communicator of a group that spans processes; the collective's row (runtime/collective.h)
// holds each collective's own choice. The simulated hosts of the native tests and
// jax_accl.plan (bindings/plan.cc) call plan_call too, so what they report is the plan
// the runtime runs.
//
// The choice, for a group laid out as topology/group_layout.h says:
//   one process      small (kOneShotBytes staged or received per rank), direct or
//                    automatic, in a program of one process, of a collective with a
//                    one-shot writer: the one-shot asynchronous protocol
//                    (runtime/one_shot.h); else `forced`, or for kAuto (and kHierarchical,
//                    which has one level there) the model's pick among the flat algorithms
//                    over peer memory;
//   one host         `forced` flat algorithms run over all devices; the automatic choice is
//                    choose_one_host's (flat, cross-memory attach, or the hierarchy);
//   several hosts    flat when forced, else the hierarchy: between hosts the owners of a
//                    slice run choose_between_hosts' algorithm on their sub-slice, and the
//                    buffer is pipelined in choose_pipeline_chunks' chunks (or
//                    JAX_ACCL_PIPELINE_CHUNKS'), streamed where the step between hosts
//                    streams them (algorithms/hierarchical.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/scatter_gather.h"
#include "algorithms/select.h"
#include "topology/group_layout.h"

namespace accl {

// How a call's data moves through its schedule.
enum class Protocol : int {
  kOneShot = 0,   // the last rank to arrive reduces every rank's input (runtime/one_shot.h)
  kWhole = 1,     // the schedule runs once over the whole buffer
  kChunked = 2,   // the hierarchy's pipeline, each chunk's step between hosts run whole
  kStreamed = 3,  // the hierarchy's pipeline, the chunks streamed between hosts
};
const char* protocol_name(Protocol protocol);

struct CallPlan {
  // A flat algorithm over all ranks, kReduceBroadcast (peer memory in one process, or
  // cross-memory attach on one host) or kHierarchical.
  Algorithm schedule = Algorithm::kAuto;
  Algorithm between = Algorithm::kAuto;  // hierarchical, between hosts (kAuto: not this rank)
  int chunks = 1;                        // hierarchical: pipeline chunks
  Protocol protocol = Protocol::kWhole;
};

// The part of a call's plan that decides what crosses one link, as every frame carries
// it (transport/channel_link.h): processes whose settings differ (JAX_ACCL_ALGORITHM,
// JAX_ACCL_PIPELINE_CHUNKS, another calibration of the cost model) plan a call
// differently, and fail at its first frame naming both plans instead of reading each
// other's messages as a length mismatch or waiting to the deadline.
struct WirePlan {
  Algorithm schedule = Algorithm::kAuto;
  Algorithm between = Algorithm::kAuto;  // on the link between hosts only
  int chunks = 1;
  Protocol protocol = Protocol::kWhole;
  bool chunks_forced = false;  // by host: JAX_ACCL_PIPELINE_CHUNKS, not cut by size
};
uint64_t encode_wire_plan(const WirePlan& plan);
WirePlan decode_wire_plan(uint64_t word);
// e.g. "hierarchical in 4 chunks, direct between hosts (streamed)", "ring".
std::string describe_wire_plan(uint64_t word);

// What a call asks for, besides its group.
struct PlanRequest {
  size_t bytes = 0;                      // per rank, every segment
  Algorithm forced = Algorithm::kAuto;   // as the caller asked (kAuto: the model's choice)
  bool cma = false;                      // cross-memory attach is usable (one host)
  int rails = 1;                         // this process's rails between hosts
  int chunks = 0;                        // pipeline chunks: 0 the model's, n forced
  Algorithm between = Algorithm::kAuto;  // forced between hosts (the native tests only)
  bool one_shot = false;                 // the program runs in one process (FFI handler)
  Collective collective = Collective::kAllReduce;  // what the call computes
};

// JAX_ACCL_PIPELINE_CHUNKS, as jax_accl's configuration sets it: 0 lets the cost model
// choose (choose_pipeline_chunks), 1 turns pipelining off, n > 1 forces n chunks.
int& pipeline_chunks_setting();
// The algorithm between hosts every hierarchical all-reduce of this process runs where
// its request does not force one: kAuto (the default) the model's choice. Set only by
// bench --steps (_accl.set_between_hosts), to time each schedule's steps in one job.
std::atomic<Algorithm>& between_hosts_setting();

// The most a rank of a one-shot call stages or receives (all segments).
constexpr size_t kOneShotBytes = 64 << 10;

// The algorithm of a reduce-scatter or all-gather of `bytes` of input per rank among `n`
// ranks: `forced` (direct or ring), or direct where the ranks read each other's memory
// in place (`peer_memory`: threads of one process) or the input is small, else ring.
Algorithm plan_scatter_gather(int n, size_t bytes, Algorithm forced, bool peer_memory);

// Whether a reduce-scatter or all-gather of group `g` runs by host
// (algorithms/scatter_gather_by_host.cc): more than one host, each with the same
// number (more than one) of the group's ranks.
bool runs_by_host(const GroupLayout& g);

// The two tiers of a reduce-scatter or all-gather by host (runtime/multiprocess.cc's
// scatter_gather_by_host): among a host's ranks, then among each position's ranks on
// every host, each direct or ring as plan_scatter_gather chooses for its size;
// `block_bytes` is one rank's block (all segments). The pipeline: `chunks_setting`
// chunks per segment where above 0 (JAX_ACCL_PIPELINE_CHUNKS), else one per
// kByHostChunkBytes of the block (what a rank sends each other host), at most
// kByHostMaxChunks, and each segment cut into chunks of kByHostChunkBytes or more.
struct ByHostTiers {
  Algorithm in_host;
  Algorithm between;
  ByHostPipeline pipeline;
};
constexpr size_t kByHostChunkBytes = 512 << 10;
constexpr int kByHostMaxChunks = 8;
ByHostTiers plan_by_host(const GroupLayout& g, size_t block_bytes, int chunks_setting);
// Whether the ranks of a host of `g` are the device threads of one process.
bool host_is_one_process(const GroupLayout& g);

// The schedule of an all-reduce among `n` device threads of one process: `forced`, or
// where that is kAuto (or kHierarchical, which has one level here) the cost model's.
Algorithm plan_in_process(int n, size_t bytes, Algorithm forced,
                          const CostModel& model = cost_model());

// The plan of rank `rank`'s call: the same on every rank of the group for the same
// request, except `between`, which is kAuto on ranks that take no part between hosts
// (rank 0 always does). The collective's row (runtime/collective.h) names which of the
// plan_*_call below makes it.
CallPlan plan_call(const GroupLayout& layout, int rank, const PlanRequest& request,
                   const CostModel& model);
// The layout of a group of `n` device threads of this process (every such group's; n < 1:
// one thread's).
const GroupLayout& one_process_layout(int n);
CallPlan plan_allreduce_call(const GroupLayout& layout, int rank, const PlanRequest& request,
                             const CostModel& model);
CallPlan plan_scatter_gather_call(const GroupLayout& layout, int rank, const PlanRequest& request,
                                  const CostModel& model);
// A permutation (a ragged all-to-all, a broadcast, a reduce): one step, direct, over the
// whole group.
CallPlan plan_direct_call(const GroupLayout& layout, int rank, const PlanRequest& request,
                          const CostModel& model);
// An all-to-all: direct, or by host (kHierarchical: in the host, then between hosts, as
// algorithms/all_to_all_by_host.cc) where the group runs_by_host and the model's time of
// it is the shorter, or JAX_ACCL_ALGORITHM forces hierarchical; forced direct is direct.
CallPlan plan_all_to_all_call(const GroupLayout& layout, int rank, const PlanRequest& request,
                              const CostModel& model);

// The model's time of a call that runs `plan` (an all-reduce's: an owner's, rank 0's),
// per rank; for a reduce-scatter, all-gather or permutation by the formulas atop
// flat_scatter_gather_seconds (call_plan.cc). As plan_call, by the collective's row.
double predict_call_seconds(const GroupLayout& layout, const CallPlan& plan,
                            const PlanRequest& request, const CostModel& model);
double predict_allreduce_seconds(const GroupLayout& layout, const CallPlan& plan,
                                 const PlanRequest& request, const CostModel& model);
double predict_scatter_gather_seconds(const GroupLayout& layout, const CallPlan& plan,
                                      const PlanRequest& request, const CostModel& model);
double predict_permute_seconds(const GroupLayout& layout, const CallPlan& plan,
                               const PlanRequest& request, const CostModel& model);
double predict_all_to_all_seconds(const GroupLayout& layout, const CallPlan& plan,
                                  const PlanRequest& request, const CostModel& model);
double predict_rooted_seconds(const GroupLayout& layout, const CallPlan& plan,
                              const PlanRequest& request, const CostModel& model);

}  // namespace accl
