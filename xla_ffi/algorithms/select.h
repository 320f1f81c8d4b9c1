// Algorithm selection by an alpha-beta cost model: a step costs alpha (the handshake:
// publish, wake the peer, wait), a byte moved costs beta, a byte reduced gamma.
// Between processes or hosts (messages), per rank:
//   direct:           (n-1)/2·alpha + (n-1)·S·(beta + gamma)   (overlapped handshakes)
//   ring:             2(n-1)·alpha + 2(n-1)/n·S·beta + (n-1)/n·S·gamma
//   halving-doubling: 2·log2(p)·alpha + 2(p-1)/p·S·beta + (p-1)/p·S·gamma,
//                     plus 2·alpha + 2·S·beta + S·gamma to fold n - p extra ranks
// Between hosts every step that waits for the whole of the previous one (direct's one
// step, halving-doubling's, the unstreamed ring's) also leaves the wire idle: a step of
// b bytes for min(net_step, b·beta), net_step being net_step_bytes at a rail's rate. The
// streamed ring (ring_streamed.cc: blocks of m >= 2 pieces of tau = S/(n·m)·beta) pauses
// once, and each of its 2(n-1) steps takes the longer of its pieces' wire time and its
// first piece's trip:
//   ring, streamed:   2(n-1)·max(m·tau, alpha + tau) + pause + (n-1)/n·S·gamma
// Among threads sharing memory, beta is per byte of memory traffic instead:
//   direct:           alpha (x2 above the eager size) + (n+1)·S·beta
//   reduce-broadcast: 2·alpha + 2·S·beta + S·gamma
//   ring, halving-doubling: as above with 5 bytes of traffic per byte exchanged
//   (a reducing receive reads two operands and writes one; a copy reads and writes).
// The constants are per machine; defaults were measured on a 2-core x86-64 host with
// 8 device threads (see benchmarks/), and can be overridden from Python.
#pragma once

#include <cstddef>

#include "algorithms/algorithm.h"

