#include "runtime/communicator.h"

#include <map>
#include <mutex>

#include "algorithms/select.h"
#include "runtime/one_shot.h"
#include "runtime/world.h"

namespace accl {

int& pipeline_chunks_setting() {
  static int chunks = 0;
  return chunks;
}

bool plan_one_shot(size_t bytes, Algorithm forced) {
  return bytes <= kOneShotBytes && (forced == Algorithm::kAuto || forced == Algorithm::kDirect);
}

Algorithm plan_in_process(int n, size_t bytes, Algorithm forced) {
  if (forced != Algorithm::kAuto && forced != Algorithm::kHierarchical) return forced;
  return choose_algorithm(n, bytes, /*peer_memory=*/true, cost_model());
}

Status Communicator::make(const std::vector<RankPlace>& places, int rails,
                          std::shared_ptr<const Communicator>* out) {
  auto made = std::make_shared<Communicator>();
  ACCL_RETURN_IF_ERROR(GroupLayout::make(places, &made->layout_));
  made->rails_ = std::max(1, rails);
  *out = std::move(made);
  return Status::Ok();
}

CallPlan Communicator::plan(int rank, size_t bytes, Algorithm forced, bool cma) const {
  const GroupLayout& g = layout_;
  CallPlan plan;
  if (g.process_count() == 1) {
    plan.schedule = plan_in_process(g.size(), bytes, forced);
    return plan;
  }
  // Forced ring, halving-doubling or direct run flat over all devices; a forced
  // reduce_broadcast is the cross-memory-attach one on one host. The automatic choice on
  // one host is choose_one_host's (small messages: flat, a few sync points; large ones:
  // cross-memory attach, one kernel copy per byte each way); between hosts it is the
  // hierarchy, which sends a host's share once and keeps every rail busy.
  const bool one_host = g.host_count() == 1;
  cma = cma && one_host;
  plan.schedule = forced;
  if (forced == Algorithm::kAuto) {
    plan.schedule = one_host ? choose_one_host(g.size(), g.process_count(), g.thread_owners(),
                                               bytes, cma, cost_model())
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
    plan.between = choose_algorithm(g.host_count(), owned, /*peer_memory=*/false,
                                    network_model(cost_model(), rails_));
  }
  const int forced_chunks = pipeline_chunks_setting();
  plan.chunks = forced_chunks > 0
                    ? forced_chunks
                    : choose_pipeline_chunks(g.host_count(), g.process_owners(), g.thread_owners(),
                                             rails_, bytes, cost_model());
  return plan;
}

Status communicator_for(World& world, const std::vector<int64_t>& devices, const std::string& label,
                        std::shared_ptr<const Communicator>* out) {
  static std::mutex mutex;
  static std::map<std::pair<uint64_t, std::vector<int64_t>>, std::shared_ptr<const Communicator>>
      made;
  const auto key = std::make_pair(world.generation(), devices);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = made.find(key);
    if (it != made.end()) {
      *out = it->second;
      return Status::Ok();
    }
  }
  std::vector<RankPlace> places;
  for (int64_t device : devices) {
    const int p = world.process_of(device);
    if (p < 0)
      return error(Code::kInvalidArgument, label, ": device ", device, " belongs to no process");
    places.push_back(RankPlace{p, world.process(p).host});
  }
  const int rails = static_cast<int>(world.process(world.process_index()).rails.size());
  Status s = Communicator::make(places, rails, out);
  if (!s.ok()) return error(s.code(), label, ": ", s.message());
  std::lock_guard<std::mutex> lock(mutex);
  made.emplace(key, *out);
  return Status::Ok();
}

}  // namespace accl
