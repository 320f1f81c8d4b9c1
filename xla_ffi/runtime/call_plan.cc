#include "runtime/call_plan.h"

#include <algorithm>

#include "algorithms/hierarchical.h"

namespace accl {

const char* protocol_name(Protocol protocol) {
  switch (protocol) {
    case Protocol::kOneShot: return "one_shot";
    case Protocol::kWhole: return "whole";
    case Protocol::kChunked: return "chunked";
    case Protocol::kStreamed: return "streamed";
  }
  return "?";
}

int& pipeline_chunks_setting() {
  static int chunks = 0;
  return chunks;
}

Algorithm plan_scatter_gather(int n, size_t bytes, Algorithm forced, bool peer_memory) {
  if (forced == Algorithm::kDirect || forced == Algorithm::kRing) return forced;
  return peer_memory || n <= 2 || bytes <= kOneShotBytes ? Algorithm::kDirect : Algorithm::kRing;
}

bool runs_by_host(const GroupLayout& g) {
  if (g.host_count() < 2) return false;
  const size_t per_host = g.host_ranks(0).size();
  for (int h = 1; h < g.host_count(); ++h) {
    if (g.host_ranks(h).size() != per_host) return false;
  }
  return per_host > 1;
}

bool plan_one_shot(size_t bytes, Algorithm forced) {
  return bytes <= kOneShotBytes && (forced == Algorithm::kAuto || forced == Algorithm::kDirect);
}

Algorithm plan_local(int n, size_t bytes, Collective collective, Algorithm forced) {
  switch (collective) {
    case Collective::kAllReduce: return plan_in_process(n, bytes, forced);
    case Collective::kPermute: return Algorithm::kDirect;
    default: return plan_scatter_gather(n, bytes, forced, /*peer_memory=*/true);
  }
}

Algorithm plan_in_process(int n, size_t bytes, Algorithm forced, const CostModel& model) {
  if (forced != Algorithm::kAuto && forced != Algorithm::kHierarchical) return forced;
  return choose_algorithm(n, bytes, /*peer_memory=*/true, model);
}

CallPlan plan_call(const GroupLayout& g, int rank, const PlanRequest& request,
                   const CostModel& model) {
  const size_t bytes = request.bytes;
  const Algorithm forced = request.forced;
  CallPlan plan;
  // A permutation runs direct. A reduce-scatter or all-gather between hosts of more
  // than one rank each runs by host (kHierarchical: in the host, then between hosts),
  // unless direct or ring is forced; else flat, direct or ring.
  if (request.collective == Collective::kPermute) {
    plan.schedule = Algorithm::kDirect;
    return plan;
  }
  if (request.collective != Collective::kAllReduce) {
    const bool flat_forced = forced == Algorithm::kDirect || forced == Algorithm::kRing;
    plan.schedule = !flat_forced && runs_by_host(g)
                        ? Algorithm::kHierarchical
                        : plan_scatter_gather(g.size(), bytes, forced, g.process_count() == 1);
    return plan;
  }
  if (g.process_count() == 1) {
    if (request.one_shot && plan_one_shot(bytes, forced)) {
      plan.schedule = Algorithm::kDirect;
      plan.protocol = Protocol::kOneShot;
      return plan;
    }
    plan.schedule = plan_in_process(g.size(), bytes, forced, model);
    return plan;
  }
  // Forced ring, halving-doubling or direct run flat over all devices; a forced
  // reduce_broadcast is the cross-memory-attach one on one host. The automatic choice on
  // one host is choose_one_host's (small messages: flat, a few sync points; large ones:
  // cross-memory attach, one kernel copy per byte each way); between hosts it is the
  // hierarchy, which sends a host's share once and keeps every rail busy.
  const bool one_host = g.host_count() == 1;
  const bool cma = request.cma && one_host;
  plan.schedule = forced;
  if (forced == Algorithm::kAuto) {
    plan.schedule = one_host ? choose_one_host(g.size(), g.process_count(), g.thread_owners(),
                                               bytes, cma, model)
                             : Algorithm::kHierarchical;
  }
  if (plan.schedule == Algorithm::kReduceBroadcast && !cma)
    plan.schedule = Algorithm::kHierarchical;
  if (plan.schedule != Algorithm::kHierarchical) return plan;

  if (g.owns_slice(rank) && g.host_count() > 1) {
    // This rank's share after both local tiers: slice t of the threads', then sub-slice
    // j of that among the host's processes.
    const size_t slice = Blocks{bytes, g.thread_owners()}.length(g.device_position(rank));
    const size_t owned = Blocks{slice, g.process_owners()}.length(g.process_position(rank));
    plan.between =
        request.between != Algorithm::kAuto
            ? request.between
            : choose_between_hosts(g.host_count(), owned, network_model(model, request.rails));
  }
  plan.chunks = request.chunks > 0
                    ? request.chunks
                    : choose_pipeline_chunks(g.host_count(), g.process_owners(), g.thread_owners(),
                                             request.rails, bytes, model);
  if (plan.chunks > 1) {
    plan.protocol = g.host_count() > 1 && streams_between_hosts(plan.between, plan.chunks)
                        ? Protocol::kStreamed
                        : Protocol::kChunked;
  }
  return plan;
}

double predict_call_seconds(const GroupLayout& g, const CallPlan& plan, const PlanRequest& request,
                            const CostModel& model) {
  const size_t bytes = request.bytes;
  const int n = g.size();
  if (g.process_count() == 1) {
    return predict_seconds(plan.schedule, n, bytes, /*peer_memory=*/true, model);
  }
  const int hosts = g.host_count();
  if (plan.schedule == Algorithm::kHierarchical && (hosts > 1 || plan.chunks > 1)) {
    HierarchyShape shape{hosts, g.process_owners(), g.thread_owners(), 1, 1};
    for (int r = 0; r < n; ++r) {
      shape.most_devices =
          std::max(shape.most_devices, static_cast<int>(g.process_ranks(r).size()));
      if (g.device_position(r) == 0) {
        shape.most_processes =
            std::max(shape.most_processes, static_cast<int>(g.process_peers(r).size()));
      }
    }
    return predict_hierarchy_seconds(shape, request.rails, bytes, plan.between, plan.chunks,
                                     plan.protocol == Protocol::kStreamed, model);
  }
  if (hosts == 1) {
    return one_host_seconds(plan.schedule, n, g.process_count(), g.thread_owners(), bytes,
                            request.cma, model);
  }
  int per_host = 1;
  for (int h = 0; h < hosts; ++h) {
    per_host = std::max(per_host, static_cast<int>(g.host_ranks(h).size()));
  }
  return predict_flat_across_hosts_seconds(plan.schedule, n, per_host, request.rails, bytes, model);
}

}  // namespace accl
