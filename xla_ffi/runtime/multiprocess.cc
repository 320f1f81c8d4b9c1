// All-reduce of a group that spans processes (and hosts).
//
// Hierarchical schedule (ACCL), for a group whose processes each hold k of its devices:
//   1. local reduce-scatter: the k device threads of a process read each other's
//      buffers in place; local member i reduces block i (of k) of every segment;
//   2. inter-process all-reduce of block i among the i-th members of all processes,
//      k of them at once on disjoint data: over shared memory between processes of a
//      host and over every rail between hosts (ring, halving-doubling or direct,
//      chosen by the cost model for P processes and S/k bytes);
//   3. local all-gather: member i copies the other members' finished blocks.
// When processes hold different numbers of the group's devices, k is taken as 1: the
// first local member reduces the whole buffer, runs step 2 and the others copy its result.
//
// One host (every process of the group on this host), large messages with cross-memory
// attach usable: instead of the hierarchy, one reduce-broadcast over all devices of the
// group (algorithms/cma_reduce_broadcast.cc); between devices of one process its copies
// are plain memcpy. Each rank reads its block of every input once and writes it into
// every output once: the hierarchy's local reduce-scatter and all-gather passes go.
// Small messages on one host run flat: a few message steps cost less than the
// hierarchy's sync points among each process's device threads. The cost model picks
// (choose_one_host).
//
// Flat schedule (algorithm= ring, halving_doubling or direct, or the automatic choice
// on one host): the algorithm runs over all devices of the group at once, with memory
// rings between device threads of one process, shared memory between processes of a
// host and TCP between hosts.
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "algorithms/select.h"
#include "reduce/reduce.h"
#include "runtime/allreduce.h"
#include "runtime/stats.h"
#include "runtime/trace.h"
#include "runtime/world.h"
#include "transport/channel_link.h"

namespace accl {
namespace {

// Identifies the call on the wire (not the op id, which each process numbers itself).
uint64_t call_tag(const Signature& sig, int group_size) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<uint64_t>(sig.dtype));
  mix(static_cast<uint64_t>(sig.op));
  mix(sig.count);
  mix(sig.segments);
  mix(sig.layout_hash);
  mix(static_cast<uint64_t>(sig.algorithm));
  mix(static_cast<uint64_t>(group_size));
  return h;
}

uint64_t schedule_tag(uint64_t call, Algorithm schedule) {
  return (call ^ static_cast<uint64_t>(schedule)) * 1099511628211ull;
}

uint64_t elapsed_ns(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count();
}

Status open_link(World& world, const std::vector<int64_t>& members, int rank, uint64_t tag,
                 const std::string& where, const Deadline& deadline,
                 std::unique_ptr<ChannelLink>* link) {
  std::vector<std::vector<Channel*>> channels(members.size());
  for (size_t r = 0; r < members.size(); ++r) {
    if (static_cast<int>(r) == rank) continue;
    Status s = world.channels(members[rank], members[r], deadline, &channels[r]);
    if (!s.ok()) return error(s.code(), where, ": connecting to device ", members[r], ": ", s.message());
  }
  *link = std::make_unique<ChannelLink>(rank, std::move(channels), tag, where, deadline);
  return Status::Ok();
}

// Runs `algorithm` over channels to `members`; *sent_by_rail receives the bytes sent per rail.
Status run_over_link(World& world, const std::vector<int64_t>& members, int rank, uint64_t tag,
                     const std::string& where, const Deadline& deadline, Algorithm algorithm,
                     const std::vector<Buffers>& segments, const Reduction& reduction,
                     std::map<std::string, uint64_t>* sent_by_rail) {
  std::unique_ptr<ChannelLink> link;
  ACCL_RETURN_IF_ERROR(open_link(world, members, rank, tag, where, deadline, &link));
  Status s = run_allreduce(algorithm, *link, segments, reduction);
  if (!s.ok()) link->fail(s.code());
  *sent_by_rail = link->bytes_sent_by_rail();
  return s;
}

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// One trace event per rail that carried bytes during [start, end).
void trace_rails(const char* phase, const std::map<std::string, uint64_t>& sent_by_rail,
                 int64_t device, Clock::time_point start, Clock::time_point end,
                 const std::string& detail) {
  if (!trace_enabled()) return;
  for (const auto& [rail, bytes] : sent_by_rail) {
    const bool between_hosts = rail != "shm" && rail != "memory";
    trace_record(TraceEvent{str_cat(phase, between_hosts ? " rail " : " ", rail), device,
                            ns_of(start), ns_of(end), bytes, detail});
  }
}

