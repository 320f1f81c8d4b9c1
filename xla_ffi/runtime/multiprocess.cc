// A call of any collective (runtime/collective.h's rows) whose group spans processes
// (and hosts): which schedule runs, over which links. What follows names the
// all-reduce's; the other rows run their flat runner or their schedule by host.
//
// Hierarchical (algorithms/hierarchical.cc, joined and connected by runtime/hierarchical_call.cc),
// the automatic choice between hosts: three tiers by host (topology/group_layout.h), the
// device threads of this process (peer memory), device t of every process of this host
// (shared memory), and the owners of the same position on every host (TCP, every slice
// striped over every rail). The communicator (runtime/communicator.h) plans the call:
// the schedule, the algorithm between hosts and the pipeline's chunks.
//
// One host (every process of the group on this host), large messages with cross-memory
// attach usable: one reduce-broadcast over all devices of the group
// (algorithms/cma_reduce_broadcast.cc); between devices of one process its copies are
// plain memcpy. Small messages on one host run flat: a few message steps cost less
// than the hierarchy's sync points. The cost model picks (choose_one_host).
//
// Reduce-scatter and all-gather between hosts of the same number of ranks each run by
// host (algorithms/scatter_gather_by_host.cc: in the host, then between hosts), and an
// all-to-all where its plan says so (all_to_all_by_host.cc); other layouts, and every
// permutation, run flat.
//
// Flat schedule (algorithm= ring, halving_doubling or direct, or the automatic choice
// on one host): the algorithm runs over all devices of the group at once, with memory
// rings between device threads of one process, shared memory between processes of a
// host and TCP between hosts.
//
// The plan is on the wire: every frame's header carries its sender's (call_plan.h's
// WirePlan), and the first call of each channel space checks that the group's
// processes plan alike (check_plans_agree), so that processes configured differently
// raise at once, naming both plans, instead of waiting for each other's frames.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "algorithms/scatter_gather.h"
#include "common/hash.h"
#include "reduce/reduce.h"
#include "runtime/call_plan.h"
#include "runtime/call_record.h"
#include "runtime/collective.h"
#include "runtime/collective_call.h"
#include "runtime/communicator.h"
#include "runtime/hierarchical_call.h"
#include "runtime/stall.h"
#include "runtime/stats.h"
#include "runtime/trace.h"
#include "runtime/world.h"
#include "topology/group_layout.h"
#include "transport/channel_link.h"
#include "transport/cma.h"
#include "transport/wire_link.h"

