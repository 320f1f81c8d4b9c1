#include "transport/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "transport/handshake.h"
#include "transport/tcp.h"

namespace accl {
namespace {
constexpr double kHandshakeSeconds = 5.0;
// Handshakes in progress at once; a connection beyond them is closed unread (and
// counted as refused), so a flood of strangers cannot exhaust descriptors or memory.
constexpr size_t kMaxPendingHandshakes = 64;
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
  for (auto& [key, value] : accepted_) close(value.first);
}

void TcpTransport::accept_loop() {
  std::vector<std::unique_ptr<AcceptorHandshake>> pending;
  Clock::time_point backoff_until{};
  for (;;) {
    try {
      if (!accept_round(&pending, &backoff_until)) break;
    } catch (...) {  // nothing may escape a thread: drop what was pending, go on
      for (auto& h : pending) close(h->fd());
      refused_.fetch_add(pending.size());
      pending.clear();
    }
  }
  for (auto& h : pending) close(h->fd());
}

bool TcpTransport::accept_round(std::vector<std::unique_ptr<AcceptorHandshake>>* pending,
                                Clock::time_point* backoff_until) {
  const auto now = Clock::now();
  const bool backing_off = now < *backoff_until;
  std::vector<pollfd> fds;
  for (int fd : listeners_)
    fds.push_back(pollfd{fd, static_cast<short>(backing_off ? 0 : POLLIN), 0});
  fds.push_back(pollfd{wake_pipe_[0], POLLIN, 0});
  // Wake up for the nearest handshake deadline (or the end of a back-off).
  auto wake = backing_off ? *backoff_until : Clock::time_point::max();
  for (const auto& h : *pending) {
    fds.push_back(pollfd{h->fd(), h->events(), 0});
    wake = std::min(wake, h->deadline().at);
  }
  int timeout_ms = -1;
  if (wake != Clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    timeout_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1000));
  }
  if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return true;
  const size_t first_pending = listeners_.size() + 1;
  if (fds[listeners_.size()].revents != 0) return false;  // the transport stops

  // Handshakes that can move, or whose deadline passed.
  for (size_t k = 0; k < pending->size(); ++k) {
    AcceptorHandshake& h = *(*pending)[k];
    if (fds[first_pending + k].revents != 0) h.step();
    if (h.state() == AcceptorHandshake::State::kAdmitted) {
      admit(h);
    } else if (h.state() == AcceptorHandshake::State::kRefused || h.deadline().expired()) {
      refused_.fetch_add(1);
      close(h.fd());
    } else {
      continue;
    }
    (*pending)[k].reset();
  }
  pending->erase(std::remove(pending->begin(), pending->end(), nullptr), pending->end());

  // New connections, up to kMaxPendingHandshakes at once; the rest are closed unread.
  for (size_t i = 0; i < listeners_.size(); ++i) {
    if (!(fds[i].revents & POLLIN)) continue;
    const int fd = accept4(listeners_[i], nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: the connection stays queued; pause accepting instead of
      // spinning, while the handshakes in progress go on.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        *backoff_until = Clock::now() + std::chrono::milliseconds(50);
      }
      continue;
    }
    if (pending->size() >= kMaxPendingHandshakes) {
      refused_.fetch_add(1);
      close(fd);
      continue;
    }
    pending->push_back(std::make_unique<AcceptorHandshake>(
        fd, secret_, Deadline::unabortable_after(kHandshakeSeconds)));
    pending->back()->step();  // the hello may be there already
  }
  return true;
}

void TcpTransport::admit(const AcceptorHandshake& h) {
  const Hello& hello = h.hello();
  const int fd = h.fd();
  Status s;
  if (!lives_here_(hello.dst_device)) {
    s = error(Code::kAborted, "device ", hello.dst_device, " does not live here");
  }
  const Key key{hello.space, hello.src_device, hello.dst_device, static_cast<int>(hello.rail),
                static_cast<int>(hello.stripe)};
  std::lock_guard<std::mutex> lock(mutex_);
  // A second connection for a key not yet claimed is refused: the first one stays.
  if (s.ok() && accepted_.count(key) > 0) s = error(Code::kAborted, "duplicate connection");
  // Under the lock, so that the check and the entry are one step; one byte into the
  // empty send buffer of a fresh connection never waits.
  if (s.ok()) s = write_all(fd, &kHandshakeAccepted, 1, Deadline::unabortable_after(1.0));
  if (!s.ok()) {
    refused_.fetch_add(1);
    close(fd);
    return;
  }
  accepted_[key] = {fd, hello.weight};
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
