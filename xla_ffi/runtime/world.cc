#include "runtime/world.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "runtime/stats.h"
#include "transport/cma.h"
#include "transport/ring_channel.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace accl {
namespace {

std::mutex& world_mutex() {
  static std::mutex m;
  return m;
}
std::unique_ptr<World>& world_slot() {
  static std::unique_ptr<World> w;
  return w;
}
constexpr double kHandshakeSeconds = 5.0;

}  // namespace

std::vector<std::pair<int, int>> match_rails(const std::vector<Rail>& lower,
                                             const std::vector<Rail>& higher) {
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < lower.size(); ++i) {
    for (size_t j = 0; j < higher.size(); ++j) {
      if (lower[i].name == higher[j].name) pairs.emplace_back(i, j);
    }
  }
  if (pairs.empty()) {
    for (size_t i = 0; i < std::min(lower.size(), higher.size()); ++i) pairs.emplace_back(i, i);
  }
  return pairs;
}

Status World::start(int process_index, int process_count, const std::string& secret,
                    const std::string& host, std::vector<Rail>* rails, int stripes_per_rail) {
  std::lock_guard<std::mutex> lock(world_mutex());
  if (world_slot() != nullptr) return error(Code::kInvalidArgument, "jax_accl world already started");
  if (secret.size() != kSecretBytes) return error(Code::kInvalidArgument, "secret must be 32 bytes");
  std::unique_ptr<World> w(new World());
  static uint64_t started = 0;
  w->generation_ = ++started;
  w->process_index_ = process_index;
  w->process_count_ = process_count;
  w->secret_ = secret;
  w->host_ = host;
  w->stripes_per_rail_ = std::max(1, stripes_per_rail);
  // JAX_ACCL_CMA=0 keeps large transfers between processes of a host on the
  // shared-memory rings instead of cross-memory attach.
  const char* cma = std::getenv("JAX_ACCL_CMA");
  w->cross_memory_attach_ = cma == nullptr || std::strcmp(cma, "0") != 0;
  if (w->cross_memory_attach_) allow_cross_memory_attach();
  for (Rail& rail : *rails) {
    int fd;
    ACCL_RETURN_IF_ERROR(tcp_listen(rail.ip, &fd, &rail.port));
    w->listeners_.push_back(fd);
  }
  w->rails_ = *rails;
  if (pipe(w->wake_pipe_) != 0) return error(Code::kInternal, "pipe: ", std::strerror(errno));
  World* raw = w.get();
  w->acceptor_ = std::thread([raw] { raw->accept_loop(); });
  world_slot() = std::move(w);
  return Status::Ok();
}

World* World::get() { return world_slot().get(); }

void World::stop() {
  std::unique_ptr<World> w;
  {
    std::lock_guard<std::mutex> lock(world_mutex());
    w = std::move(world_slot());
  }
  shm_cleanup();
}

World::~World() {
  if (wake_pipe_[1] >= 0) {
    char c = 'q';
    ssize_t ignored = write(wake_pipe_[1], &c, 1);
    (void)ignored;
  }
  if (acceptor_.joinable()) acceptor_.join();
  for (int fd : listeners_) close(fd);
  for (int fd : wake_pipe_) {
    if (fd >= 0) close(fd);
  }
  while (handshakes_in_flight_.load() > 0) usleep(1000);
  for (auto& [key, value] : accepted_) close(value.first);
}

Status World::set_processes(std::vector<ProcessEntry> processes) {
  if (static_cast<int>(processes.size()) != process_count_) {
    return error(Code::kInvalidArgument, "expected ", process_count_, " processes, got ",
                 processes.size());
  }
  processes_ = std::move(processes);
  for (const ProcessEntry& p : processes_) {
    for (int64_t d : p.devices) device_process_[d] = p.index;
  }
  ready_ = true;
  return Status::Ok();
}

int World::process_of(int64_t device) const {
  auto it = device_process_.find(device);
  return it == device_process_.end() ? -1 : it->second;
}

void World::accept_loop() {
  std::vector<pollfd> fds;
  for (int fd : listeners_) fds.push_back(pollfd{fd, POLLIN, 0});
  fds.push_back(pollfd{wake_pipe_[0], POLLIN, 0});
  for (;;) {
    for (auto& p : fds) p.revents = 0;
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds.back().revents != 0) return;
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      int fd = accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      // Each handshake is read on its own thread, so a silent stranger cannot stall
      // the acceptor.
      handshakes_in_flight_.fetch_add(1);
      std::thread([this, fd] {
        handle_connection(fd);
        handshakes_in_flight_.fetch_sub(1);
      }).detach();
    }
  }
}

