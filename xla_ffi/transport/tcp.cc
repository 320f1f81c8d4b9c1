#include "transport/tcp.h"

#include "transport/handshake.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

namespace accl {

// Dead-peer detection on every connection (TcpChannel's constructor).
constexpr int kKeepIdleSeconds = 5, kKeepIntervalSeconds = 2, kKeepProbes = 3;
// Late is not dead. A peer process that is alive but has not reached the call (a
// checkpoint, a compile) does not read: its receive window closes and our data waits in
// our socket, the kernel probing the zero window, and the peer's kernel acknowledges
// every probe; it may do so until the call's deadline. So no TCP_USER_TIMEOUT (which
// since Linux 5.x also ends a connection whose peer keeps a zero window) and no shorter
// bound than the deadline on an answering peer. A host that vanished answers nothing:
// while data is in flight, check_peer() reads the kernel's counts (TCP_INFO) and fails
// once kDeadRetransmits retransmissions or zero-window probes in a row went unanswered
// and nothing was acknowledged for kDeadSilenceMs (about 6 s at the minimum RTO); an
// idle connection is probed by keepalive and fails after about 11 s.
constexpr unsigned kDeadRetransmits = 5;
constexpr unsigned kDeadSilenceMs = 5000;
namespace {

Status make_address(const std::string& ip, uint16_t port, sockaddr_in* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sin_family = AF_INET;
  addr->sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &addr->sin_addr) != 1) {
    return error(Code::kInvalidArgument, "not an IPv4 address: '", ip, "'");
  }
  return Status::Ok();
}

// What a failed send or recv on an established connection most likely means. A peer
// that fails a call resets its connections (TcpChannel::poison), as the kernel does for
// a process that dies with bytes unread.
const char* why_failed(int e) {
  switch (e) {
    case ETIMEDOUT:
      return " (the peer host stopped answering: a cut link or a host gone; seen by TCP "
             "keepalive)";
    case ECONNRESET:
      return " (the peer failed this call and reset the connection, or its process died)";
    case EHOSTUNREACH:
    case ENETUNREACH:
      return " (the peer host cannot be reached: a cut link, a host gone or a route lost)";
    default: return " (the peer process died or closed the connection)";
  }
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

int remaining_ms(const Deadline& deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1000));
}

Status wait_fd(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR)
      return error(Code::kInternal, what, ": poll: ", std::strerror(errno));
    if (deadline.expired()) return deadline.ended(what, "waiting for the socket");
  }
}

// JAX_ACCL_TCP_CONGESTION on a socket before it connects or listens (an accepted
// connection inherits its listener's). Set after the handshake instead, a switch away
// from BBR would leave the kernel pacing the connection (BBR turns pacing on when the
// connection is established; nothing turns it off): 2 x 1 x 1, 64 MiB per op, 51-76 ms
// with the switch made on connected sockets, 23 ms with reno from the start.
void set_congestion_on(int fd) {
  const std::string congestion = tcp_congestion();
  if (!congestion.empty()) {  // (checked when set: set_tcp_congestion)
    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(), congestion.size());
  }
}

}  // namespace

Status tcp_listen(const std::string& ip, uint16_t first, uint16_t last, int* fd, uint16_t* port) {
  if (first > last) {
    return error(Code::kInvalidArgument, "listen on ", ip, ": port range ", first, "-", last,
                 " is empty");
  }
  int e = 0;
  for (uint32_t candidate = first; candidate <= last; ++candidate) {
    sockaddr_in addr;
    ACCL_RETURN_IF_ERROR(make_address(ip, static_cast<uint16_t>(candidate), &addr));
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return error(Code::kInternal, "socket: ", std::strerror(errno));
    set_congestion_on(s);
    if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        listen(s, SOMAXCONN) == 0) {
      socklen_t len = sizeof(addr);
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
      *fd = s;
      *port = ntohs(addr.sin_port);
      return Status::Ok();
    }
    e = errno;
    close(s);
    if (e != EADDRINUSE) break;  // a port taken: the next; anything else: give up
  }
  if (first == 0) return error(Code::kInternal, "listen on ", ip, ": ", std::strerror(e));
  return error(Code::kInternal, "listen on ", ip, ": no free port in ", first, "-", last,
               " (JAX_ACCL_PORTS): ", std::strerror(e));
}