// Runs allreduce_cma over `link` (the group `members`, all on this host); *done tells
// whether it ran. Whether the group can use cross-memory attach is probed on its
// first call and remembered per group, by every member alike.
Status allreduce_cross_memory(Link& link, const std::vector<int64_t>& members,
                              const std::vector<Buffers>& mine, const Reduction& reduction,
                              bool* done) {
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, bool> usable_by_group;
  bool known = false, usable = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = usable_by_group.find(members);
    if (it != usable_by_group.end()) known = true, usable = it->second;
  }
  *done = false;
  if (known && !usable) return Status::Ok();
  ACCL_RETURN_IF_ERROR(allreduce_cma(link, mine, reduction, /*probe=*/!known, &usable));
  if (!known) {
    std::lock_guard<std::mutex> lock(mutex);
    usable_by_group[members] = usable;
  }
  *done = usable;
  if (usable) {
    uint64_t bytes = 0;
    for (const Buffers& b : mine) bytes += b.count * b.elem_size;
    // This rank read its block from, and wrote it to, each of the n - 1 others.
    const uint64_t moved = bytes / link.size() * (link.size() - 1);
    TrafficStats& cma = traffic_stats("cma");
    cma.bytes_received.fetch_add(moved, std::memory_order_relaxed);
    cma.bytes_sent.fetch_add(moved, std::memory_order_relaxed);
    cma.messages_sent.fetch_add(link.size() - 1, std::memory_order_relaxed);
  }
  return Status::Ok();
}

struct Layout {
  std::vector<int> process_order;                // processes in order of first appearance
  std::map<int, std::vector<int>> ranks_of;      // process -> group ranks, in rank order
};

Status group_layout(const World& world, const std::vector<int64_t>& devices, const std::string& label,
                    Layout* layout) {
  for (size_t r = 0; r < devices.size(); ++r) {
    const int p = world.process_of(devices[r]);
    if (p < 0) return error(Code::kInvalidArgument, label, ": device ", devices[r], " belongs to no process");
    if (!layout->ranks_of.count(p)) layout->process_order.push_back(p);
    layout->ranks_of[p].push_back(static_cast<int>(r));
  }
  return Status::Ok();
}

}  // namespace

