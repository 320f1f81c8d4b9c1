#include "runtime/call_plan.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "algorithms/hierarchical.h"
#include "runtime/collective.h"

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

// One byte each for the schedule, the algorithm between hosts and the protocol, one bit
// for chunks forced, 32 bits of chunks.
uint64_t encode_wire_plan(const WirePlan& p) {
  return static_cast<uint64_t>(p.schedule) | static_cast<uint64_t>(p.between) << 8 |
         static_cast<uint64_t>(p.protocol) << 16 | static_cast<uint64_t>(p.chunks_forced) << 24 |
         static_cast<uint64_t>(static_cast<uint32_t>(p.chunks)) << 32;
}

WirePlan decode_wire_plan(uint64_t word) {
  WirePlan p;
  p.schedule = static_cast<Algorithm>(word & 0xff);
  p.between = static_cast<Algorithm>(word >> 8 & 0xff);
  p.protocol = static_cast<Protocol>(word >> 16 & 0xff);
  p.chunks_forced = (word >> 24 & 1) != 0;
  p.chunks = static_cast<int>(word >> 32);
  return p;
}

std::string describe_wire_plan(uint64_t word) {
  const WirePlan p = decode_wire_plan(word);
  const int schedule = static_cast<int>(p.schedule), between = static_cast<int>(p.between);
  if (schedule >= kNumAlgorithms || between >= kNumAlgorithms) return str_cat("plan ", word);
  std::string out = algorithm_name(p.schedule);
  if (p.schedule != Algorithm::kHierarchical) return out;
  out += str_cat(" in ", p.chunks, p.chunks == 1 ? " chunk" : " chunks");
  if (p.chunks_forced) out += " (JAX_ACCL_PIPELINE_CHUNKS)";
  if (p.between != Algorithm::kAuto)
    out += str_cat(", ", algorithm_name(p.between), " between hosts");
  if (p.protocol == Protocol::kStreamed) out += " (streamed)";
  return out;
}

int& pipeline_chunks_setting() {
  static int chunks = 0;
  return chunks;
}

