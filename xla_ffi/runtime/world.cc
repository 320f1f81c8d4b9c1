#include "runtime/world.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/communicator.h"
#include "runtime/stall.h"
#include "runtime/stats.h"
#include "transport/cma.h"
#include "transport/handshake.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace accl {
namespace {

std::mutex& world_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<World>& world_slot() {
  static auto* w = new std::shared_ptr<World>;  // never destroyed: calls may outlive exit
  return *w;
}

std::mutex g_job_mutex;
std::optional<World::Job> g_job;

}  // namespace

void World::announce_job(const Job& job) {
  std::lock_guard<std::mutex> lock(g_job_mutex);
  g_job = job;
}

bool World::announced_job(Job* job) {
  std::lock_guard<std::mutex> lock(g_job_mutex);
  if (!g_job.has_value()) return false;
  *job = *g_job;
  return true;
}

Status World::start(int process_index, int process_count, const std::string& secret,
                    const std::string& host, std::vector<Rail>* rails, int stripes_per_rail,
                    bool cross_memory_attach) {
  std::lock_guard<std::mutex> lock(world_mutex());
  if (world_slot() != nullptr)
    return error(Code::kInvalidArgument, "jax_accl world already started");
  if (secret.size() != kSecretBytes)
    return error(Code::kInvalidArgument, "secret must be 32 bytes");
  for (const Rail& r : *rails) {
    if (!valid_rail_weight(r.weight)) {
      return error(Code::kInvalidArgument, "rail ", r.name, ": weight ", r.weight,
                   " is not a positive finite number (at most 1e6)");
    }
  }
  std::shared_ptr<World> w(new World());
  w->process_index_ = process_index;
  w->process_count_ = process_count;
  w->host_ = host;
  w->cross_memory_attach_ = cross_memory_attach;
  World* raw = w.get();
  std::unique_ptr<TcpTransport> tcp;
  ACCL_RETURN_IF_ERROR(TcpTransport::start(
      secret, rails, stripes_per_rail,
      [raw](int64_t device) {
        // A peer with its table may connect before this process has its own.
        if (!raw->ready()) return Destination::kNotKnownYet;
        return raw->process_of(device) == raw->process_index_ ? Destination::kHere
                                                              : Destination::kElsewhere;
      },
      &tcp));
  w->tcp_ = tcp.get();
  // In order: the first that can connect a pair makes its channels.
  w->transports_.push_back(memory_transport());
  w->transports_.push_back(shm_transport(secret));
  w->transports_.push_back(std::move(tcp));
  world_slot() = std::move(w);
  return Status::Ok();
}

std::shared_ptr<World> World::get() {
  std::lock_guard<std::mutex> lock(world_mutex());
  return world_slot();
}

