// One rank's hierarchical all-reduce, links included: joins the device threads of its
// process (peer memory, through the rendezvous), connects to its peers among the host's
// processes and on the other hosts, picks the algorithm between hosts, runs
// algorithms/hierarchical.cc and, on failure, poisons every link so that the peers
// fail at once. Shared by the runtime (runtime/multiprocess.cc, links from the World's
// channels) and the simulated hosts of the native tests.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/hierarchical.h"
#include "runtime/rendezvous.h"
#include "topology/group_layout.h"
#include "transport/channel_link.h"

namespace accl {

// Opens this rank's link to the group ranks `ranks`, where it is rank `index`; between
// hosts, `slice` and `slices` choose the rails (slice_rails), elsewhere slices is 0.
using ConnectGroup = std::function<Status(const std::vector<int>& ranks, int index, int slice,
                                          int slices, std::unique_ptr<ChannelLink>* link)>;

struct HierarchyCall {
  const GroupLayout* layout;
  int rank;
  CallKey key;  // the call's key; the rank's process threads meet under it
  Signature signature;
  std::string label;
  Deadline deadline;
  int rails = 1;  // between hosts, for the cost model
  int chunks = 0;  // pipeline chunks; 0: pipeline_chunks_setting()
};

struct HierarchyResult {
  Algorithm between = Algorithm::kAuto;  // what ran between hosts (kAuto: nothing)
  int chunks = 1;
  HierarchicalTimes times;
  std::map<std::string, uint64_t> sent_by_rail;  // between hosts
};

// JAX_ACCL_PIPELINE_CHUNKS, as jax_accl's configuration sets it: 0 lets the cost model
// choose (choose_pipeline_chunks), 1 turns pipelining off, n > 1 forces n chunks.
int& pipeline_chunks_setting();

Status run_hierarchy(const HierarchyCall& call, const std::vector<Buffers>& segments,
                     const Reduction& reduction, const ConnectGroup& connect,
                     HierarchyResult* result);

}  // namespace accl