namespace accl {
namespace {

// Identifies the call on the wire (not the op id, which each process numbers itself):
// its signature and its index among the group's calls of its lane, which every rank
// counts alike. A rank whose peer is in another call of the same signature (after a
// recovery that one process left, say) fails with a tag mismatch instead of reducing
// one step's data with another's.
uint64_t call_tag(const Signature& sig, int group_size, uint64_t call_index) {
  return Fnv64()
      .mix(static_cast<uint64_t>(sig.dtype))
      .mix(static_cast<uint64_t>(sig.op))
      .mix(sig.count)
      .mix(sig.segments)
      .mix(sig.layout_hash)
      .mix(static_cast<uint64_t>(sig.algorithm))
      .mix(static_cast<uint64_t>(sig.collective))
      .mix(static_cast<uint64_t>(sig.wire_bf16))
      .mix(static_cast<uint64_t>(group_size))
      .mix(call_index)
      .value();
}

uint64_t schedule_tag(uint64_t call, Algorithm schedule) {
  return Fnv64(call).mix(static_cast<uint64_t>(schedule)).value();
}

// The plan a link's frames carry (call_plan.h's WirePlan, encoded), and the World that
// names a peer's process when its plan differs.
struct PlanOnWire {
  WirePlan plan;
  const World* world = nullptr;
};

// What a rank says when a peer's frame carries another plan: both processes' plans, and
// the settings that must agree.
std::string plan_mismatch(int process, uint64_t mine, int peer_process, uint64_t theirs) {
  return str_cat("the peer is in a different call: process ", process, " runs ",
                 describe_wire_plan(mine), ", process ", peer_process, " ",
                 describe_wire_plan(theirs),
                 "; the processes plan this call differently: set its algorithm, "
                 "JAX_ACCL_ALGORITHM, JAX_ACCL_PIPELINE_CHUNKS and JAX_ACCL_CMA the same on "
                 "every process (the stored cost model and JAX_ACCL_LINK_GBITS are process "
                 "0's)");
}

// A link to `members` (where this device is `rank`) over the channels of `space`, its
// frames carrying `wire`'s plan.
Status open_link(ChannelSpace& space, const std::vector<int64_t>& members, int rank, uint64_t tag,
                 const PlanOnWire& wire, const std::string& where, const Deadline& deadline,
                 std::unique_ptr<ChannelLink>* link) {
  std::vector<std::vector<Channel*>> channels(members.size());
  for (size_t r = 0; r < members.size(); ++r) {
    if (static_cast<int>(r) == rank) continue;
    Status s = space.channels(members[rank], members[r], deadline, &channels[r]);
    if (!s.ok())
      return error(s.code(), where, ": connecting to device ", members[r], ": ", s.message());
  }
  *link =
      std::make_unique<ChannelLink>(rank, std::move(channels), tag, where, deadline, space.epoch());
  const uint64_t mine = encode_wire_plan(wire.plan);
  const World* world = wire.world;
  (*link)->set_plan(mine, [world, members, rank, mine](int peer, uint64_t theirs) {
    return plan_mismatch(world->process_of(members[rank]), mine, world->process_of(members[peer]),
                         theirs);
  });
  return Status::Ok();
}

// The group's plan of a call as every process computes it (rank 0's, which always
// takes part between hosts), as the plan check compares it.
WirePlan group_plan(const Communicator& group, size_t bytes, const Signature& sig, bool cma,
                    int chunks) {
  const CallPlan p = group.plan(0, bytes, sig.algorithm, cma, sig.collective, chunks);
  const bool by_host = p.schedule == Algorithm::kHierarchical &&
                       collective_row(sig.collective).by_host == ByHost::kTwoTiers;
  return WirePlan{p.schedule, p.between, p.chunks, p.protocol, by_host && chunks > 0};
}

// What rank 0 answers every process's first rank in the plan check: its own plan, and
// the first process whose plan differs from it (-1: none).
struct PlanVerdict {
  uint64_t plan;
  int64_t differing_process;
  uint64_t differing_plan;
};

// The plan check's exchange, on rank 0: every other process's plan gathered, the
// verdict sent to each; an error where a process's plan differs.
Status gather_plans(Link& link, const std::vector<int>& processes, uint64_t mine,
                    const std::string& where) {
  PlanVerdict verdict{mine, -1, 0};
  std::vector<uint64_t> plans(processes.size(), mine);
  for (size_t i = 1; i < processes.size(); ++i) {
    ACCL_RETURN_IF_ERROR(link.recv(static_cast<int>(i), &plans[i], sizeof(uint64_t)));
    if (plans[i] != mine && verdict.differing_process < 0) {
      verdict.differing_process = processes[i];
      verdict.differing_plan = plans[i];
    }
  }
  for (size_t i = 1; i < processes.size(); ++i) {
    ACCL_RETURN_IF_ERROR(link.post_send(static_cast<int>(i), &verdict, sizeof(verdict)));
  }
  ACCL_RETURN_IF_ERROR(link.wait_sends());
  if (verdict.differing_process < 0) return Status::Ok();
  return error(Code::kMismatch, where, ": ",
               plan_mismatch(processes[0], mine, static_cast<int>(verdict.differing_process),
                             verdict.differing_plan));
}

// The plan check's exchange, on another process's first rank (link rank 1): its plan
// sent to rank 0, the verdict received; an error where any process's plan differs.
Status send_plan(Link& link, int process, int rank0_process, uint64_t mine,
                 const std::string& where) {
  PlanVerdict verdict{};
  ACCL_RETURN_IF_ERROR(link.post_send(0, &mine, sizeof(mine)));
  ACCL_RETURN_IF_ERROR(link.recv(0, &verdict, sizeof(verdict)));
  ACCL_RETURN_IF_ERROR(link.wait_sends());
  if (verdict.plan != mine) {
    return error(Code::kMismatch, where, ": ",
                 plan_mismatch(process, mine, rank0_process, verdict.plan));
  }
  if (verdict.differing_process < 0) return Status::Ok();
  return error(Code::kMismatch, where, ": ",
               plan_mismatch(rank0_process, verdict.plan,
                             static_cast<int>(verdict.differing_process), verdict.differing_plan));
}

// Whether the group's processes plan this call alike, checked at the first call of each
// channel space (a lane's calls all plan alike: one shape, the settings fixed at job
// start). Processes whose plans differ may use disjoint pairs of devices (a flat ring
// against the hierarchy) and never read each other's frames, so one rank per process
// (its first of the group) sends rank 0 its plan, and rank 0 answers every one with its
// own and the first that differs: every process raises where any differs, naming both
// plans. The process's other ranks wait for its first rank's verdict.
Status check_plans_agree(ChannelSpace& space, const GroupLayout& layout,
                         const std::vector<int64_t>& devices, int rank, uint64_t tag,
                         const PlanOnWire& plan, const std::string& where,
                         const Deadline& deadline) {
  if (layout.process_ranks(rank)[0] != rank || space.plans_checked()) {
    const Status verdict = space.plans_agree(where, deadline);
    if (verdict.ok() || verdict.code() == Code::kTimeout) return verdict;
    return error(verdict.code(), where, ": this process's first rank found: ", verdict.message());
  }
  // Rank 0, then every other process's first rank (rank 0's link), or only this one.
  std::vector<int64_t> members;
  std::vector<int> processes;
  for (int r = 0; r < layout.size(); ++r) {
    if (layout.process_ranks(r)[0] == r && (r == 0 || r == rank || rank == 0)) {
      members.push_back(devices[r]);
      processes.push_back(plan.world->process_of(devices[r]));
    }
  }
  const uint64_t mine = encode_wire_plan(plan.plan);
  std::unique_ptr<ChannelLink> link;
  // (The exchange's own frames carry no plan: it compares them itself.)
  Status s = open_link(space, members, rank == 0 ? 0 : 1, Fnv64(tag).mix(0x706c616e).value(),
                       PlanOnWire{WirePlan{}, plan.world}, where, deadline, &link);
  if (s.ok()) {
    s = rank == 0 ? gather_plans(*link, processes, mine, where)
                  : send_plan(*link, processes[1], processes[0], mine, where);
  }
  if (!s.ok() && link) link->fail(s.code());
  space.set_plans_agree(s);
  return s;
}

// Runs `collective` by `algorithm` over channels to `members` (its messages bfloat16
// where `wire_bf16`: a sum sent as bfloat16 over a group that spans hosts; within one
// host its messages stay float32, of rounded values); *sent_by_rail receives the bytes
// sent per rail.
Status run_over_link(ChannelSpace& space, const std::vector<int64_t>& members, int rank,
                     uint64_t tag, const World& world, const std::string& where,
                     const Deadline& deadline, Collective collective, Algorithm algorithm,
                     const std::vector<Buffers>& segments, const Reduction& reduction,
                     const CollectiveArgs& args, bool wire_bf16,
                     std::map<std::string, uint64_t>* sent_by_rail) {
  std::unique_ptr<ChannelLink> link;
  const PlanOnWire wire{WirePlan{algorithm}, &world};
  ACCL_RETURN_IF_ERROR(open_link(space, members, rank, tag, wire, where, deadline, &link));
  std::unique_ptr<WireLink> as_bf16;
  Status s = run_collective(collective, algorithm, *wire_view(link.get(), wire_bf16, &as_bf16),
                            segments, static_cast<int>(members.size()), reduction, args);
  if (!s.ok()) link->fail(s.code());
  *sent_by_rail = link->bytes_sent_by_rail();
  return s;
}

// Runs allreduce_cma over `link` (the group of `communicator`, all on this host); *done
// tells whether it ran. The group's first such call probes whether cross-memory attach
// works; the communicator remembers the answer, and the World keeps the ptrace
// permission (allreduce_cma holds it for the call) once a group found it usable.
Status allreduce_cross_memory(World& world, Link& link, Communicator& communicator,
                              const std::vector<Buffers>& mine, const Reduction& reduction,
                              bool* done) {
  const std::optional<bool> known = communicator.cross_memory_usable();
  *done = false;
  if (known.has_value() && !*known) return Status::Ok();
  bool usable = known.value_or(false);
  // Held past allreduce_cma's own hold until the World keeps one: no lapse in between.
  const CrossMemoryPermission permission;
  ACCL_RETURN_IF_ERROR(allreduce_cma(link, cross_memory(), mine, reduction,
                                     /*probe=*/!known.has_value(), &usable));
  if (!known.has_value()) {
    communicator.set_cross_memory_usable(usable);
    world.cross_memory_probed(usable);
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

std::vector<int64_t> devices_of(const std::vector<int64_t>& devices,
                                const std::vector<int>& ranks) {
  std::vector<int64_t> out;
  for (int r : ranks) out.push_back(devices[r]);
  return out;
}

// A collective's two tiers by host (its row's by_host runner: reduce-scatter, all-gather,
// all-to-all): links to this host's ranks and to this position's rank on every host,
// each tier direct or ring as plan_by_host chooses (runtime/call_plan.h); *sent_by_rail
// as run_over_link's.
Status run_two_tiers_by_host(ChannelSpace& space, const GroupLayout& layout,
                             const std::vector<int64_t>& devices, int rank, uint64_t tag,
                             const World& world, const std::string& where, const Deadline& deadline,
                             Collective collective, const std::vector<Buffers>& segments,
                             const Reduction& reduction, int chunks,
                             std::map<std::string, uint64_t>* sent_by_rail) {
  HostGrid grid;
  for (int h = 0; h < layout.host_count(); ++h) grid.hosts.push_back(layout.host_ranks(h));
  grid.host = layout.host_of(rank);
  const std::vector<int>& mine = grid.hosts[grid.host];
  grid.position = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  std::vector<int> position_peers;
  for (const std::vector<int>& host : grid.hosts) position_peers.push_back(host[grid.position]);

  const std::vector<BlockBuffers> blocks = blocks_of(collective, segments, layout.size());
  size_t bytes = 0;
  for (const BlockBuffers& b : blocks) bytes += b.block_bytes();
  const auto [in_host, between, pipeline] = plan_by_host(layout, bytes, chunks);
  // The pipeline on the wire: its chunks, and whether they are forced or cut by size.
  WirePlan plan{Algorithm::kHierarchical, Algorithm::kAuto, pipeline.chunks, Protocol::kWhole,
                pipeline.min_chunk_bytes == 0};
  std::unique_ptr<ChannelLink> host_link, between_link;
  Status s = open_link(space, devices_of(devices, mine), grid.position, Fnv64(tag).mix(1).value(),
                       PlanOnWire{plan, &world}, where, deadline, &host_link);
  if (s.ok()) {
    plan.between = between;
    s = open_link(space, devices_of(devices, position_peers), grid.host, Fnv64(tag).mix(2).value(),
                  PlanOnWire{plan, &world}, where, deadline, &between_link);
  }
  if (s.ok()) {
    // A local failure (a step's error, an exception) fails both links at once, after
    // the second stage has stopped: the peers learn it then, not at their deadline.
    s = fail_links_on_error({host_link.get(), between_link.get()}, where, [&] {
      return collective_row(collective)
          .by_host_runner(*host_link, *between_link, grid, in_host, between, blocks, reduction,
                          pipeline, deadline);
    });
  } else {
    for (ChannelLink* link : {host_link.get(), between_link.get()}) {
      if (link != nullptr) link->fail(s.code());
    }
  }
  for (ChannelLink* link : {host_link.get(), between_link.get()}) {
    if (link == nullptr) continue;
    for (const auto& [rail, sent] : link->bytes_sent_by_rail()) (*sent_by_rail)[rail] += sent;
  }
  return s;
}

// One rank's call across processes, step by step: begin (the call's index and channel
// space, its turn in the lane), plan (rank 0's plan checked by every process at the
// first call of a space), then one schedule (cross-memory attach on one host, by host,
// flat over one link, or the hierarchy), then finish (stats, or the failure protocol).
// The error protocols are this object's: its destructor ends the call's turn on every
// path, and a call that unwinds without finishing (an exception mid-call, which may
// leave a partial frame on a live channel) poisons the space's channels, tells the
// siblings waiting in the process's rendezvous, and marks the call failed, so that the
// peers fail at once and the next call recovers on fresh channels.
class ProcessesCall {
 public:
  ProcessesCall(const CallSpec& spec, std::shared_ptr<World> world,
                std::shared_ptr<Communicator> group, const Reduction& reduction,
                const Deadline& deadline)
      : spec_(spec),
        sig_(spec.signature),
        devices_(spec.devices),
        world_(std::move(world)),
        group_(std::move(group)),
        layout_(group_->layout()),
        reduction_(reduction),
        deadline_(deadline),
        start_(spec.start()),
        bytes_(sig_.count * wire_elem_size(sig_)),
        where_(str_cat(spec.label, ", rank ", spec.rank, " (device ", spec.device, ", process ",
                       world_->process_index(), ")")) {}
  ProcessesCall(const ProcessesCall&) = delete;
  ProcessesCall& operator=(const ProcessesCall&) = delete;
  ~ProcessesCall();

  Status run(const std::vector<const void*>& in, const std::vector<void*>& out,
             const std::vector<uint64_t>& counts);

 private:
  Status begin();
  void plan(bool cma);
  Status check_plans();
  Status run_cross_memory(bool* done);
  Status run_by_host();
  Status run_flat();
  Status run_hierarchical();
  Status finish(const Status& s);
  Status aborted_because(const Status& s) const;
  Status after_a_stall(const Status& s) const;
  std::string own_words(const Status& s) const;
  // A link over this call's channels to `ranks` of the group (this rank `index` there).
  Status open(const std::vector<int>& ranks, int index, const WirePlan& wire,
              std::unique_ptr<ChannelLink>* link);

  const CallSpec& spec_;
  const Signature& sig_;
  const std::vector<int64_t>& devices_;
  const std::shared_ptr<World> world_;  // held to the end of the call
  const std::shared_ptr<Communicator> group_;
  const GroupLayout& layout_;
  const Reduction& reduction_;
  const Deadline deadline_;
  const Clock::time_point start_;
  const size_t bytes_;
  const std::string where_;
  std::vector<Buffers> segments_;
  std::shared_ptr<ChannelSpace> space_;  // the group's channels at this call's epoch
  uint64_t index_ = 0;                   // the call's index in its lane
  bool turn_taken_ = false;              // begin_call ran: end_turn is due
  bool running_ = false;                 // past wait_turn: the unwinding protocol is due
  bool finished_ = false;
  CallPlan plan_;
  uint64_t tag_ = 0;  // the frames' tag: the call and its schedule
  // This rank's thread position and the process's ranks meeting it in the rendezvous
  // (a hierarchical schedule, until run_hierarchy takes over telling them).
  int thread_ = 0, siblings_ = 0;
};

ProcessesCall::~ProcessesCall() {
  if (running_ && !finished_) {
    space_->poison_all(Code::kInternal);
    if (siblings_ > 1) {
      try {  // (allocates: nothing may escape a destructor)
        spec_.group->meeting().leave(
            spec_.key, thread_, siblings_, spec_.label,
            error(Code::kInternal, spec_.label, ": an exception ended the call"));
      } catch (...) {
      }
    }
    group_->call_failed(index_, *space_);
  }
  if (turn_taken_) group_->end_turn(spec_.device, index_);
}

Status ProcessesCall::run(const std::vector<const void*>& in, const std::vector<void*>& out,
                          const std::vector<uint64_t>& counts) {
  if (Status s = begin(); !s.ok()) return deadline_.aborted() ? s : after_a_stall(s);
  plan(world_->cross_memory_attach());
  if (Status s = check_plans(); !s.ok()) return finish(s);
  for (size_t i = 0; i < counts.size(); ++i) {
    segments_.push_back(
        Buffers{in[i], out[i], counts[i], reduction_.elem_size, static_cast<int>(i)});
  }
  if (plan_.schedule == Algorithm::kReduceBroadcast) {
    bool done = false;
    Status s = run_cross_memory(&done);
    if (!s.ok() || done) return finish(s);
    world_->cross_memory_fell_back();
    plan(/*cma=*/false);  // refused (every rank learnt it alike): the next best schedule
  }
  if (plan_.schedule != Algorithm::kHierarchical) return finish(run_flat());
  if (collective_row(sig_.collective).by_host == ByHost::kTwoTiers) return finish(run_by_host());
  return finish(run_hierarchical());
}

// The call's index and channel space (recovering first after a failed call), then its
// turn: a lane's calls of one device run in order.
Status ProcessesCall::begin() {
  Status begun = group_->begin_call(spec_.device, where_, deadline_, &index_, &space_);
  turn_taken_ = true;
  ACCL_RETURN_IF_ERROR(begun);
  ACCL_RETURN_IF_ERROR(group_->wait_turn(spec_.device, index_, where_, deadline_));
  running_ = true;
  return Status::Ok();
}

// The schedule and its tag: the choice is on the wire, so a process whose model chose
// otherwise (another calibration) fails with a tag mismatch naming both.
void ProcessesCall::plan(bool cma) {
  plan_ =
      group_->plan(spec_.rank, bytes_, sig_.algorithm, cma, sig_.collective, spec_.pipeline_chunks);
  tag_ = schedule_tag(call_tag(sig_, spec_.size, index_), plan_.schedule);
  // A hierarchical all-reduce meets this process's other devices in the rendezvous (a
  // reduce-scatter or all-gather by host meets none there).
  if (plan_.schedule == Algorithm::kHierarchical &&
      collective_row(sig_.collective).by_host == ByHost::kHierarchy) {
    thread_ = layout_.device_position(spec_.rank);
    siblings_ = static_cast<int>(layout_.process_ranks(spec_.rank).size());
  }
}

Status ProcessesCall::check_plans() {
  // The check's tag leaves the algorithm out: the plans it compares name it.
  Signature unplanned = sig_;
  unplanned.algorithm = Algorithm::kAuto;
  const PlanOnWire agreed{
      group_plan(*group_, bytes_, sig_, world_->cross_memory_attach(), spec_.pipeline_chunks),
      world_.get()};
  return check_plans_agree(*space_, layout_, devices_, spec_.rank,
                           call_tag(unplanned, spec_.size, index_), agreed, where_, deadline_);
}

Status ProcessesCall::open(const std::vector<int>& ranks, int index, const WirePlan& wire,
                           std::unique_ptr<ChannelLink>* link) {
  return open_link(*space_, devices_of(devices_, ranks), index, tag_,
                   PlanOnWire{wire, world_.get()}, where_, deadline_, link);
}

Status ProcessesCall::run_cross_memory(bool* done) {
  std::unique_ptr<ChannelLink> link;
  Status s =
      open_link(*space_, devices_, spec_.rank, tag_,
                PlanOnWire{WirePlan{plan_.schedule}, world_.get()}, where_, deadline_, &link);
  if (s.ok()) s = allreduce_cross_memory(*world_, *link, *group_, segments_, reduction_, done);
  if (!s.ok() && link) link->fail(s.code());
  if (s.ok() && *done) trace_phase("one-host reduce-broadcast cma", spec_, start_, bytes_);
  return s;
}

Status ProcessesCall::run_by_host() {
  std::map<std::string, uint64_t> sent;
  Status s = run_two_tiers_by_host(*space_, layout_, devices_, spec_.rank, tag_, *world_, where_,
                                   deadline_, sig_.collective, segments_, reduction_,
                                   spec_.pipeline_chunks, &sent);
  trace_rails(str_cat(collective_name(sig_.collective), " by host").c_str(), sent, spec_.device,
              start_, Clock::now(), spec_.label);
  return s;
}

Status ProcessesCall::run_flat() {
  std::map<std::string, uint64_t> sent;
  Status s = run_over_link(*space_, devices_, spec_.rank, tag_, *world_, where_, deadline_,
                           sig_.collective, plan_.schedule, segments_, reduction_, spec_.args,
                           sig_.wire_bf16 && layout_.host_count() > 1, &sent);
  trace_rails(
      str_cat(collective_row(sig_.collective).flat_phase, " ", algorithm_name(plan_.schedule))
          .c_str(),
      sent, spec_.device, start_, Clock::now(), spec_.label);
  return s;
}

// The threads of this process, the processes of this host, then (if this rank owns a
// slice at both) its peers of the same position on the other hosts.
Status ProcessesCall::run_hierarchical() {
  const HierarchyCall hierarchy{&layout_,    spec_.rank,  spec_.key, &spec_.group->meeting(),
                                sig_,        spec_.label, deadline_, plan_.between,
                                plan_.chunks};
  ConnectGroup connect = [&](const std::vector<int>& ranks, int index,
                             std::unique_ptr<ChannelLink>* link) {
    // Every link carries the pipeline's chunks; the one between hosts also the
    // algorithm there (and whether it streams), which the host's tier does not know.
    WirePlan wire{Algorithm::kHierarchical, Algorithm::kAuto, plan_.chunks};
    if (layout_.host_of(ranks.front()) != layout_.host_of(ranks.back())) {
      wire.between = plan_.between;
      wire.protocol = plan_.protocol;
    }
    return open(ranks, index, wire, link);
  };
  HierarchyResult result;
  siblings_ = 0;  // from here on run_hierarchy tells them
  ACCL_RETURN_IF_ERROR(run_hierarchy(hierarchy, segments_, reduction_, connect, &result));
  record_hierarchy_phases(result, plan_.between, spec_);
  return Status::Ok();
}

Status ProcessesCall::finish(const Status& s) {
  finished_ = true;
  if (s.ok()) {
    note_call_across_processes_succeeded(deadline_.generation);
    record_call(plan_.schedule, spec_, start_, Clock::now(), bytes_);
    return s;
  }
  record_error(plan_.schedule, sig_.collective);
  group_->call_failed(index_, *space_);
  // Every channel of the call, links opened or not: the peers fail at once, whichever
  // peer they wait for (a peer's failure reaches this process's other ranks too). The
  // next call recovers first, on fresh channels.
  space_->poison_all(s.code());
  // This process ended its pending waits (abort(), a stop, XLA:CPU's stall): its calls
  // say why, whatever each met first (a sibling's poisoned channel, say).
  if (deadline_.aborted()) return aborted_because(s);
  return after_a_stall(s);
}

// A call that fails after this process reported XLA:CPU's stall (stall.h), having begun
// after the stall ended the pending calls: the stall's report, the call's own error (and
// its code) beside.
Status ProcessesCall::after_a_stall(const Status& s) const {
  const std::string why = stall_report(deadline_.generation);
  if (why.empty() || s.message().find(why) != std::string::npos) return s;
  return Status(s.code(), str_cat(where_, ": earlier in this process, ", why,
                                  " The call's own error: ", own_words(s)));
}

// The call's error `s` without this call's name in front (said once, by its caller).
std::string ProcessesCall::own_words(const Status& s) const { return message_without(s, where_); }

// A call that was pending when this process aborted its waits: the abort's words, with
// the call's own error beside them where that is another.
Status ProcessesCall::aborted_because(const Status& s) const {
  if (s.message().find(deadline_.abort_words()) != std::string::npos) return s;
  const Status why = deadline_.ended(where_, "in the call");
  return Status(Code::kAborted, str_cat(why.message(), "; the call's own error: ", own_words(s)));
}

}  // namespace

Status run_across_processes(CallSpec spec, const std::vector<const void*>& in,
                            const std::vector<void*>& out, const std::vector<uint64_t>& counts) {
  // The deadline first: a World::stop() that takes the World after this call got it
  // ends this deadline too (its abort comes later), so stop never waits for it in vain.
  const Deadline deadline = Deadline::after_seconds(spec.timeout_s);
  std::shared_ptr<World> world = World::get();
  if (world == nullptr || !world->ready()) {
    return error(Code::kInvalidArgument, spec.label,
                 ": the group spans processes but jax_accl's process table is not set up "
                 "(jax_accl bootstraps it when a multi-process program is lowered after "
                 "jax.distributed.initialize()), or jax_accl has stopped "
                 "(jax.distributed.shutdown() or exit)");
  }
  std::shared_ptr<Communicator> group;
  if (spec.group == nullptr) {
    return error(Code::kInternal, spec.label, ": the call has no group to run on");
  }
  ACCL_RETURN_IF_ERROR(
      spec.group->communicator(*world, spec.devices, spec.lane, spec.label, &group));
  if (group->layout().process_count() == 1) {  // one process's devices: its flat schedule
    const Algorithm flat = plan_in_process_call(spec, counts, /*one_shot=*/false).schedule;
    return run_in_process(spec, in, out, counts, flat);
  }
  describe_layout(counts, &spec.signature);
  Reduction reduction;
  ACCL_RETURN_IF_ERROR(reduction_for(spec, &reduction));
  ProcessesCall call(spec, std::move(world), std::move(group), reduction, deadline);
  return call.run(in, out, counts);
}

}  // namespace accl