namespace {

// One connection attempt: Ok with *fd connected, or errno in *err (ETIMEDOUT: no answer
// within kUnansweredSeconds of its own), or the call's deadline ended (its error).
Status connect_once(const sockaddr_in& local, const sockaddr_in& remote, const Deadline& deadline,
                    const std::string& what, int* fd, int* err) {
  *err = 0;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return error(Code::kInternal, "socket: ", std::strerror(errno));
  set_congestion_on(s);
  if (bind(s, reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) {
    int e = errno;
    close(s);
    return error(Code::kInternal, what, ": bind: ", std::strerror(e));
  }
  set_nonblocking(s);
  int r = connect(s, reinterpret_cast<const sockaddr*>(&remote), sizeof(remote));
  int e = r == 0 ? 0 : errno;
  if (e == EINPROGRESS) {
    Deadline answer = deadline;
    answer.at = std::min(deadline.at, unanswered_at());
    Status w = wait_fd(s, POLLOUT, answer, what.c_str());
    if (!w.ok()) {
      close(s);
      if (deadline.expired() || w.code() != Code::kTimeout) return w;
      *err = ETIMEDOUT;
      return Status::Ok();
    }
    socklen_t len = sizeof(e);
    getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len);
  }
  if (e != 0) {
    close(s);
    *err = e;
    return Status::Ok();
  }
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *fd = s;
  return Status::Ok();
}

Status unanswered(const std::string& what, const std::string& local_ip, const std::string& ip,
                  int err) {
  return error(Code::kAborted, what, ": ", err == ETIMEDOUT ? "no answer" : std::strerror(err),
               " for ", kUnansweredSeconds,
               " s: the network drops connections on the way (a firewall between the hosts? "
               "open the ports of jax_accl's listeners, JAX_ACCL_PORTS chooses them; or check "
               "the route from ",
               local_ip, " to ", ip,
               " on this rail, JAX_ACCL_RAILS), or the peer process's listener does not "
               "accept (the process stopped, or overloaded)");
}

// Retries "no route" answers for kUnansweredSeconds (a link coming back) and, with
// `retry_refused`, a refused connection until the deadline (the listener gone: its
// process's health check says so): Ok with *fd connected and *err 0, or *err the errno
// that ended the tries (ETIMEDOUT: an attempt got no answer at all).
Status connect_with_retries(const sockaddr_in& local, const sockaddr_in& remote,
                            const Deadline& deadline, bool retry_refused, const std::string& what,
                            int* fd, int* err) {
  const auto routes_by = unanswered_at();
  for (;;) {
    ACCL_RETURN_IF_ERROR(connect_once(local, remote, deadline, what, fd, err));
    const bool no_route = *err == EHOSTUNREACH || *err == ENETUNREACH;
    if (*err == 0 || *err == ETIMEDOUT || (no_route && Clock::now() >= routes_by) ||
        (!no_route && !retry_refused)) {
      return Status::Ok();
    }
    if (deadline.expired()) {
      return deadline.ended(what, str_cat("retrying (", std::strerror(*err), ")"));
    }
    usleep(20000);
  }
}

}  // namespace

Clock::time_point unanswered_at() {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(kUnansweredSeconds));
}

Status tcp_connect(const std::string& local_ip, const std::string& ip, uint16_t port,
                   const Deadline& deadline, int* fd) {
  sockaddr_in local, remote;
  ACCL_RETURN_IF_ERROR(make_address(local_ip, 0, &local));
  ACCL_RETURN_IF_ERROR(make_address(ip, port, &remote));
  const std::string what = str_cat("connect from ", local_ip, " to ", ip, ":", port);
  int e = 0;
  ACCL_RETURN_IF_ERROR(connect_with_retries(local, remote, deadline, true, what, fd, &e));
  return e == 0 ? Status::Ok() : unanswered(what, local_ip, ip, e);
}

Status tcp_probe(const std::string& local_ip, const std::string& ip, uint16_t port,
                 const Deadline& deadline) {
  sockaddr_in local, remote;
  ACCL_RETURN_IF_ERROR(make_address(local_ip, 0, &local));
  ACCL_RETURN_IF_ERROR(make_address(ip, port, &remote));
  const std::string what = str_cat("probe from ", local_ip, " to ", ip, ":", port);
  int fd = -1, e = 0;
  ACCL_RETURN_IF_ERROR(connect_with_retries(local, remote, deadline, false, what, &fd, &e));
  if (e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH) {
    return unanswered(what, local_ip, ip, e);
  }
  if (e != 0) return Status::Ok();  // refused: an answer (the process's health says more)
  // A probe hello (the empty send buffer of a fresh connection takes it at once): the
  // peer closes it without counting a refused connection.
  Hello probe;
  probe.magic = kProbeMagic;
  ssize_t ignored = send(fd, &probe, sizeof(probe), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
  close(fd);
  return Status::Ok();
}

Status write_all(int fd, const void* data, size_t bytes, const Deadline& deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      ACCL_RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, "handshake write"));
    } else {
      return error(Code::kAborted, "handshake write: ", std::strerror(errno));
    }
  }
  return Status::Ok();
}

Status read_all(int fd, void* data, size_t bytes, const Deadline& deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= n;
    } else if (n == 0) {
      return error(Code::kAborted, "connection closed during handshake");
    } else if (errno == EAGAIN || errno == EINTR) {
      ACCL_RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, "handshake read"));
    } else {
      return error(Code::kAborted, "handshake read: ", std::strerror(errno));
    }
  }
  return Status::Ok();
}

