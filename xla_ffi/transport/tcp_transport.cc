#include "transport/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>

#include "common/forced_unwind.h"
#include "transport/handshake.h"
#include "transport/tcp.h"

namespace accl {
namespace {
// Handshakes in progress at once, and how long each may take (see tcp_transport.h): a
// new connection beyond its budget evicts the oldest handshake of that budget (closed,
// counted as refused), so a flood of strangers can exhaust neither descriptors nor
// memory, and holds no place against a newer connection.
constexpr double kHandshakeSeconds = 5.0;
constexpr size_t kMaxPendingHandshakes = 64;
constexpr double kStrangerHandshakeSeconds = 1.0;
constexpr size_t kStrangerHandshakes = 16;
constexpr size_t kHandshakesPerStranger = 4;
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
                           std::function<Destination(int64_t)> where,
                           std::unique_ptr<TcpTransport>* out) {
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  t->secret_ = std::move(secret);
  t->stripes_per_rail_ = std::max(1, stripes_per_rail);
  t->where_ = std::move(where);
  for (Rail& rail : *rails) {
    int fd;
    ACCL_RETURN_IF_ERROR(tcp_listen(rail.ip, rail.first_port, rail.last_port, &fd, &rail.port));
    t->listeners_.push_back(fd);
  }
  if (pipe2(t->wake_pipe_, O_CLOEXEC) != 0) {
    return error(Code::kInternal, "pipe: ", std::strerror(errno));
  }
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

void TcpTransport::set_known_peers(const std::vector<std::string>& ips) {
  std::set<uint32_t> known;
  for (const std::string& ip : ips) {
    in_addr a{};
    if (inet_pton(AF_INET, ip.c_str(), &a) == 1) known.insert(a.s_addr);
  }
  std::lock_guard<std::mutex> lock(known_mutex_);
  known_peers_ = std::move(known);
}

bool TcpTransport::known_peer(uint32_t address) {
  std::lock_guard<std::mutex> lock(known_mutex_);
  return known_peers_.count(address) > 0;
}

std::vector<TcpTransport::Pending>::iterator TcpTransport::displaced(std::vector<Pending>& pending,
                                                                     uint32_t address, bool known) {
  // Pending is in arrival order: the first match is the oldest.
  auto oldest = [&](auto matches) { return std::find_if(pending.begin(), pending.end(), matches); };
  auto same_kind = [known](const Pending& p) { return p.known == known; };
  auto same_address = [&](const Pending& p) { return same_kind(p) && p.address == address; };
  const size_t of_kind = std::count_if(pending.begin(), pending.end(), same_kind);
  if (!known && std::count_if(pending.begin(), pending.end(), same_address) >=
                    static_cast<std::ptrdiff_t>(kHandshakesPerStranger)) {
    return oldest(same_address);
  }
  if (of_kind >= (known ? kMaxPendingHandshakes : kStrangerHandshakes)) return oldest(same_kind);
  return pending.end();
}

void TcpTransport::accept_loop() {
  std::vector<Pending> pending;
  Clock::time_point backoff_until{};
  for (;;) {
    try {
      if (!accept_round(&pending, &backoff_until)) break;
    } catch (ForcedUnwind&) {  // a cancelled thread must unwind to its end
      for (auto& p : pending) close(p.handshake->fd());
      throw;
    } catch (...) {  // nothing may escape a thread: drop what was pending, go on
      for (auto& p : pending) close(p.handshake->fd());
      refused_.fetch_add(pending.size());
      pending.clear();
    }
  }
  for (auto& p : pending) close(p.handshake->fd());
}

bool TcpTransport::accept_round(std::vector<Pending>* pending, Clock::time_point* backoff_until) {
  const auto now = Clock::now();
  const bool backing_off = now < *backoff_until;
  std::vector<pollfd> fds;
  for (int fd : listeners_)
    fds.push_back(pollfd{fd, static_cast<short>(backing_off ? 0 : POLLIN), 0});
  fds.push_back(pollfd{wake_pipe_[0], POLLIN, 0});
  // Wake up for the nearest handshake deadline (or the end of a back-off).
  auto wake = backing_off ? *backoff_until : Clock::time_point::max();
  for (const Pending& p : *pending) {
    fds.push_back(pollfd{p.handshake->fd(), p.handshake->events(), 0});
    wake = std::min(wake, p.handshake->deadline().at);
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
    AcceptorHandshake& h = *(*pending)[k].handshake;
    if (fds[first_pending + k].revents != 0) h.step();
    if (h.state() == AcceptorHandshake::State::kAdmitted) {
      admit(h);
    } else if (h.state() == AcceptorHandshake::State::kRefused || h.deadline().expired()) {
      if (!h.uncounted()) refused_.fetch_add(1);
      close(h.fd());
    } else {
      continue;
    }
    (*pending)[k].handshake.reset();
  }
  pending->erase(std::remove_if(pending->begin(), pending->end(),
                                [](const Pending& p) { return p.handshake == nullptr; }),
                 pending->end());

  // New connections, each within its budget (see the top); the rest are closed unread.
  for (size_t i = 0; i < listeners_.size(); ++i) {
    if (!(fds[i].revents & POLLIN)) continue;
    sockaddr_in from{};
    socklen_t length = sizeof(from);
    const int fd = accept4(listeners_[i], reinterpret_cast<sockaddr*>(&from), &length,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: the connection stays queued; pause accepting instead of
      // spinning, while the handshakes in progress go on.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        *backoff_until = Clock::now() + std::chrono::milliseconds(50);
      }
      continue;
    }
    const uint32_t address = from.sin_family == AF_INET ? from.sin_addr.s_addr : 0;
    const bool known = known_peer(address);
    const auto victim = displaced(*pending, address, known);
    if (victim != pending->end()) {  // the oldest goes, saying busy: the newest gets in
      victim->handshake->evict();
      refused_.fetch_add(1);
      close(victim->handshake->fd());
      pending->erase(victim);
    }
    auto wanted = [this](const Hello& hello) { return where_(hello.dst_device); };
    pending->push_back(Pending{
        std::make_unique<AcceptorHandshake>(
            fd, secret_,
            Deadline::unabortable_after(known ? kHandshakeSeconds : kStrangerHandshakeSeconds),
            wanted),
        address, known});
    pending->back().handshake->step();  // the hello may be there already
  }
  return true;
}

void TcpTransport::admit(const AcceptorHandshake& h) {
  const Hello& hello = h.hello();
  const int fd = h.fd();
  Status s;
  const Key key{hello.space, hello.src_device, hello.dst_device, static_cast<int>(hello.rail),
                static_cast<int>(hello.stripe)};
  std::lock_guard<std::mutex> lock(mutex_);
  // A second connection for a key not yet claimed is refused: the first one stays. So is
  // one for a space that is gone (a late rank of an old epoch): nobody would claim it.
  if (accepted_.count(key) > 0) s = error(Code::kAborted, "duplicate connection");
  if (forgotten_.count(hello.space) > 0) s = error(Code::kAborted, "a channel space that is gone");
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
        Hello h;
        h.src_device = me;
        h.dst_device = peer;
        h.rail = static_cast<uint32_t>(k);
        h.stripe = static_cast<uint32_t>(stripe);
        h.weight = weight;
        h.space = pair.space;
        // A busy acceptor (strangers in its places, or ours) closes a connection unread:
        // connect again, backing off, until the deadline.
        for (int attempt = 0;; ++attempt) {
          ACCL_RETURN_IF_ERROR(tcp_connect(local.ip, remote.ip, remote.port, deadline, &fd));
          bool closed_unread = false;
          Status s = handshake_as_connector(fd, secret_, h, deadline, &closed_unread);
          if (s.ok()) break;
          close(fd);
          if (!closed_unread || deadline.expired()) {
            return error(s.code(), label, ": ", s.message(),
                         attempt > 0 ? str_cat(" (after ", attempt, " retries)") : "");
          }
          // Backing off from 20 ms to 500 ms, never past the deadline (abort() ends it).
          const auto pause = std::chrono::milliseconds(attempt < 5 ? 20 << attempt : 500);
          const auto until = std::min(Clock::now() + pause, deadline.at);
          while (Clock::now() < until && !deadline.expired()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
      } else {
        std::unique_lock<std::mutex> lock(mutex_);
        const Key key{pair.space, peer, me, static_cast<int>(k), stripe};
        // In slices, so that jax_accl.abort() ends the wait too. A peer may be late (a
        // checkpoint); once kUnansweredSeconds have passed, one probe of its listener
        // tells a late peer (answered: wait on) from a network that drops our
        // connections, and so perhaps the peer's too (an error now, naming the fix).
        const auto probe_at = unanswered_at();
        bool probed = false;
        while (!accepted_cv_.wait_for(lock, std::chrono::milliseconds(20),
                                      [&] { return accepted_.count(key) > 0; })) {
          if (deadline.expired()) return deadline.ended(label, "waiting for the peer to connect");
          if (!probed && Clock::now() >= probe_at) {
            probed = true;
            lock.unlock();
            Status reachable = tcp_probe(local.ip, remote.ip, remote.port, deadline);
            lock.lock();
            if (!reachable.ok() && accepted_.count(key) == 0) {
              return error(reachable.code(), label, ": waiting for the peer to connect, ",
                           reachable.message());
            }
          }
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
  forgotten_.insert(space);
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
