// The runtime's layout and plan of any group, bound for jax_accl.plan and the lowering:
// group_layout() is topology/group_layout's tiers, plan() the runtime's own CallPlan
// (runtime/call_plan.h: plan_call, the function every call path of the runtime asks) and
// its predicted time. Nothing here decides anything: it converts names and values.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bindings/parse.h"
#include "runtime/call_plan.h"
#include "runtime/collective.h"
#include "topology/group_layout.h"

namespace nb = nanobind;

namespace accl {
namespace {

GroupLayout layout_of(const std::vector<std::pair<std::string, int>>& places) {
  std::vector<RankPlace> rank_places;
  for (const auto& [host, process] : places) rank_places.push_back(RankPlace{process, host});
  GroupLayout layout;
  Status made = GroupLayout::make(rank_places, &layout);
  if (!made.ok()) throw nb::value_error(made.message().c_str());
  return layout;
}

// The tiers of a group whose ranks live at `places` (host, process), as the runtime
// derives them: {"hosts": ranks of every host, "thread_owners", "process_owners",
// "process_peers": tier-1 group of every rank (empty where it owns no slice of tier 0),
// "host_peers": tier-2 group of every rank (empty where it owns no slice), "describe"}.
nb::dict group_layout(const std::vector<std::pair<std::string, int>>& places) {
  const GroupLayout layout = layout_of(places);
  std::vector<std::vector<int>> hosts, process_peers, host_peers;
  for (int h = 0; h < layout.host_count(); ++h) hosts.push_back(layout.host_ranks(h));
  for (int r = 0; r < layout.size(); ++r) {
    const bool t_owner = layout.device_position(r) < layout.thread_owners();
    process_peers.push_back(t_owner ? layout.process_peers(r) : std::vector<int>{});
    host_peers.push_back(layout.owns_slice(r) ? layout.host_peers(r) : std::vector<int>{});
  }
  nb::dict out;
  out["hosts"] = hosts;
  out["thread_owners"] = layout.thread_owners();
  out["process_owners"] = layout.process_owners();
  out["process_peers"] = process_peers;
  out["host_peers"] = host_peers;
  out["describe"] = layout.describe();
  return out;
}

// One tier of a hierarchical plan: its name, the most ranks one of its groups has, the
// owners of a slice there and how its ranks reach each other.
nb::dict tier(const char* name, int ranks, int owners, const char* via) {
  nb::dict t;
  t["tier"] = name;
  t["ranks"] = ranks;
  t["owners"] = owners;
  t["via"] = via;
  return t;
}

// The tiers a hierarchical call runs (runtime/hierarchical_call.cc skips a tier where every rank
// is alone).
nb::list tiers_of(const GroupLayout& g, const CallPlan& plan) {
  int per_process = 1, per_host = 1;
  for (int r = 0; r < g.size(); ++r) {
    per_process = std::max(per_process, static_cast<int>(g.process_ranks(r).size()));
    if (g.device_position(r) == 0) {
      per_host = std::max(per_host, static_cast<int>(g.process_peers(r).size()));
    }
  }
  nb::list tiers;
  if (per_process > 1) tiers.append(tier("threads", per_process, g.thread_owners(), "memory"));
  if (per_host > 1) tiers.append(tier("processes", per_host, g.process_owners(), "shm"));
  if (g.host_count() > 1) {
    nb::dict hosts = tier("hosts", g.host_count(), 1, "tcp");
    hosts["algorithm"] = algorithm_name(plan.between);
    tiers.append(hosts);
  }
  return tiers;
}

// The two tiers of a reduce-scatter or all-gather by host (runtime/multiprocess.cc's
// scatter_gather_by_host): the host's ranks, then each position's ranks on every host;
// each tier as the runtime's plan_by_host chooses.
nb::list host_tiers_of(const GroupLayout& g, size_t block, int chunks) {
  const int per_host = static_cast<int>(g.host_ranks(0).size());
  const ByHostTiers chosen = plan_by_host(g, block, chunks);
  nb::dict host = tier("host", per_host, per_host, host_is_one_process(g) ? "memory" : "shm");
  host["algorithm"] = algorithm_name(chosen.in_host);
  nb::dict between = tier("hosts", g.host_count(), 1, "tcp");
  between["algorithm"] = algorithm_name(chosen.between);
  nb::list tiers;
  tiers.append(host);
  tiers.append(between);
  return tiers;
}

// A collective by its name in jax_accl ("all_reduce", "reduce_scatter", "all_gather",
// "permute", "all_to_all").
Collective collective_of(const std::string& name) {
  for (int c = 0; c < kNumCollectives; ++c) {
    std::string known = collective_name(static_cast<Collective>(c));
    std::replace(known.begin(), known.end(), '-', '_');
    if (name == known) return static_cast<Collective>(c);
  }
  throw nb::value_error(("plan: unknown collective '" + name +
                         "' (all_reduce, reduce_scatter, all_gather, permute or all_to_all)")
                            .c_str());
}

// The runtime's plan of rank `rank`'s call of `bytes` per rank on the group at `places`,
// and the model's time for it. `one_shot`: the program runs in one process (default:
// where the group does); `chunks`: JAX_ACCL_PIPELINE_CHUNKS (default: the runtime's
// setting); `between`: forced between hosts, as the native tests force it; `model`:
// cost-model constants by name (get_cost_model's) that differ from the runtime's, for
// the choice and the prediction (as a calibration would set them); `fabric`: constants
// for the prediction only, the network as it is where the runtime's model does not
// know it (its rate, its contention): the runtime chooses without them.
nb::dict plan(const std::vector<std::pair<std::string, int>>& places, size_t bytes,
              const std::string& algorithm, bool cma, int rails, int rank,
              std::optional<bool> one_shot, std::optional<int> chunks, const std::string& between,
              const std::map<std::string, double>& model,
              const std::map<std::string, double>& fabric, const std::string& collective) {
  const GroupLayout g = layout_of(places);
  if (rank < 0 || rank >= g.size()) throw nb::value_error("plan: rank outside the group");
  if (rails < 1) throw nb::value_error("plan: rails must be >= 1");
  if (chunks && *chunks < 0) throw nb::value_error("plan: chunks must be >= 0 (0: automatic)");
  PlanRequest request;
  request.bytes = bytes;
  request.forced = parse_or_throw<Algorithm>(algorithm, parse_algorithm, "algorithm");
  request.cma = cma;
  request.rails = rails;
  request.chunks = chunks.value_or(pipeline_chunks_setting());
  request.between = parse_or_throw<Algorithm>(between, parse_algorithm, "algorithm");
  request.one_shot = one_shot.value_or(g.process_count() == 1);
  request.collective = collective_of(collective);
  const CostModel chooses = with_constants(cost_model(), model);
  const CallPlan p = plan_call(g, rank, request, chooses);
  // The time is an owner's (rank 0's), whatever rank was asked: every rank waits for the
  // slices the owners bring back.
  const CallPlan owner = rank == 0 ? p : plan_call(g, 0, request, chooses);
  const CostModel predicts = with_constants(chooses, fabric);
  nb::dict out;
  out["schedule"] = algorithm_name(p.schedule);
  out["between"] = algorithm_name(p.between);
  out["chunks"] = p.chunks;
  out["protocol"] = protocol_name(p.protocol);
  out["predicted_s"] = predict_call_seconds(g, owner, request, predicts);
  const CollectiveRow& row = collective_row(request.collective);
  out["tiers"] = p.schedule != Algorithm::kHierarchical ? nb::list()
                 : row.by_host == ByHost::kHierarchy
                     ? tiers_of(g, owner)
                     : host_tiers_of(g, row.block_count(bytes, g.size()), request.chunks);
  out["layout"] = g.describe();
  out["ranks"] = g.size();
  out["hosts"] = g.host_count();
  out["processes"] = g.process_count();
  out["rails"] = rails;
  return out;
}

// The algorithm of a reduce-scatter or all-gather (runtime/call_plan.h).
std::string plan_scatter_gather_algorithm(int n, size_t bytes, const std::string& forced,
                                          bool peer_memory) {
  const Algorithm a = parse_or_throw<Algorithm>(forced, parse_algorithm, "algorithm");
  return algorithm_name(plan_scatter_gather(n, bytes, a, peer_memory));
}

}  // namespace

void register_plan(nb::module_& m) {
  m.def("plan_scatter_gather", &plan_scatter_gather_algorithm, nb::arg("n"), nb::arg("bytes"),
        nb::arg("algorithm") = "auto", nb::arg("peer_memory") = false,
        "The algorithm the runtime runs a reduce-scatter or all-gather of `bytes` of input "
        "per rank among n ranks by (peer_memory: the threads of one process).");
  m.def("group_layout", &group_layout, nb::arg("places"));
  m.def("plan", &plan, nb::arg("places"), nb::arg("bytes"), nb::arg("algorithm") = "auto",
        nb::arg("cma") = false, nb::arg("rails") = 1, nb::arg("rank") = 0,
        nb::arg("one_shot") = nb::none(), nb::arg("chunks") = nb::none(),
        nb::arg("between") = "auto", nb::arg("model") = std::map<std::string, double>{},
        nb::arg("fabric") = std::map<std::string, double>{}, nb::arg("collective") = "all_reduce",
        "The runtime's plan of a call of `collective` with `bytes` of input per rank on the "
        "group whose rank r lives at places[r] = (host, process): {schedule, between, "
        "chunks, protocol, predicted_s, tiers, layout, ranks, hosts, processes, rails}.");
}

}  // namespace accl