namespace accl {

struct CostModel {
  // Measured with 8 device threads on 2 cores: a sync point costs ~40 us because all
  // eight threads must be scheduled through it (benchmarks/: direct vs reduce_broadcast).
  double alpha_s = 40e-6;
  double beta_s_per_byte = 1.0 / 10e9;
  double gamma_s_per_byte = 1.0 / 10e9;
  // Between hosts, per rail: a message step costs a round trip through the kernel's TCP
  // stack; a byte costs the rail's time (10 Gbit/s by default). Rails stripe a message,
  // so beta is divided by their number.
  double net_alpha_s = 60e-6;
  double net_beta_s_per_byte = 8.0 / 10e9;
  // Between hosts, the wire's idle time at the end of a step that the next one waits
  // for whole (its last bytes' trip through the rails' queues, the reduction of the last
  // stripe, TCP's restart towards the next peer after the pause), as the bytes a rail
  // carries meanwhile: net_step = net_step_bytes · net_beta. Measured on namespaced
  // hosts, two rails shaped to 300 Mbit/s (benchmarks.md, "Linear to 16 hosts"):
  // halving-doubling lost it at each of its 2·log2(H) steps, the streamed ring once.
  double net_step_bytes = 96 << 10;
  // Set by network_model, for the message formulas between hosts: the step pause
  // (net_step; 0 on every other link), and that the ring streams there.
  double step_pause_s = 0.0;
  bool ring_streams = false;
  // Between processes of one host (8 ranks on 2 cores, measured with benchmarks/ at
  // 2x4, 4x2 and 8x1 processes x devices): a message step through the memory rings
  // between device threads of one process costs ~8 us, one between processes ~28 us
  // (a switch between processes: 8x1 at 4 KiB, halving-doubling 180 us, direct 140 us;
  // 2x4, where two of its three steps stay within a process, 70 and 90 us), a byte
  // ~0.8 ns per rank (its two copies, and the cores shared by four ranks each). The
  // cross-memory-attach reduce-broadcast costs two all-to-all exchanges and ~1.45 ns
  // per byte of the buffer.
  double shm_alpha_s = 8e-6;
  double shm_process_alpha_s = 28e-6;
  double shm_beta_s_per_byte = 0.8e-9;
  double cma_beta_s_per_byte = 1.45e-9;
};

// The model for messages between hosts over `rails` rails (alpha/beta from the net_*
// constants, gamma unchanged), for choose_algorithm(..., peer_memory=false, ...).
CostModel network_model(const CostModel& model, int rails);
// The model for messages among ranks of one host (shm_* constants for beta and gamma;
// alpha between shm_alpha_s and shm_process_alpha_s by the share of the steps that
// cross processes).
CostModel shared_memory_model(const CostModel& model, double cross_process_share);
// The predicted time of the one-host reduce-broadcast by cross-memory attach over n
// ranks: two all-to-all exchanges (each a direct exchange of no payload, a
// `cross_process_share` of its handshakes between processes) and cma_beta per byte.
double predict_cma_seconds(int n, size_t bytes, double cross_process_share, const CostModel& model);
// The predicted time of the hierarchy on one host, `processes` processes holding `k`
// devices each: three sync points among a process's k threads and their passes over
// memory (~3 copies per byte), then a reduce-scatter and an all-gather of S/k among the
// processes, one round of messages each through the shared-memory rings.
double predict_one_host_hierarchical_seconds(int processes, int k, size_t bytes,
                                             const CostModel& model);
// The same for a host whose tiers have more ranks than owners (an uneven layout): a
// process of `devices` devices, `device_owners` of which own a slice, and `processes`
// processes, `process_owners` of which own a sub-slice. A rank that owns nothing sends
// its whole part to the owners and receives all of the result.
double predict_local_tiers_seconds(int devices, int device_owners, int processes,
                                   int process_owners, size_t bytes, const CostModel& model);

// How many chunks the hierarchy pipelines a call of `bytes` into: `hosts` hosts, each
// of whose `slices` slices (k devices x P processes owning one) crosses over a share of
// `rails` rails. With the local tiers' time L (one-host hierarchy on S) and the time N
// between hosts, C chunks take about max(L, N) + min(L, N)/C + (C - 1)·(their fixed
// costs at 0 bytes): C = sqrt(min/fixed), at most 16 and no chunk under 256 KiB. Direct
// between hosts with a processes tier on each (streamed): C = sqrt(a slice's wire time by
// the model / a chunk's ~250 us), at most 16 and no chunk under 80 KiB of a slice.
int choose_pipeline_chunks(int hosts, int processes, int k, int rails, size_t bytes,
                           const CostModel& model);
// A hierarchy's shape: `hosts` hosts of `processes` x `k` slices each (the fewest processes
// any host has x the fewest devices any process has: the owners, as choose_pipeline_chunks
// takes them), the busiest host's tiers having up to `most_processes` processes of up to
// `most_devices` devices.
struct HierarchyShape {
  int hosts = 1;
  int processes = 1;
  int k = 1;
  int most_processes = 1;
  int most_devices = 1;
};
// The predicted time of the hierarchy, `between` between hosts, in `chunks` chunks. With
// the local tiers (predict_local_tiers_seconds, on the busiest host) taking L = Lf + Lv
// (fixed + per byte) and the step between hosts N = Nf + Nv: C chunks overlap the two,
// max(Lv, Nv) + min(Lv, Nv)/C, and pay the fixed costs once per chunk, C·(Lf + Nf);
// `streamed` chunks follow each other on the wire without a round trip between them, so
// the step between hosts pays Nf once.
double predict_hierarchy_seconds(const HierarchyShape& shape, int rails, size_t bytes,
                                 Algorithm between, int chunks, bool streamed,
                                 const CostModel& model);
// The predicted time of a flat algorithm over n ranks spread over several hosts, at most
// `per_host` on one: every step over messages at the network's alpha; a ring, its ranks
// numbered host by host, has one flow per host crossing the host's `rails` rails, the
// other algorithms `per_host` flows at once there.
double predict_flat_across_hosts_seconds(Algorithm algorithm, int n, int per_host, int rails,
                                         size_t bytes, const CostModel& model);

CostModel& cost_model();  // the process-wide model used by kAuto
// `peer_memory`: the ranks can read each other's buffers (threads of one process).
double predict_seconds(Algorithm algorithm, int n, size_t bytes, bool peer_memory,
                       const CostModel& model);
// The predicted time of `algorithm` over n devices of one host, `processes` processes
// holding `k` of them each: direct, ring and halving-doubling through the shared-memory
// rings, kReduceBroadcast by cross-memory attach, kHierarchical; kAuto: infinity.
double predict_one_host_seconds(Algorithm algorithm, int n, int processes, int k, size_t bytes,
                                const CostModel& model);
// The automatic choice for a group of n devices on one host, `processes` processes
// holding `k` of them each (1 where they hold different numbers): with cross-memory
// attach (`cma`), the best flat algorithm over all n devices or the cross-memory-attach
// reduce-broadcast (kReduceBroadcast), whichever the model predicts faster; without it,
// the best flat algorithm or kHierarchical. Where bench --calibrate fitted lines to all
// four candidates' times on this shape (algorithms/measured.h), those decide, not the model.
Algorithm choose_one_host(int n, int processes, int k, size_t bytes, bool cma,
                          const CostModel& model);
// The time choose_one_host gives `algorithm` on that group: its calibrated line where
// choose_one_host goes by the lines, else the model's (predict_one_host_seconds).
double one_host_seconds(Algorithm algorithm, int n, int processes, int k, size_t bytes, bool cma,
                        const CostModel& model);
// The algorithm with the least predicted time (never kAuto).
Algorithm choose_algorithm(int n, size_t bytes, bool peer_memory, const CostModel& model);
// Between `hosts` hosts, for a slice of `bytes` of a host with `processes` processes:
// the cost model's choice over `net`, but direct between two hosts for slices up to
// 4 MiB beside a processes tier (it streams the pipeline's chunks there). For two hosts
// every algorithm sends the slice once each way; direct does it in one step,
// halving-doubling (or the ring, the same schedule for two) reduces half as many bytes
// and receives the other half straight into the output, which is what counts where
// the CPU, not the wire, is the limit.
Algorithm choose_between_hosts(int hosts, size_t bytes, int processes, const CostModel& net);

}  // namespace accl
