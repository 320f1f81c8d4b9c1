#include "algorithms/select.h"

#include <algorithm>
#include <cmath>

#include "algorithms/measured.h"
#include "transport/local.h"

namespace accl {

CostModel& cost_model() {
  static CostModel model;
  return model;
}

double predict_seconds(Algorithm algorithm, int n, size_t bytes, bool peer_memory,
                       const CostModel& m) {
  if (n <= 1) return 0.0;
  const double S = static_cast<double>(bytes), a = m.alpha_s, b = m.beta_s_per_byte,
               g = m.gamma_s_per_byte;
  int p = 1, log_p = 0;
  while (p * 2 <= n) p *= 2, ++log_p;
  const double fold = (p != n) ? 1.0 : 0.0;  // halving-doubling's extra fold/unfold
  if (peer_memory) {
    // Ranks share memory: a "message" is the receiver reading the sender's buffer, so
    // count bytes of memory traffic per rank. A reduction step reads two operands and
    // writes one (3 per element), a copy step reads one and writes one (2).
    switch (algorithm) {
      case Algorithm::kDirect:
        return (bytes > LocalExchange::kEagerBytes ? 2 : 1) * a + (n + 1) * S * b;
      case Algorithm::kReduceBroadcast: return 2 * a + 2 * S * b + S * g;
      case Algorithm::kRing:
        return 2.0 * (n - 1) * a + 5.0 * (n - 1) / n * S * b + double(n - 1) / n * S * g;
      case Algorithm::kHalvingDoubling:
        return 2.0 * (log_p + fold) * a + (5.0 * (p - 1) / p + 5.0 * fold) * S * b +
               double(p - 1) / p * S * g;
      case Algorithm::kHierarchical:
      case Algorithm::kAuto: break;
    }
    return INFINITY;
  }
  // Between hosts, a whole step of `step` bytes leaves the wire idle for the step pause,
  // or for as long as its bytes took where that is shorter (a small step's wire is idle
  // for its latency anyway).
  auto pause = [&](double step) { return std::min(m.step_pause_s, step * b); };
  switch (algorithm) {
    case Algorithm::kDirect: return (n - 1) * a / 2 + pause(S) + (n - 1) * S * (b + g);
    case Algorithm::kRing: {
      const int pieces = n > 2 && m.ring_streams ? ring_stream_pieces(bytes, n) : 1;
      if (pieces > 1) {  // streamed (between hosts: a link that queues sends)
        const double tau = S / (double(n) * pieces) * b;
        return 2.0 * (n - 1) * std::max(pieces * tau, a + tau) + pause(S / n) +
               double(n - 1) / n * S * g;
      }
      return 2.0 * (n - 1) * (a + pause(S / n)) + 2.0 * (n - 1) / n * S * b +
             double(n - 1) / n * S * g;
    }
    case Algorithm::kHalvingDoubling: {
      double pauses = fold * 2 * pause(S);  // the fold and unfold move the whole buffer
      for (int q = 2; q <= p; q *= 2) pauses += 2 * pause(S / q);  // S/2 .. S/p, each twice
      return 2.0 * (log_p + fold) * a + pauses + 2.0 * (p - 1) / p * S * b +
             double(p - 1) / p * S * g + fold * (2.0 * S * b + S * g);
    }
    case Algorithm::kReduceBroadcast:
    case Algorithm::kHierarchical:
    case Algorithm::kAuto: break;
  }
  return INFINITY;
}

CostModel network_model(const CostModel& model, int rails) {
  CostModel net = model;
  net.alpha_s = model.net_alpha_s;
  net.beta_s_per_byte = model.net_beta_s_per_byte / std::max(1, rails);
  net.step_pause_s = model.net_step_bytes * model.net_beta_s_per_byte;
  net.ring_streams = true;
  return net;
}

CostModel shared_memory_model(const CostModel& model, double cross_process_share) {
  CostModel shm = model;
  shm.alpha_s =
      model.shm_alpha_s + cross_process_share * (model.shm_process_alpha_s - model.shm_alpha_s);
  shm.beta_s_per_byte = shm.gamma_s_per_byte = model.shm_beta_s_per_byte;
  return shm;
}

double predict_cma_seconds(int n, size_t bytes, double cross_process_share,
                           const CostModel& model) {
  // Two all-to-all exchanges of addresses: each a direct exchange of no payload.
  const double exchange = predict_seconds(Algorithm::kDirect, n, 0, /*peer_memory=*/false,
                                          shared_memory_model(model, cross_process_share));
  return 2 * exchange + static_cast<double>(bytes) * model.cma_beta_s_per_byte;
}

double predict_one_host_hierarchical_seconds(int processes, int k, size_t bytes,
                                             const CostModel& model) {
  return predict_local_tiers_seconds(k, k, processes, processes, bytes, model);
}

double predict_local_tiers_seconds(int devices, int device_owners, int processes,
                                   int process_owners, size_t bytes, const CostModel& model) {
  // The threads' tier: three sync points and ~3 copies per byte through memory, each
  // owner folding devices/owners times its share. The processes' tier on a slice S/k: a
  // reduce-scatter and an all-gather, one round of P - 1 concurrent messages each through
  // the shared-memory rings: an owner receives and reduces P - 1 sub-slices of S/(kO), a
  // rank that owns none receives all O of them back.
  const int k = std::max(1, device_owners), P = processes, O = std::max(1, process_owners);
  const double local =
      devices > 1 ? 3 * model.alpha_s + 1.5 * bytes * model.shm_beta_s_per_byte * devices / k : 0.0;
  if (P <= 1) return local;
  const CostModel shm = shared_memory_model(model, 1.0);
  const double slice = static_cast<double>(bytes) / k;
  const double gathered = O < P ? slice : double(P - 1) / P * slice;
  return local + (P - 1) * shm.alpha_s +
         double(P - 1) / O * slice * (shm.beta_s_per_byte + shm.gamma_s_per_byte) +
         gathered * shm.beta_s_per_byte;
}

Algorithm choose_between_hosts(int hosts, size_t bytes, int processes, const CostModel& net) {
  // Up to this slice, direct streamed between two hosts beside a processes tier measured
  // best on shaped rails (2 x 2 x 2 at 4 MiB: 16 streamed chunks 62.8 ms, where a
  // chunked ring lost a round trip per chunk); above it the reduction it doubles and
  // the copy of an in-place slice cost more than the streaming saves.
  constexpr size_t kStreamedDirectMaxBytes = 4 << 20;
  if (hosts == 2 && processes > 1 && bytes <= kStreamedDirectMaxBytes) return Algorithm::kDirect;
  // Two hosts alone: both schedules move S each way, but direct reduces all of S and
  // (in place) copies its result back, where the halves reduce S/2; measured on an
  // unshaped wire (2 x 1 x 1, per op) direct wins to 256 KiB (170 against 300 us), ties
  // at 512 KiB, and loses from 768 KiB (1 MiB: 750 against 450 us). On a shaped wire
  // the two are level (the same bytes on the wire).
  constexpr size_t kPairDirectMaxBytes = 512 << 10;
  if (hosts == 2 && bytes > kPairDirectMaxBytes) return Algorithm::kHalvingDoubling;
  return choose_algorithm(hosts, bytes, /*peer_memory=*/false, net);
}

namespace {

constexpr size_t kMinChunkBytes = 256 << 10;
constexpr int kMaxChunks = 16;

// Between hosts, a slice's share of the rails: `slices` slices cross over `rails` rails
// at once.
CostModel slice_network_model(const CostModel& model, int slices, int rails) {
  CostModel net = network_model(model, 1);
  net.beta_s_per_byte = model.net_beta_s_per_byte * slices / std::max(1, rails);
  return net;
}

// The hierarchy's two parts, each with its fixed cost (the same at 0 bytes): the local
// tiers (on the whole buffer, as on the busiest host) and the step between hosts (every
// slice at once, each over its share of the rails).
struct HierarchyParts {
  double local, local_fixed, network, network_fixed;
};

HierarchyParts hierarchy_parts(const HierarchyShape& shape, int rails, size_t bytes,
                               Algorithm between, const CostModel& model) {
  const int slices = std::max(1, shape.processes * shape.k);
  const CostModel net = slice_network_model(model, slices, rails);
  auto local = [&](size_t b) {
    return predict_local_tiers_seconds(std::max(shape.k, shape.most_devices), shape.k,
                                       std::max(shape.processes, shape.most_processes),
                                       shape.processes, b, model);
  };
  HierarchyParts parts{local(bytes), local(0), 0.0, 0.0};
  if (shape.hosts > 1) {
    parts.network = predict_seconds(between, shape.hosts, bytes / slices, false, net);
    parts.network_fixed = predict_seconds(between, shape.hosts, 0, false, net);
  }
  return parts;
}

}  // namespace

int choose_pipeline_chunks(int hosts, int processes, int k, int rails, size_t bytes,
                           const CostModel& model) {
  if (hosts < 2 || bytes < 2 * kMinChunkBytes) return 1;
  const int slices = std::max(1, processes * k);
  const size_t slice = bytes / slices;
  const Algorithm between =
      choose_between_hosts(hosts, slice, processes, slice_network_model(model, slices, rails));
  if (between == Algorithm::kDirect && processes > 1) {
    // Direct between hosts is streamed (algorithms/hierarchical.cc): the chunks follow
    // each other on the wire without a round trip between them, so chunks hide the
    // wire's time of a slice behind the processes tier's fill and drain (one chunk's
    // reduce-scatter and all-gather through shared memory), each chunk costing about
    // kStreamedChunkSeconds of those on hosts busy with network traffic: C =
    // sqrt(wire time / chunk cost), rounded down. Measured on namespaced hosts, time
    // per op: 4 MiB on 2 rails at 300 Mbit/s, 2 x 2 x 2 with 3, 6, 16 chunks 77.6,
    // 66.3, 62.8 ms (the rule: 12); unshaped, 2 x 2 x 1 with 1, 2, 4, 16 chunks 4.9,
    // 5.0, 5.3, 8.8 ms (the rule at 10 Gbit/s: 3), 1 MiB 1.1 ms in one chunk, 1.8 in 6
    // (the rule: 1).
    constexpr double kStreamedChunkSeconds = 250e-6;
    const double wire =
        static_cast<double>(slice) * slice_network_model(model, slices, rails).beta_s_per_byte;
    // No chunk of a slice under kMinStreamedChunkBytes: the rule the shaped rails were
    // measured by (a chunk per 80 KiB of a slice) bounds it from the other side.
    constexpr size_t kMinStreamedChunkBytes = 80 << 10;
    const int best = static_cast<int>(std::sqrt(wire / kStreamedChunkSeconds));
    const int fit = static_cast<int>(std::max<size_t>(1, slice / kMinStreamedChunkBytes));
    return std::clamp(std::min(best, fit), 1, kMaxChunks);
  }
  // The C that minimises predict_hierarchy_seconds unstreamed: min(Lv, Nv)/C + C·fixed.
  const HierarchyShape even{hosts, processes, k, processes, k};
  const HierarchyParts p = hierarchy_parts(even, rails, bytes, between, model);
  const double hidden = std::min(p.local - p.local_fixed, p.network - p.network_fixed);
  const double fixed = std::max(1e-9, p.local_fixed + p.network_fixed);
  const int best = static_cast<int>(std::lround(std::sqrt(std::max(0.0, hidden) / fixed)));
  int chunks = std::max(1, std::min({best, kMaxChunks, static_cast<int>(bytes / kMinChunkBytes)}));
  // The ring between more than two hosts streams a chunk's slice only while its blocks
  // have two pieces or more (ring_stream_pieces, what the runtime decides by, chunk by
  // chunk): no more chunks than that, or they would run the unstreamed ring the model
  // did not predict.
  if (between == Algorithm::kRing && hosts > 2 && ring_stream_pieces(slice, hosts) > 1) {
    while (chunks > 1 && ring_stream_pieces(slice / chunks, hosts) < 2) --chunks;
  }
  return chunks;
}

double predict_hierarchy_seconds(const HierarchyShape& shape, int rails, size_t bytes,
                                 Algorithm between, int chunks, bool streamed,
                                 const CostModel& model) {
  const HierarchyParts p = hierarchy_parts(shape, rails, bytes, between, model);
  const double c = std::max(1, chunks);
  const double local = std::max(0.0, p.local - p.local_fixed);
  const double network = std::max(0.0, p.network - p.network_fixed);
  return std::max(local, network) + std::min(local, network) / c + c * p.local_fixed +
         (streamed ? 1.0 : c) * p.network_fixed;
}

double predict_flat_across_hosts_seconds(Algorithm algorithm, int n, int per_host, int rails,
                                         size_t bytes, const CostModel& model) {
  CostModel net = network_model(model, rails);
  if (algorithm != Algorithm::kRing) net.beta_s_per_byte *= std::max(1, per_host);
  return predict_seconds(algorithm, n, bytes, /*peer_memory=*/false, net);
}

// The share of an algorithm's message steps that cross processes, ranks numbered
// process by process: direct talks to n - k of its n - 1 peers, a ring crosses at P of
// its n hops, halving-doubling's first log2(k) exchanges stay within a process.
static double cross_process_share(Algorithm algorithm, int n, int processes, int k) {
  int log_n = 0, log_k = 0;
  while ((2 << log_n) <= n) ++log_n;
  while ((2 << log_k) <= k) ++log_k;
  switch (algorithm) {
    case Algorithm::kRing: return double(processes) / n;
    case Algorithm::kHalvingDoubling:
      return double(std::max(0, log_n - log_k)) / std::max(1, log_n);
    default: return double(n - k) / std::max(1, n - 1);
  }
}

double predict_one_host_seconds(Algorithm algorithm, int n, int processes, int k, size_t bytes,
                                const CostModel& model) {
  const double share = cross_process_share(algorithm, n, processes, k);
  switch (algorithm) {
    case Algorithm::kDirect:
    case Algorithm::kRing:
    case Algorithm::kHalvingDoubling:
      return predict_seconds(algorithm, n, bytes, /*peer_memory=*/false,
                             shared_memory_model(model, share));
    case Algorithm::kReduceBroadcast: return predict_cma_seconds(n, bytes, share, model);
    case Algorithm::kHierarchical:
      return predict_one_host_hierarchical_seconds(processes, k, bytes, model);
    case Algorithm::kAuto: break;
  }
  return INFINITY;
}

namespace {

// choose_one_host's candidates and the times it compares: this shape's calibrated lines
// (bench --calibrate) where all four have one, else the model's.
struct OneHostCandidates {
  Algorithm algorithm[4];
  double seconds[4];
};

OneHostCandidates one_host_candidates(int n, int processes, int k, size_t bytes, bool cma,
                                      const CostModel& model) {
  OneHostCandidates c{{Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling,
                       cma ? Algorithm::kReduceBroadcast : Algorithm::kHierarchical},
                      {}};
  bool measured = n == processes * k;
  for (int i = 0; i < 4 && measured; ++i) {
    const std::optional<double> t = measured_one_host_seconds(processes, k, c.algorithm[i], bytes);
    measured = t.has_value();
    c.seconds[i] = t.value_or(0.0);
  }
  for (int i = 0; i < 4 && !measured; ++i) {
    c.seconds[i] = predict_one_host_seconds(c.algorithm[i], n, processes, k, bytes, model);
  }
  return c;
}

}  // namespace

// Measured with 8 ranks on 2 cores (benchmarks/, 2x4, 4x2, 8x1): flat halving-doubling
// is fastest up to ~64-128 KiB (2x4 at 4 KiB: 75 us, the hierarchy 258 us), cross-memory
// attach from ~256 KiB, where the hierarchy only ties it at 2x4 and is 2.5x slower at
// 4x2 (4 MiB); so with cross-memory attach the hierarchy is not a candidate.
Algorithm choose_one_host(int n, int processes, int k, size_t bytes, bool cma,
                          const CostModel& model) {
  const OneHostCandidates c = one_host_candidates(n, processes, k, bytes, cma, model);
  int best = 0;
  for (int i = 1; i < 4; ++i) {
    if (c.seconds[i] < c.seconds[best]) best = i;
  }
  return c.algorithm[best];
}

double one_host_seconds(Algorithm algorithm, int n, int processes, int k, size_t bytes, bool cma,
                        const CostModel& model) {
  const OneHostCandidates c = one_host_candidates(n, processes, k, bytes, cma, model);
  for (int i = 0; i < 4; ++i) {
    if (c.algorithm[i] == algorithm) return c.seconds[i];
  }
  return predict_one_host_seconds(algorithm, n, processes, k, bytes, model);
}

Algorithm choose_algorithm(int n, size_t bytes, bool peer_memory, const CostModel& model) {
  Algorithm best = Algorithm::kDirect;
  double best_t = predict_seconds(best, n, bytes, peer_memory, model);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kReduceBroadcast}) {
    double t = predict_seconds(a, n, bytes, peer_memory, model);
    if (t < best_t) best = a, best_t = t;
  }
  return best;
}

}  // namespace accl