namespace {
std::mutex congestion_mutex;
std::string& congestion_setting() {
  static std::string* name = new std::string;
  return *name;
}
}  // namespace

Status set_tcp_congestion(const std::string& name) {
  if (!name.empty()) {
    // Tried on a socket of its own, so a refusal is known now, not per connection.
    const int probe = socket(AF_INET, SOCK_STREAM, 0);
    if (probe < 0) return error(Code::kInternal, "socket: ", std::strerror(errno));
    const int failed = setsockopt(probe, IPPROTO_TCP, TCP_CONGESTION, name.data(), name.size());
    const int why = errno;
    close(probe);
    if (failed != 0) {
      return error(Code::kInvalidArgument, "TCP congestion control '", name,
                   "': ", std::strerror(why),
                   why == EPERM ? " (not in net.ipv4.tcp_allowed_congestion_control, and this "
                                  "process lacks CAP_NET_ADMIN)"
                                : " (see net.ipv4.tcp_available_congestion_control)");
    }
  }
  std::lock_guard<std::mutex> lock(congestion_mutex);
  congestion_setting() = name;
  return Status::Ok();
}

std::string tcp_congestion() {
  std::lock_guard<std::mutex> lock(congestion_mutex);
  return congestion_setting();
}

TcpChannel::TcpChannel(int fd, std::string label, double weight)
    : fd_(fd), label_(std::move(label)), weight_(weight) {
  set_nonblocking(fd_);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // (Its congestion control was set before it connected: set_congestion_on.)
  // A peer host that vanishes (power, cable, a partition) sends no reset: without these
  // a wait would only end at its deadline. Keepalive probes an idle connection after
  // kKeepIdleSeconds and gives up after kKeepProbes unanswered probes; data in flight
  // is watched by check_peer() (see kDeadRetransmits).
  int idle = kKeepIdleSeconds, interval = kKeepIntervalSeconds, probes = kKeepProbes;
  setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

Status TcpChannel::check_peer() {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return Status::Ok();
  const unsigned unanswered = std::max<unsigned>(info.tcpi_retransmits, info.tcpi_probes);
  if (unanswered >= kDeadRetransmits && info.tcpi_last_ack_recv >= kDeadSilenceMs) {
    return error(Code::kAborted, label_, ": the peer host stopped answering (nothing ",
                 "acknowledged for ", info.tcpi_last_ack_recv / 1000.0, " s, ", unanswered,
                 " retransmissions or probes unanswered): a cut link or a host gone; a peer ",
                 "that is only late still acknowledges");
  }
  return Status::Ok();
}

TcpChannel::~TcpChannel() { close(fd_); }

// A failed call resets its connections; a process that leaves closes them. The peer
// tells the two apart by its connection's state: CLOSE after a reset (or a keepalive
// that timed out) is a failure, even with bytes still unread; CLOSE_WAIT after an
// orderly close is a peer that finished its part and left, which fails only a rank
// that still reads from it (read_some ends), not a rank that waits for another.
void TcpChannel::poison(Code) {
  // connect() to AF_UNSPEC disconnects a TCP socket with a reset and keeps the
  // descriptor (Linux: tcp_disconnect); where it fails, shut the connection.
  sockaddr unspecified{};
  unspecified.sa_family = AF_UNSPEC;
  if (connect(fd_, &unspecified, sizeof(unspecified)) != 0) shutdown(fd_, SHUT_RDWR);
}

Status TcpChannel::poisoned_status() const {
  if (!broken.ok()) return broken;
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) {
    return error(Code::kAborted, label_, ": ", std::strerror(errno));
  }
  if (info.tcpi_state == TCP_ESTABLISHED || info.tcpi_state == TCP_CLOSE_WAIT) {
    return Status::Ok();
  }
  return error(Code::kAborted, label_,
               ": the connection was reset or timed out (a peer failed the call, or its host "
               "stopped answering)");
}

Status TcpChannel::write_some(const void* data, size_t bytes, size_t* done) {
  *done = 0;
  if (bytes == 0) return Status::Ok();
  ssize_t n = send(fd_, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    *done = static_cast<size_t>(n);
    return Status::Ok();
  }
  if (errno == EAGAIN || errno == EINTR) return Status::Ok();
  return error(Code::kAborted, label_, ": send failed: ", std::strerror(errno), why_failed(errno));
}

Status TcpChannel::read_some(void* data, size_t bytes, size_t* done) {
  *done = 0;
  if (bytes == 0) return Status::Ok();
  ssize_t n = recv(fd_, data, bytes, MSG_DONTWAIT);
  if (n > 0) {
    *done = static_cast<size_t>(n);
    return Status::Ok();
  }
  if (n == 0) {
    return error(Code::kAborted, label_,
                 ": connection closed by the peer (it failed this call, or its process died)");
  }
  if (errno == EAGAIN || errno == EINTR) return Status::Ok();
  return error(Code::kAborted, label_, ": recv failed: ", std::strerror(errno), why_failed(errno));
}

}  // namespace accl
