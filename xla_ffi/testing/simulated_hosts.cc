#include "testing/simulated_hosts.h"

#include <algorithm>
#include <map>
#include <thread>

#include "reduce/reduce.h"
#include "runtime/hierarchical_call.h"

namespace accl {
namespace {

// Rank r's buffers cut into the call's segments (the last takes the rest).
std::vector<Buffers> segments_of(const SimulatedCall& call, int r) {
  const size_t elem = dtype_size(call.dtype);
  std::vector<uint64_t> cuts = call.segment_counts;
  if (cuts.empty()) cuts.push_back(call.counts[r]);
  std::vector<Buffers> segments;
  uint64_t offset = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const uint64_t rest = call.counts[r] - std::min(offset, call.counts[r]);
    const uint64_t c = i + 1 == cuts.size() ? rest : std::min(cuts[i], rest);
    segments.push_back(Buffers{static_cast<const char*>(call.in[r]) + offset * elem,
                               static_cast<char*>(call.out[r]) + offset * elem, c, elem,
                               static_cast<int>(i)});
    offset += c;
  }
  return segments;
}

}  // namespace

std::vector<Status> run_on_simulated_hosts(const SimulatedCall& call, const PairMaker& make_pair,
                                           std::vector<SimulatedRun>* ran) {
  const int n = static_cast<int>(call.places.size());
  GroupLayout layout;
  Status made = GroupLayout::make(call.places, &layout);
  if (!made.ok()) return std::vector<Status>(n, made);
  std::vector<SimulatedRun> runs(n);
  const ReduceFn fn = reduce_kernel(call.dtype, call.op);
  if (fn == nullptr) {
    return std::vector<Status>(n, error(Code::kInvalidArgument, "no kernel for this op and dtype"));
  }
  // Every group a rank connects to (its processes tier, its hosts tier) gets a mesh of
  // channels, keyed by the group's ranks; built before the threads start.
  std::map<std::vector<int>, ChannelMesh> meshes;
  for (int r = 0; r < n; ++r) {
    if (layout.device_position(r) < layout.thread_owners()) {
      const std::vector<int> group = layout.process_peers(r);
      if (!meshes.count(group))
        meshes.emplace(group, make_channel_mesh(group.size(), 1, make_pair));
    }
    if (layout.owns_slice(r)) {
      const std::vector<int> group = layout.host_peers(r);
      if (!meshes.count(group))
        meshes.emplace(group, make_channel_mesh(group.size(), 1, make_pair));
    }
  }
  Rendezvous rendezvous;                // every simulated process's threads meet here
  std::map<int, CallKey> process_keys;  // by the process's first rank
  for (int r = 0; r < n; ++r) {
    const int first = layout.process_ranks(r)[0];
    if (!process_keys.count(first)) process_keys[first] = CallKey{0, fresh_op_id(), first, 0};
  }
  auto run_rank = [&](int r) {
    const std::vector<Buffers> segments = segments_of(call, r);
    std::vector<uint64_t> lengths;
    for (const Buffers& b : segments) lengths.push_back(b.count);
    // The runtime's plan for the hierarchy, with the call's forced choices.
    const size_t elem = dtype_size(call.dtype);
    PlanRequest request;
    request.bytes = call.counts[r] * elem;
    request.forced = Algorithm::kHierarchical;
    request.rails = call.rails;
    request.chunks = call.chunks > 0 ? call.chunks : pipeline_chunks_setting();
    request.between = call.between;
    const CallPlan plan = runs[r].plan = plan_call(layout, r, request, cost_model());
    HierarchyCall hc{&layout,
                     r,
                     process_keys.at(layout.process_ranks(r)[0]),
                     &rendezvous,
                     Signature{},
                     str_cat("simulated rank ", r),
                     Deadline::after_seconds(call.timeout_s),
                     plan.between,
                     plan.chunks};
    hc.signature.dtype = call.dtype;
    hc.signature.op = call.op;
    describe_layout(lengths, &hc.signature);
    ConnectGroup connect = [&](const std::vector<int>& ranks, int index,
                               std::unique_ptr<ChannelLink>* link) {
      *link = std::make_unique<ChannelLink>(index, channels_of(meshes.at(ranks), index), 42,
                                            hc.label, hc.deadline);
      return Status::Ok();
    };
    HierarchyResult result;
    Status s =
        run_hierarchy(hc, segments, Reduction{fn, elem, reduce_many_kernel(call.dtype, call.op)},
                      connect, &result);
    for (const PhaseRecord& p : result.times) {
      if (p.kind == PhaseRecord::kStep) continue;
      (p.kind == PhaseRecord::kReduceScatter  ? runs[r].reduce_scatters
       : p.kind == PhaseRecord::kBetweenHosts ? runs[r].between_hosts
                                              : runs[r].all_gathers) += 1;
    }
    return s;
  };
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        if (call.before_rank) call.before_rank(r);
        status[r] = run_rank(r);
      } catch (const std::exception& e) {
        // Before run_hierarchy (which tells its siblings itself): as the runtime's guard.
        const std::vector<int>& process = layout.process_ranks(r);
        if (process.size() > 1) {
          rendezvous.leave(process_keys.at(process[0]), layout.device_position(r),
                           static_cast<int>(process.size()), "simulated",
                           Status(Code::kInternal, ""));
        }
        status[r] = error(Code::kInternal, "simulated rank ", r, ": ", e.what());
      }
      // A failed rank poisons all its channels, links opened or not, as the runtime
      // poisons the call's channel space: its peers fail at once.
      if (!status[r].ok()) {
        for (auto& [ranks, mesh] : meshes) {
          const auto it = std::find(ranks.begin(), ranks.end(), r);
          if (it == ranks.end()) continue;
          for (auto& peer : channels_of(mesh, static_cast<int>(it - ranks.begin()))) {
            for (Channel* c : peer) c->poison(status[r].code());
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (ran != nullptr) *ran = std::move(runs);
  return status;
}

}  // namespace accl
