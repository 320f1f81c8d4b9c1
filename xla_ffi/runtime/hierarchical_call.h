// One rank's hierarchical all-reduce, links included: joins the device threads of its
// process (peer memory, through the rendezvous), connects to its peers among the host's
// processes and on the other hosts, runs algorithms/hierarchical.cc as the call's plan
// says (runtime/communicator.h) and, on failure, poisons every link so that the peers
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

// Opens this rank's link to the group ranks `ranks`, where it is rank `index`.
using ConnectGroup = std::function<Status(const std::vector<int>& ranks, int index,
                                          std::unique_ptr<ChannelLink>* link)>;

struct HierarchyCall {
  const GroupLayout* layout;
  int rank;
  CallKey key;             // the call's key; the rank's process threads meet under it,
  Rendezvous* rendezvous;  // in this rendezvous
  Signature signature;
  std::string label;
  Deadline deadline;
  Algorithm between = Algorithm::kAuto;  // between hosts, where this rank takes part
  int chunks = 1;                        // pipeline chunks, the same on every rank
};

struct HierarchyResult {
  HierarchicalTimes times;
  std::map<std::string, uint64_t> sent_by_rail;  // between hosts
};

Status run_hierarchy(const HierarchyCall& call, const std::vector<Buffers>& segments,
                     const Reduction& reduction, const ConnectGroup& connect,
                     HierarchyResult* result);

}  // namespace accl