bool World::stop(double wait_s, bool leaving) {
  std::shared_ptr<World> w;
  {
    std::lock_guard<std::mutex> lock(world_mutex());
    w = std::move(world_slot());
  }
  bool stopped = true;
  if (w != nullptr) {
    g_leaving.store(leaving, std::memory_order_release);
    g_stopping.store(true, std::memory_order_release);
    abort_pending_waits();
    forget_stall_report();  // the next World's calls are not out of step
    const Deadline deadline = Deadline::unabortable_after(wait_s);
    while (w.use_count() > 1 && !deadline.expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (w.use_count() > 1) {
      // Left to the calls that still hold it: the last of them destroys it. Its
      // segments and the ptrace permission stay until then (or exit).
      stopped = false;
    }
    std::atomic_thread_fence(std::memory_order_acquire);  // the calls' last accesses first
    w.reset();  // (if stopped) the transports stop accepting; channels close
    g_stopping.store(false, std::memory_order_release);
    g_leaving.store(false, std::memory_order_release);
  }
  // (The ptrace permission went with the World, if it was its last holder.)
  if (stopped) shm_cleanup();
  return stopped;
}

World::~World() = default;

Status World::set_processes(std::vector<ProcessEntry> processes) {
  if (ready()) return error(Code::kInvalidArgument, "the process table is set already");
  if (static_cast<int>(processes.size()) != process_count_) {
    return error(Code::kInvalidArgument, "expected ", process_count_, " processes, got ",
                 processes.size());
  }
  processes_ = std::move(processes);
  std::vector<std::string> peers;
  for (const ProcessEntry& p : processes_) {
    for (int64_t d : p.devices) device_process_[d] = p.index;
    for (const Rail& r : p.rails) peers.push_back(r.ip);
  }
  if (tcp_ != nullptr) tcp_->set_known_peers(peers);
  ready_.store(true, std::memory_order_release);
  return Status::Ok();
}

int World::process_of(int64_t device) const {
  auto it = device_process_.find(device);
  return it == device_process_.end() ? -1 : it->second;
}

uint64_t World::recoveries() {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t n = 0;
  for (const auto& [group_and_lane, c] : communicators_) n += c->recoveries();
  return n;
}

void World::cross_memory_probed(bool usable) {
  // Taken while the probing call still holds its own (allreduce_cross_memory): the
  // permission never lapses.
  if (usable) {
    std::call_once(cross_memory_kept_once_,
                   [this] { cross_memory_kept_ = std::make_unique<CrossMemoryPermission>(); });
  }
}

uint64_t World::refused_connections() const { return tcp_ != nullptr ? tcp_->refused() : 0; }

void World::forget(uint64_t space) {
  for (const auto& t : transports_) t->forget(space);
}

Status World::connect(int64_t me, int64_t peer, uint64_t space, const Deadline& deadline,
                      std::vector<std::unique_ptr<Channel>>* out,
                      std::vector<std::unique_ptr<Channel>>* reverse) {
  const int peer_process = process_of(peer);
  if (!ready() || process_of(me) != process_index_ || peer_process < 0) {
    return error(Code::kInvalidArgument, "device ", peer, " or ", me,
                 " is unknown to jax_accl's process table");
  }
  const DevicePair pair{me, &processes_[process_index_], peer, &processes_[peer_process], space};
  Transport* transport = nullptr;
  for (const auto& t : transports_) {
    if (t->can_connect(pair)) {
      transport = t.get();
      break;
    }
  }
  if (transport == nullptr) {
    return error(Code::kInvalidArgument, "no transport connects device ", me, " to device ", peer);
  }
  ACCL_RETURN_IF_ERROR(transport->connect(pair, deadline, out, reverse));
  for (auto* list : {out, reverse}) {
    for (auto& c : *list) {
      const bool network = c->rail != "memory" && c->rail != "shm";
      c->traffic = &traffic_stats(network ? "tcp:" + c->rail : c->rail);
    }
  }
  return Status::Ok();
}

Status World::communicator(const std::vector<int64_t>& devices, uint64_t lane,
                           const std::string& label, std::shared_ptr<Communicator>* out) {
  // Made under the lock: a second communicator made for the same group and lane by
  // another thread at the same time would drop its epoch-0 space, whose id is the
  // winner's, and the transports would forget the winner's connections and segments.
  lookups_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = communicators_.find({devices, lane});
  if (it != communicators_.end()) {
    *out = it->second;
    return Status::Ok();
  }
  std::vector<RankPlace> places;
  for (int64_t device : devices) {
    const int p = process_of(device);
    if (p < 0)
      return error(Code::kInvalidArgument, label, ": device ", device, " belongs to no process");
    places.push_back(RankPlace{p, processes_[p].host});
  }
  const int rails = static_cast<int>(processes_[process_index_].rails.size());
  std::shared_ptr<Communicator> made;
  Status s = Communicator::make(this, process_index_, devices, lane, places, rails, &made);
  if (!s.ok()) return error(s.code(), label, ": ", s.message());
  auto aligned = aligned_before_made_.find(channel_space_id(devices, lane, 0));
  if (aligned != aligned_before_made_.end()) {
    made->align(aligned->second.first, aligned->second.second);
    aligned_before_made_.erase(aligned);
  }
  *out = communicators_.emplace(std::make_pair(devices, lane), std::move(made)).first->second;
  return Status::Ok();
}

std::vector<World::LanePosition> World::lane_positions() {
  // The communicators copied under the lock, asked without it: a call recovering holds its
  // communicator's lock for as long as the epoch agreement takes.
  std::vector<std::pair<uint64_t, std::shared_ptr<Communicator>>> lanes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [group_and_lane, c] : communicators_) {
      lanes.emplace_back(channel_space_id(group_and_lane.first, group_and_lane.second, 0), c);
    }
  }
  std::vector<LanePosition> out;
  for (const auto& [id, c] : lanes) out.push_back(LanePosition{id, c->processes(), c->position()});
  return out;
}

void World::align_lane(uint64_t id, uint64_t next_call, uint64_t failed_call) {
  std::shared_ptr<Communicator> lane;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [group_and_lane, c] : communicators_) {
      if (channel_space_id(group_and_lane.first, group_and_lane.second, 0) == id) lane = c;
    }
    if (!lane) {
      aligned_before_made_[id] = {next_call, failed_call};
      return;
    }
  }
  lane->align(next_call, failed_call);
}

}  // namespace accl
