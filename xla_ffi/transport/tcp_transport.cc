#include "transport/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <tuple>

#include "transport/handshake.h"
#include "transport/tcp.h"

namespace accl {
namespace {
constexpr double kHandshakeSeconds = 5.0;
// Handshakes being read at once; a connection beyond them is closed unread (and
// counted as refused), so a flood of strangers cannot exhaust threads or memory.
constexpr int kMaxPendingHandshakes = 64;
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

Status TcpTransport::start(std::string secret, std::vector<Rail>* rails, int stripes_per_rail,
                           std::function<bool(int64_t)> lives_here,
                           std::unique_ptr<TcpTransport>* out) {
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  t->secret_ = std::move(secret);
  t->stripes_per_rail_ = std::max(1, stripes_per_rail);
  t->lives_here_ = std::move(lives_here);
  for (Rail& rail : *rails) {
    int fd;
    ACCL_RETURN_IF_ERROR(tcp_listen(rail.ip, &fd, &rail.port));
    t->listeners_.push_back(fd);
  }
  if (pipe(t->wake_pipe_) != 0) return error(Code::kInternal, "pipe: ", std::strerror(errno));
  TcpTransport* raw = t.get();
  t->acceptor_ = std::thread([raw] { raw->accept_loop(); });
  *out = std::move(t);
  return Status::Ok();
}

TcpTransport::~TcpTransport() {
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

void TcpTransport::accept_loop() {
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
      if (fd < 0) {
        // Out of descriptors: the connection stays queued; back off instead of spinning.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          usleep(50000);
        }
        continue;
      }
      if (handshakes_in_flight_.load() >= kMaxPendingHandshakes) {
        refused_.fetch_add(1);
        close(fd);
        continue;
      }
      // Each handshake is read on its own thread (with a 5 s deadline), so a silent
      // stranger cannot stall the acceptor.
      handshakes_in_flight_.fetch_add(1);
      try {
        std::thread([this, fd] {
          try {
            handle_connection(fd);
          } catch (...) {  // nothing may escape a thread: count it, drop the connection
            refused_.fetch_add(1);
            close(fd);
          }
          handshakes_in_flight_.fetch_sub(1);
        }).detach();
      } catch (const std::system_error&) {  // no thread to be had: refuse, do not terminate
        handshakes_in_flight_.fetch_sub(1);
        refused_.fetch_add(1);
        close(fd);
      }
    }
  }
}

void TcpTransport::handle_connection(int fd) {
  const Deadline deadline = Deadline::unabortable_after(kHandshakeSeconds);
  Hello h;
  Status s = handshake_as_acceptor(fd, secret_, &h, deadline);
  if (s.ok() && !lives_here_(h.dst_device)) {
    s = error(Code::kAborted, "device ", h.dst_device, " does not live here");
  }
  const Key key{h.space, h.src_device, h.dst_device, static_cast<int>(h.rail),
                static_cast<int>(h.stripe)};
  std::unique_lock<std::mutex> lock(mutex_);
  // A second connection for a key not yet claimed is refused: the first one stays.
  if (s.ok() && accepted_.count(key) > 0) s = error(Code::kAborted, "duplicate connection");
  // Under the lock, so that the check and the entry are one step; one byte into the
  // empty send buffer of a fresh connection never waits.
  if (s.ok()) s = write_all(fd, &kHandshakeAccepted, 1, deadline);
  if (!s.ok()) {
    refused_.fetch_add(1);
    close(fd);
    return;
  }
  accepted_[key] = {fd, h.weight};
  accepted_cv_.notify_all();
}

Status TcpTransport::connect(const DevicePair& pair, const Deadline& deadline,
                             std::vector<std::unique_ptr<Channel>>* out,
                             std::vector<std::unique_ptr<Channel>>*) {
  const int64_t me = pair.me, peer = pair.peer;
  const ProcessEntry& mine = *pair.mine;
  const ProcessEntry& theirs = *pair.theirs;
  const bool lower = me < peer;
  const auto pairs =
      lower ? match_rails(mine.rails, theirs.rails) : match_rails(theirs.rails, mine.rails);
  if (pairs.empty()) {
    return error(Code::kInvalidArgument, "process ", mine.index, " and process ", theirs.index,
                 " (host ", theirs.host, ") share no rail");
  }
  for (size_t k = 0; k < pairs.size(); ++k) {
    const Rail& local = mine.rails[lower ? pairs[k].first : pairs[k].second];
    const Rail& remote = theirs.rails[lower ? pairs[k].second : pairs[k].first];
    for (int stripe = 0; stripe < stripes_per_rail_; ++stripe) {
      const std::string label =
          str_cat("tcp rail ", local.name, " to ", remote.ip, ":", remote.port, ", process ",
                  theirs.index, " on host ", theirs.host, ", device ", peer);
      int fd = -1;
      double weight = local.weight;
      if (lower) {
        ACCL_RETURN_IF_ERROR(tcp_connect(local.ip, remote.ip, remote.port, deadline, &fd));
        Hello h;
        h.src_device = me;
        h.dst_device = peer;
        h.rail = static_cast<uint32_t>(k);
        h.stripe = static_cast<uint32_t>(stripe);
        h.weight = weight;
        h.space = pair.space;
        Status s = handshake_as_connector(fd, secret_, h, deadline);
        if (!s.ok()) {
          close(fd);
          return error(s.code(), label, ": ", s.message());
        }
      } else {
        std::unique_lock<std::mutex> lock(mutex_);
        const Key key{pair.space, peer, me, static_cast<int>(k), stripe};
        // In slices, so that jax_accl.abort() ends the wait too.
        while (!accepted_cv_.wait_for(lock, std::chrono::milliseconds(20),
                                      [&] { return accepted_.count(key) > 0; })) {
          if (deadline.expired()) return deadline.ended(label, "waiting for the peer to connect");
        }
        fd = accepted_[key].first;
        weight = accepted_[key].second;
        accepted_.erase(key);
      }
      auto channel = std::make_unique<TcpChannel>(fd, label, weight);
      channel->rail = local.name;
      out->push_back(std::move(channel));
    }
  }
  return Status::Ok();
}

void TcpTransport::forget(uint64_t space) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = accepted_.begin(); it != accepted_.end();) {
    if (std::get<0>(it->first) == space) {
      close(it->second.first);
      it = accepted_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace accl