Status allreduce_across_processes(CallSpec spec, const std::vector<int64_t>& devices,
                                  const std::vector<const void*>& in,
                                  const std::vector<void*>& out,
                                  const std::vector<uint64_t>& counts) {
  World* world = World::get();
  if (world == nullptr || !world->ready()) {
    return error(Code::kInvalidArgument, spec.label,
                 ": the group spans processes but jax_accl's process table is not set up "
                 "(jax_accl bootstraps it when a multi-process program is lowered after "
                 "jax.distributed.initialize())");
  }
  Layout layout;
  ACCL_RETURN_IF_ERROR(group_layout(*world, devices, spec.label, &layout));
  if (layout.process_order.size() == 1) return allreduce_local(spec, in, out, counts);

  describe_layout(counts, &spec.signature);
  const Signature& sig = spec.signature;
  Reduction reduction;
  ACCL_RETURN_IF_ERROR(reduction_for(spec, &reduction));
  const size_t elem = reduction.elem_size;
  const Deadline deadline = Deadline::after_seconds(spec.timeout_s);
  const auto start = Clock::now();
  const std::string where = str_cat(spec.label, ", rank ", spec.rank, " (device ",
                                    devices[spec.rank], ", process ", world->process_index(), ")");

  const size_t bytes = sig.count * elem;
  // This process's members of the group; k per process if every process holds as many.
  const std::vector<int>& local_ranks = layout.ranks_of[world->process_index()];
  const int k = static_cast<int>(local_ranks.size());
  int li = 0;
  while (local_ranks[li] != spec.rank) ++li;
  bool uniform = true;
  for (int p : layout.process_order) uniform &= static_cast<int>(layout.ranks_of[p].size()) == k;
  const int slices = uniform ? k : 1;
  const int processes = static_cast<int>(layout.process_order.size());
  bool one_host = true;
  for (int p : layout.process_order) {
    one_host &= world->process(p).host == world->process(world->process_index()).host;
  }

  // The schedule: a forced ring, halving-doubling or direct runs flat over all devices;
  // a forced reduce_broadcast is the cross-memory-attach one on one host. The automatic
  // choice on one host is choose_one_host's (small messages: flat, a few sync points;
  // large ones: cross-memory attach, one kernel copy per byte each way); between hosts
  // it is the hierarchy, which keeps every rail busy.
  const bool cma = one_host && world->cross_memory_attach();
  Algorithm schedule = sig.algorithm;
  if (schedule == Algorithm::kAuto) {
    schedule = one_host ? choose_one_host(spec.size, processes, slices, bytes, cma, cost_model())
                        : Algorithm::kHierarchical;
  }
  if (schedule == Algorithm::kReduceBroadcast && !cma) schedule = Algorithm::kHierarchical;
  // The choice is on the wire: a process whose model chose otherwise (another
  // calibration) fails with a tag mismatch naming both, instead of mixing schedules.
  const uint64_t call = call_tag(sig, spec.size);
  uint64_t tag = schedule_tag(call, schedule);
  auto finish = [&](const Status& s) {
    if (s.ok()) {
      record_call(schedule, spec, start, Clock::now(), bytes);
    } else {
      record_error(schedule);
    }
    return s;
  };

  std::vector<Buffers> segments;
  for (size_t i = 0; i < counts.size(); ++i) {
    segments.push_back(Buffers{in[i], out[i], counts[i], elem, static_cast<int>(i)});
  }
  auto trace_phase = [&](const char* name, Clock::time_point from, uint64_t moved) {
    if (trace_enabled()) {
      trace_record(TraceEvent{name, spec.device, ns_of(from), ns_of(Clock::now()), moved,
                              spec.label});
    }
  };
  if (schedule == Algorithm::kReduceBroadcast) {
    std::unique_ptr<ChannelLink> link;
    Status s = open_link(*world, devices, spec.rank, tag, where, deadline, &link);
    bool done = false;
    if (s.ok()) s = allreduce_cross_memory(*link, devices, segments, reduction, &done);
    if (!s.ok()) {
      if (link) link->fail(s.code());
      return finish(s);
    }
    if (done) {
      trace_phase("one-host reduce-broadcast cma", start, bytes);
      return finish(s);
    }
    // Cross-memory attach refused (every rank learnt it alike): the next best schedule.
    schedule = sig.algorithm == Algorithm::kAuto
                   ? choose_one_host(spec.size, processes, slices, bytes, /*cma=*/false,
                                     cost_model())
                   : Algorithm::kHierarchical;
    tag = schedule_tag(call, schedule);
  }
  if (schedule != Algorithm::kHierarchical) {
    std::map<std::string, uint64_t> sent;
    Status s = run_over_link(*world, devices, spec.rank, tag, where, deadline, schedule,
                             segments, reduction, &sent);
    trace_rails(str_cat("flat ", algorithm_name(schedule)).c_str(), sent, spec.device, start,
                Clock::now(), spec.label);
    return finish(s);
  }

  // Hierarchical.
  std::shared_ptr<LocalExchange> exchange;
  std::unique_ptr<LocalLink> local;
  if (k > 1) {
    Status joined = join_call(spec.key, li, k, sig, spec.label, deadline, segments, &exchange);
    if (!joined.ok()) return finish(joined);
    local = std::make_unique<LocalLink>(exchange, li, deadline);
  }
  PeerMemory* peers = local ? local->peer_memory() : nullptr;
  auto fail_local = [&](Status s) {
    if (local) local->fail(s);
    return finish(s);
  };

  // 1. Local reduce-scatter into scratch (my block of every segment).
  auto phase_start = Clock::now();
  // Kept by the device's worker thread from call to call: a fresh buffer per call would
  // cost its page faults every time (~1 ms per 4 MiB).
  thread_local std::vector<std::vector<char>> scratch;
  if (scratch.size() < segments.size()) scratch.resize(segments.size());
  std::vector<Buffers> mine;
  if (li < slices) {
    for (size_t s = 0; s < segments.size(); ++s) {
      const Buffers& seg = segments[s];
      const Blocks blocks{seg.count, slices};
      const size_t begin = blocks.begin(li), len = blocks.length(li);
      const void* reduced = seg.in_at(begin);
      if (k > 1 && len > 0) {
        if (scratch[s].size() < len * elem) scratch[s].resize(len * elem);
        std::vector<const void*> sources(k);
        for (int j = 0; j < k; ++j) {
          sources[j] = static_cast<const char*>(peers->input(j, static_cast<int>(s))) + begin * elem;
        }
        reduction.fold(scratch[s].data(), sources.data(), k, len);
        reduced = scratch[s].data();
      }
      mine.push_back(Buffers{reduced, seg.out_at(begin), len, elem, static_cast<int>(s)});
    }
  }
  phase_nanoseconds()[0].fetch_add(elapsed_ns(phase_start), std::memory_order_relaxed);
  size_t slice_bytes = 0;
  for (const Buffers& b : mine) slice_bytes += b.count * elem;
  if (k > 1) trace_phase("local reduce-scatter", phase_start, slice_bytes);

  // 2. Inter-process all-reduce of my slice with the same slice of the other processes.
  phase_start = Clock::now();
  if (li < slices) {
    std::vector<int64_t> cross;
    int cross_rank = 0;
    for (int p : layout.process_order) {
      if (p == world->process_index()) cross_rank = static_cast<int>(cross.size());
      cross.push_back(devices[layout.ranks_of[p][li]]);
    }
    // Messages between hosts cost the rails' time; between processes of one host, memory's.
    int rails = 0;
    for (int p : layout.process_order) {
      if (world->process(p).host != world->process(world->process_index()).host) {
        rails = static_cast<int>(world->process(world->process_index()).rails.size());
      }
    }
    const CostModel model =
        rails > 0 ? network_model(cost_model(), rails) : shared_memory_model(cost_model(), 1.0);
    const Algorithm inner = choose_algorithm(static_cast<int>(cross.size()), slice_bytes,
                                             /*peer_memory=*/false, model);
    std::map<std::string, uint64_t> sent;
    Status s = run_over_link(*world, cross, cross_rank, tag, where, deadline, inner, mine,
                             reduction, &sent);
    if (!s.ok()) return fail_local(s);
    trace_rails(str_cat(rails > 0 ? "inter-host " : "inter-process ", algorithm_name(inner)).c_str(),
                sent, spec.device, phase_start, Clock::now(), spec.label);
  }
  phase_nanoseconds()[1].fetch_add(elapsed_ns(phase_start), std::memory_order_relaxed);

  // 3. Local all-gather of the other members' slices.
  phase_start = Clock::now();
  if (k > 1) {
    Status s = peers->barrier();  // every slice is final
    if (!s.ok()) return fail_local(s);
    for (size_t seg_index = 0; seg_index < segments.size(); ++seg_index) {
      const Buffers& seg = segments[seg_index];
      const Blocks blocks{seg.count, slices};
      for (int j = 0; j < slices; ++j) {
        if (j == li || blocks.length(j) == 0) continue;
        const char* src = static_cast<const char*>(peers->output(j, static_cast<int>(seg_index)));
        stream_copy(seg.out_at(blocks.begin(j)), src + blocks.begin(j) * elem,
                    blocks.length(j) * elem);
      }
    }
    stream_fence();
    s = peers->barrier();  // nobody reads our output any more
    if (!s.ok()) return fail_local(s);
    trace_phase("local all-gather", phase_start, (sig.count * elem) - slice_bytes);
  }
  phase_nanoseconds()[2].fetch_add(elapsed_ns(phase_start), std::memory_order_relaxed);
  return finish(Status::Ok());
}

}  // namespace accl