void World::handle_connection(int fd) {
  const Deadline deadline = Deadline::after_seconds(kHandshakeSeconds);
  Handshake h;
  Status s = read_all(fd, &h, sizeof(h), deadline);
  if (s.ok()) s = check_handshake(h, secret_);
  if (s.ok() && process_of(h.dst_device) != process_index_) {
    s = error(Code::kAborted, "device ", h.dst_device, " does not live here");
  }
  if (s.ok()) s = write_all(fd, &kHandshakeAccepted, 1, deadline);
  if (!s.ok()) {
    refused_.fetch_add(1);
    close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  accepted_[{h.src_device, h.dst_device, static_cast<int>(h.rail), static_cast<int>(h.stripe)}] =
      {fd, h.weight};
  accepted_cv_.notify_all();
}

Status World::connect_tcp(int64_t me, int64_t peer, const Deadline& deadline,
                          std::vector<std::unique_ptr<Channel>>* out) {
  const ProcessEntry& mine = processes_[process_index_];
  const ProcessEntry& theirs = processes_[process_of(peer)];
  const bool lower = me < peer;
  const auto pairs = lower ? match_rails(mine.rails, theirs.rails)
                           : match_rails(theirs.rails, mine.rails);
  if (pairs.empty()) {
    return error(Code::kInvalidArgument, "process ", process_index_, " and process ", theirs.index,
                 " (host ", theirs.host, ") share no rail");
  }
  for (size_t k = 0; k < pairs.size(); ++k) {
    const Rail& local = mine.rails[lower ? pairs[k].first : pairs[k].second];
    const Rail& remote = theirs.rails[lower ? pairs[k].second : pairs[k].first];
    TrafficStats* traffic = &traffic_stats("tcp:" + local.name);
    for (int stripe = 0; stripe < stripes_per_rail_; ++stripe) {
      const std::string label =
          str_cat("tcp rail ", local.name, " to ", remote.ip, ":", remote.port, ", process ",
                  theirs.index, " on host ", theirs.host, ", device ", peer);
      int fd = -1;
      double weight = local.weight;
      if (lower) {
        ACCL_RETURN_IF_ERROR(tcp_connect(local.ip, remote.ip, remote.port, deadline, &fd));
        Handshake h;
        std::memcpy(h.secret, secret_.data(), kSecretBytes);
        h.src_device = me;
        h.dst_device = peer;
        h.rail = static_cast<uint32_t>(k);
        h.stripe = static_cast<uint32_t>(stripe);
        h.weight = weight;
        char ack = 0;
        Status s = write_all(fd, &h, sizeof(h), deadline);
        if (s.ok()) s = read_all(fd, &ack, 1, deadline);
        if (s.ok() && ack != kHandshakeAccepted) s = error(Code::kAborted, "handshake refused");
        if (!s.ok()) {
          close(fd);
          return error(s.code(), label, ": ", s.message());
        }
      } else {
        std::unique_lock<std::mutex> lock(mutex_);
        const auto key = std::make_tuple(peer, me, static_cast<int>(k), stripe);
        if (!accepted_cv_.wait_until(lock, deadline.at,
                                     [&] { return accepted_.count(key) > 0; })) {
          return error(Code::kTimeout, label, ": the peer never connected");
        }
        fd = accepted_[key].first;
        weight = accepted_[key].second;
        accepted_.erase(key);
      }
      auto channel = std::make_unique<TcpChannel>(fd, label, weight);
      channel->traffic = traffic;
      channel->rail = local.name;
      out->push_back(std::move(channel));
    }
  }
  return Status::Ok();
}

Status World::channels(int64_t me, int64_t peer, const Deadline& deadline,
                       std::vector<Channel*>* out) {
  out->clear();
  const int peer_process = process_of(peer);
  if (!ready_ || process_of(me) != process_index_ || peer_process < 0) {
    return error(Code::kInvalidArgument, "device ", peer, " or ", me,
                 " is unknown to jax_accl's process table");
  }
  const auto key = std::make_pair(me, peer);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = channels_.find(key);
    if (it == channels_.end() && peer_process == process_index_) {
      // Two device threads of this process: one heap ring pair, both ends made here.
      std::unique_ptr<Channel> a, b;
      make_memory_channels(&a, &b);
      a->traffic = b->traffic = &traffic_stats("memory");
      channels_[key].push_back(std::move(a));
      channels_[{peer, me}].push_back(std::move(b));
      it = channels_.find(key);
    }
    if (it != channels_.end()) {
      for (auto& c : it->second) out->push_back(c.get());
      return Status::Ok();
    }
  }
  std::vector<std::unique_ptr<Channel>> made;
  if (processes_[peer_process].host == host_) {
    const std::string name = str_cat("/jax_accl_", secret_.substr(0, 16), "_",
                                     std::min(me, peer), "_", std::max(me, peer));
    std::unique_ptr<Channel> c;
    ACCL_RETURN_IF_ERROR(open_shm_channel(
        name, me < peer ? 0 : 1,
        str_cat("shm to process ", peer_process, ", device ", peer), &c));
    c->traffic = &traffic_stats("shm");
    c->rail = "shm";
    made.push_back(std::move(c));
  } else {
    ACCL_RETURN_IF_ERROR(connect_tcp(me, peer, deadline, &made));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = channels_[key];
  slot = std::move(made);
  for (auto& c : slot) out->push_back(c.get());
  return Status::Ok();
}

}  // namespace accl