std::atomic<Algorithm>& between_hosts_setting() {
  static std::atomic<Algorithm> between{Algorithm::kAuto};  // read by call threads
  return between;
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

ByHostTiers plan_by_host(const GroupLayout& g, size_t block_bytes, int chunks_setting) {
  const int per_host = static_cast<int>(g.host_ranks(0).size()), hosts = g.host_count();
  const ByHostPipeline pipeline =
      chunks_setting > 0
          ? ByHostPipeline{chunks_setting, 0}
          : ByHostPipeline{static_cast<int>(std::clamp<size_t>(block_bytes / kByHostChunkBytes, 1,
                                                               kByHostMaxChunks)),
                           kByHostChunkBytes};
  return ByHostTiers{plan_scatter_gather(per_host, block_bytes * g.size(), Algorithm::kAuto, false),
                     plan_scatter_gather(hosts, block_bytes * hosts, Algorithm::kAuto, false),
                     pipeline};
}

bool host_is_one_process(const GroupLayout& g) {
  return g.process_ranks(g.host_ranks(0)[0]).size() == g.host_ranks(0).size();
}

Algorithm plan_in_process(int n, size_t bytes, Algorithm forced, const CostModel& model) {
  if (forced != Algorithm::kAuto && forced != Algorithm::kHierarchical) return forced;
  return choose_algorithm(n, bytes, /*peer_memory=*/true, model);
}

const GroupLayout& one_process_layout(int n) {
  // Made once per n under the lock and never destroyed (call threads may outlive exit);
  // groups of up to kKnown ranks are then found without it (every small call asks).
  constexpr int kKnown = 1024;
  static auto* known = new std::array<std::atomic<const GroupLayout*>, kKnown>{};
  n = std::max(n, 1);
  if (n < kKnown) {
    if (const GroupLayout* layout = (*known)[n].load(std::memory_order_acquire)) return *layout;
  }
  static std::mutex* mutex = new std::mutex;
  static auto* made = new std::map<int, std::unique_ptr<GroupLayout>>;
  std::lock_guard<std::mutex> lock(*mutex);
  std::unique_ptr<GroupLayout>& layout = (*made)[n];
  if (layout == nullptr) {
    auto fresh = std::make_unique<GroupLayout>();
    (void)GroupLayout::make(std::vector<RankPlace>(n), fresh.get());
    layout = std::move(fresh);
  }
  if (n < kKnown) (*known)[n].store(layout.get(), std::memory_order_release);
  return *layout;
}

CallPlan plan_call(const GroupLayout& g, int rank, const PlanRequest& request,
                   const CostModel& model) {
  const CollectiveRow& row = collective_row(request.collective);
  // What a rank stages or receives, whichever is more (an all-gather's output is n inputs).
  if (request.one_shot && g.process_count() == 1 && row.one_shot != nullptr &&
      std::max<size_t>(request.bytes, row.output_count(request.bytes, g.size())) <= kOneShotBytes &&
      (request.forced == Algorithm::kAuto || request.forced == Algorithm::kDirect)) {
    CallPlan plan;
    plan.schedule = Algorithm::kDirect;
    plan.protocol = Protocol::kOneShot;
    return plan;
  }
  return row.plan(g, rank, request, model);
}

CallPlan plan_direct_call(const GroupLayout&, int, const PlanRequest&, const CostModel&) {
  CallPlan plan;
  plan.schedule = Algorithm::kDirect;
  return plan;
}

// The plan by host of a collective whose row has a by-host runner: its pipeline's
// chunks as plan_by_host cuts one rank's block.
static CallPlan plan_two_tiers(const GroupLayout& g, const PlanRequest& request) {
  CallPlan plan;
  plan.schedule = Algorithm::kHierarchical;
  const size_t block = collective_row(request.collective).block_count(request.bytes, g.size());
  plan.chunks = plan_by_host(g, block, request.chunks).pipeline.chunks;
  if (plan.chunks > 1) plan.protocol = Protocol::kChunked;
  return plan;
}

CallPlan plan_all_to_all_call(const GroupLayout& g, int rank, const PlanRequest& request,
                              const CostModel& model) {
  const CallPlan direct = plan_direct_call(g, rank, request, model);
  if (!runs_by_host(g) || request.forced == Algorithm::kDirect) return direct;
  const CallPlan by_host = plan_two_tiers(g, request);
  if (request.forced == Algorithm::kHierarchical) return by_host;
  return predict_all_to_all_seconds(g, by_host, request, model) <
                 predict_all_to_all_seconds(g, direct, request, model)
             ? by_host
             : direct;
}

// A reduce-scatter or all-gather between hosts of more than one rank each runs by host
// (kHierarchical: in the host, then between hosts), unless direct or ring is forced;
// else flat, direct or ring.
CallPlan plan_scatter_gather_call(const GroupLayout& g, int, const PlanRequest& request,
                                  const CostModel&) {
  const Algorithm forced = request.forced;
  CallPlan plan;
  const bool flat_forced = forced == Algorithm::kDirect || forced == Algorithm::kRing;
  plan.schedule =
      !flat_forced && runs_by_host(g)
          ? Algorithm::kHierarchical
          : plan_scatter_gather(g.size(), request.bytes, forced, g.process_count() == 1);
  return plan.schedule == Algorithm::kHierarchical ? plan_two_tiers(g, request) : plan;
}

CallPlan plan_allreduce_call(const GroupLayout& g, int rank, const PlanRequest& request,
                             const CostModel& model) {
  const size_t bytes = request.bytes;
  const Algorithm forced = request.forced;
  CallPlan plan;
  if (g.process_count() == 1) {
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
    const Algorithm forced_between =
        request.between != Algorithm::kAuto ? request.between : between_hosts_setting().load();
    plan.between = forced_between != Algorithm::kAuto
                       ? forced_between
                       : choose_between_hosts(g.host_count(), owned, g.process_owners(),
                                              network_model(model, request.rails));
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

// The model's time of a reduce-scatter, all-gather or permutation. S is the whole
// buffer of a rank (a reduce-scatter's input, an all-gather's output), b = S/n a block;
// alpha and beta are the link's: device threads' memory, the shared-memory rings
// between processes of a host, or the rails between hosts (beta divided by their
// number; a direct exchange between hosts shares them among a host's ranks).
//   direct         one exchange: (n-1)/2·alpha + (n-1)·b·beta; in one process the
//                  ranks read in place: alpha + 2(n-1)·b·beta (read and write)
//   ring           (n-1) steps of a block: (n-1)·(alpha + b·beta) (in memory 2b·beta)
//   by host        the host's schedule on S among its p ranks, then between hosts
//                  (H-1) steps of S/H per host, its p positions sharing the rails:
//                  (H-1)·(net_alpha + S/H·net_beta/rails)
//   permutation    a shift by one rank: one message of S crosses each host boundary
//                  (net_alpha + S·net_beta/rails); within a host a copy (one process:
//                  alpha + 2S·beta) or one message through the rings.
// A reduce-scatter adds gamma per byte it reduces ((n-1)·b).
static double flat_scatter_gather_seconds(Algorithm algorithm, int n, double S, bool reduces,
                                          const CostModel& m, bool peer_memory) {
  if (n <= 1) return 0.0;
  const double b = S / n, reduce = reduces ? (n - 1) * b * m.gamma_s_per_byte : 0.0;
  const double copies = peer_memory ? 2.0 : 1.0;  // in memory a byte is read and written
  if (algorithm == Algorithm::kRing) {
    return (n - 1) * (m.alpha_s + copies * b * m.beta_s_per_byte) + reduce;
  }
  if (peer_memory) return m.alpha_s + copies * (n - 1) * b * m.beta_s_per_byte + reduce;
  return (n - 1) * m.alpha_s / 2 + (n - 1) * b * m.beta_s_per_byte + reduce;
}

// The model of a step among `n` ranks of `g` on `processes` processes and `hosts` hosts
// (threads: memory; one host: the rings; else the rails, shared by `per_host` ranks).
static CostModel link_model(int hosts, int processes, int per_host, int rails,
                            const CostModel& model) {
  if (processes == 1) return model;
  if (hosts == 1) return shared_memory_model(model, 1.0);
  CostModel net = network_model(model, rails);
  net.beta_s_per_byte *= std::max(1, per_host);
  return net;
}

double predict_permute_seconds(const GroupLayout& g, const CallPlan&, const PlanRequest& request,
                               const CostModel& model) {
  const double S = static_cast<double>(request.bytes);
  if (g.process_count() == 1) return model.alpha_s + 2.0 * S * model.beta_s_per_byte;
  const CostModel link = link_model(g.host_count(), g.process_count(), 1, request.rails, model);
  return link.alpha_s + S * link.beta_s_per_byte;
}

// A broadcast or reduce of S bytes per rank, direct: in one process every rank copies S
// (the root of a reduce folds n inputs); across processes the root sends S to each of
// the n - 1 others (receives and reduces it from each) over its process's link.
double predict_rooted_seconds(const GroupLayout& g, const CallPlan&, const PlanRequest& request,
                              const CostModel& model) {
  const double S = static_cast<double>(request.bytes);
  const int n = g.size();
  const double reduce =
      collective_row(request.collective).reduces ? (n - 1) * S * model.gamma_s_per_byte : 0.0;
  if (g.process_count() == 1) return model.alpha_s + 2.0 * S * model.beta_s_per_byte + reduce;
  const CostModel link = link_model(g.host_count(), g.process_count(), 1, request.rails, model);
  return (n - 1) * (link.alpha_s + S * link.beta_s_per_byte) + reduce;
}

// Two stages of a pipeline in C chunks, chunk times l and b (a stage's share of the data
// plus its fixed cost): C of the slower stage and one of the faster.
static double pipelined_seconds(int chunks, double local, double local_fixed, double between,
                                double between_fixed) {
  const double c = std::max(1, chunks);
  const double l = local / c + local_fixed, b = between / c + between_fixed;
  return c * std::max(l, b) + std::min(l, b);
}

// An all-to-all of S bytes per rank: in one process each rank copies S; else, direct,
// each rank sends and receives (n - 1) / n of S in n - 1 messages, of which the part
// bound for other hosts crosses the host's rails with every rank of the host's. By host
// (d ranks per host, H hosts): a direct exchange of S among the host's d ranks, then
// among each position's H ranks (S / H to each other host, the host's d positions
// sharing the rails: one message per other host), pipelined; in the host a frame per
// block (H per peer), and each rank copies its own blocks (S / d) and unpacks S.
double predict_all_to_all_seconds(const GroupLayout& g, const CallPlan& plan,
                                  const PlanRequest& request, const CostModel& model) {
  const double S = static_cast<double>(request.bytes);
  const int n = g.size(), hosts = g.host_count();
  if (g.process_count() == 1) return model.alpha_s + 2.0 * S * model.beta_s_per_byte;
  const int per_host = static_cast<int>(g.host_ranks(0).size());
  if (plan.schedule != Algorithm::kHierarchical) {
    const CostModel link = link_model(hosts, g.process_count(), per_host, request.rails, model);
    const double leaving = static_cast<double>(hosts > 1 ? n - per_host : n - 1) / n;
    return (n - 1) * link.alpha_s + S * leaving * link.beta_s_per_byte;
  }
  const bool one_process = host_is_one_process(g);
  const CostModel in_host = one_process ? model : shared_memory_model(model, 1.0);
  // In the host each rank sends each peer H frames: H steps' fixed cost.
  const double step_fixed =
      flat_scatter_gather_seconds(Algorithm::kDirect, per_host, 0, false, in_host, one_process);
  const double local_fixed = hosts * step_fixed;
  const double local =
      flat_scatter_gather_seconds(Algorithm::kDirect, per_host, S, false, in_host, one_process) -
      step_fixed + S / per_host * model.beta_s_per_byte;
  const CostModel net = network_model(model, request.rails);
  const double between = per_host * (hosts - 1) * S / hosts * net.beta_s_per_byte +
                         S * model.beta_s_per_byte;  // the unpacking
  return pipelined_seconds(plan.chunks, local, local_fixed, between, (hosts - 1) * net.alpha_s);
}

double predict_scatter_gather_seconds(const GroupLayout& g, const CallPlan& plan,
                                      const PlanRequest& request, const CostModel& model) {
  const int n = g.size(), hosts = g.host_count(), processes = g.process_count();
  const int per_host = static_cast<int>(g.host_ranks(0).size());
  const CollectiveRow& row = collective_row(request.collective);
  const bool reduces = row.reduces;
  // The whole buffer: a reduce-scatter's input, an all-gather's output.
  const double S =
      static_cast<double>(std::max<uint64_t>(request.bytes, row.output_count(request.bytes, n)));
  if (plan.schedule != Algorithm::kHierarchical) {
    const CostModel link = link_model(
        hosts, processes, plan.schedule == Algorithm::kRing ? 1 : per_host, request.rails, model);
    return flat_scatter_gather_seconds(plan.schedule, n, S, reduces, link, processes == 1);
  }
  // By host: the host's ranks (threads of one process or processes of the host), then
  // each position's ranks on every host (all positions at once over the rails).
  const bool one_process = host_is_one_process(g);
  const CostModel in_host = one_process ? model : shared_memory_model(model, 1.0);
  const Algorithm in_host_algorithm = plan_by_host(g, static_cast<size_t>(S / n), 1).in_host;
  const double local_fixed =
      flat_scatter_gather_seconds(in_host_algorithm, per_host, 0, reduces, in_host, one_process);
  const double local =
      flat_scatter_gather_seconds(in_host_algorithm, per_host, S, reduces, in_host, one_process) -
      local_fixed;
  const CostModel net = network_model(model, request.rails);
  const double between_fixed = (hosts - 1) * net.alpha_s;
  const double between =
      (hosts - 1) * S / hosts * net.beta_s_per_byte +
      (reduces ? (hosts - 1) * S / (hosts * per_host) * model.gamma_s_per_byte : 0.0);
  return pipelined_seconds(plan.chunks, local, local_fixed, between, between_fixed);
}

double predict_call_seconds(const GroupLayout& g, const CallPlan& plan, const PlanRequest& request,
                            const CostModel& model) {
  return collective_row(request.collective).predict(g, plan, request, model);
}

double predict_allreduce_seconds(const GroupLayout& g, const CallPlan& plan,
                                 const PlanRequest& request, const CostModel& model) {
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
