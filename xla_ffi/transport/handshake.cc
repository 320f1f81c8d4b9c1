#include "transport/handshake.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "transport/tcp.h"

namespace accl {

Status check_hello(const Hello& h) {
  if (h.magic != kHandshakeMagic) return error(Code::kAborted, "not a jax_accl connection");
  if (h.version != kProtocolVersion) {
    return error(Code::kAborted, "protocol version ", h.version, ", expected ", kProtocolVersion);
  }
  if (!valid_rail_weight(h.weight)) {
    return error(Code::kAborted, "rail weight ", h.weight, " is not a positive finite number");
  }
  return Status::Ok();
}

namespace {

// 16 address bytes (an IPv4 address mapped into IPv6) and the port, big-endian.
bool put_address(const sockaddr_storage& a, uint8_t* out) {
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    out[10] = out[11] = 0xff;
    std::memcpy(out + 12, &v4.sin_addr, 4);
    std::memcpy(out + 16, &v4.sin_port, 2);
    return true;
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    std::memcpy(out, &v6.sin6_addr, 16);
    std::memcpy(out + 16, &v6.sin6_port, 2);
    return true;
  }
  return false;
}

}  // namespace

Status endpoints_of(int fd, bool connector, Endpoints* out) {
  sockaddr_storage mine{}, theirs{};
  socklen_t mine_len = sizeof(mine), theirs_len = sizeof(theirs);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) != 0) {
    return error(Code::kAborted, "handshake: the connection's endpoints: ", std::strerror(errno));
  }
  *out = Endpoints{};
  const sockaddr_storage& connector_end = connector ? mine : theirs;
  const sockaddr_storage& acceptor_end = connector ? theirs : mine;
  if (!put_address(connector_end, out->bytes) || !put_address(acceptor_end, out->bytes + 18)) {
    return error(Code::kAborted, "handshake: not an IP connection");
  }
  return Status::Ok();
}

Digest handshake_proof(const std::string& secret, const char* role, const Hello& hello,
                       const uint8_t* acceptor_nonce, const Endpoints& endpoints) {
  std::string message = str_cat("jax_accl ", role);
  message.append(reinterpret_cast<const char*>(&hello), sizeof(hello));
  message.append(reinterpret_cast<const char*>(acceptor_nonce), kNonceBytes);
  message.append(reinterpret_cast<const char*>(endpoints.bytes), sizeof(endpoints.bytes));
  return hmac_sha256(secret, message);
}

void random_bytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    ssize_t n = getrandom(p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {  // no getrandom (kernels before 3.17): the library's device, /dev/urandom
      std::random_device device;
      for (; bytes > 0; --bytes) *p++ = static_cast<uint8_t>(device());
      return;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

Status handshake_as_connector(int fd, const std::string& secret, Hello hello,
                              const Deadline& deadline, bool* closed_unread) {
  random_bytes(hello.nonce, kNonceBytes);
  Endpoints endpoints;
  ACCL_RETURN_IF_ERROR(endpoints_of(fd, /*connector=*/true, &endpoints));
  Challenge challenge;
  // A busy listener may have sent its one byte and closed before the hello is written.
  Status sent = write_all(fd, &hello, sizeof(hello), deadline);
  char first = 0;
  if (sent.ok() || recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
    sent = read_all(fd, &challenge, 1, deadline);
    if (sent.ok()) {
      first = reinterpret_cast<const char*>(&challenge)[0];
      sent = read_all(fd, reinterpret_cast<char*>(&challenge) + 1, sizeof(challenge) - 1, deadline);
    }
  }
  if (!sent.ok()) {
    // One byte, the busy mark, then the end: the listener had no place for us now.
    if (closed_unread != nullptr) *closed_unread = first == kHandshakeBusy;
    return sent;
  }
  if (!digests_equal(challenge.proof,
                     handshake_proof(secret, "acceptor", hello, challenge.nonce, endpoints))) {
    return error(Code::kAborted,
                 "the listener does not know the job's secret, or something between "
                 "rewrites addresses (a relay, NAT or a port mapping: the job's rails must "
                 "reach each other directly)");
  }
  const Digest response = handshake_proof(secret, "connector", hello, challenge.nonce, endpoints);
  ACCL_RETURN_IF_ERROR(write_all(fd, response.data(), response.size(), deadline));
  char ack = 0;
  ACCL_RETURN_IF_ERROR(read_all(fd, &ack, 1, deadline));
  if (ack == kHandshakeBusy) {  // evicted for a newer connection: worth another try
    if (closed_unread != nullptr) *closed_unread = true;
    return error(Code::kAborted, "the listener was busy");
  }
  if (ack != kHandshakeAccepted) return error(Code::kAborted, "handshake refused");
  return Status::Ok();
}

void AcceptorHandshake::evict() {
  // One byte into a send buffer that holds at most the 48-byte challenge: never waits.
  // Mid-challenge (a full send buffer) nothing fits the protocol: the connector fails.
  if (state_ == State::kReadHello || state_ == State::kReadResponse) {
    ssize_t ignored = send(fd_, &kHandshakeBusy, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
  refuse(error(Code::kAborted, "evicted by a newer connection"));
}

short AcceptorHandshake::events() const {
  return state_ == State::kWriteChallenge ? POLLOUT : POLLIN;
}

AcceptorHandshake::State AcceptorHandshake::refuse(Status why) {
  reason_ = std::move(why);
  return state_ = State::kRefused;
}

bool AcceptorHandshake::transfer(void* buffer, size_t bytes, bool write) {
  char* p = static_cast<char*>(buffer);
  while (done_ < bytes) {
    const ssize_t n = write ? send(fd_, p + done_, bytes - done_, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd_, p + done_, bytes - done_, MSG_DONTWAIT);
    if (n > 0) {
      done_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    refuse(error(Code::kAborted, n == 0 ? "connection closed during the handshake"
                                        : str_cat("handshake: ", std::strerror(errno))));
    return false;
  }
  done_ = 0;
  return true;
}

AcceptorHandshake::State AcceptorHandshake::step() {
  for (;;) {
    switch (state_) {
      case State::kReadHello: {
        if (!transfer(&hello_, sizeof(hello_), /*write=*/false)) return state_;
        if (hello_.magic == kProbeMagic) {  // a peer checking that we answer: we did
          probe_ = true;
          return refuse(error(Code::kAborted, "a reachability probe"));
        }
        Status s = check_hello(hello_);
        if (!s.ok()) return refuse(s);
        const Destination where = wanted_ ? wanted_(hello_) : Destination::kHere;
        if (where == Destination::kNotKnownYet) {
          // Nothing sent yet, so the one byte fits the empty send buffer: never waits.
          ssize_t ignored = send(fd_, &kHandshakeBusy, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          (void)ignored;
          answered_busy_ = true;
          return refuse(error(Code::kAborted, "device ", hello_.dst_device,
                              ": this process has no process table yet (try again)"));
        }
        if (where == Destination::kElsewhere) {
          return refuse(error(Code::kAborted, "device ", hello_.dst_device, " does not live here"));
        }
        s = endpoints_of(fd_, /*connector=*/false, &endpoints_);
        if (!s.ok()) return refuse(s);
        random_bytes(challenge_.nonce, kNonceBytes);
        challenge_.proof =
            handshake_proof(secret_, "acceptor", hello_, challenge_.nonce, endpoints_);
        state_ = State::kWriteChallenge;
        break;
      }
      case State::kWriteChallenge:
        if (!transfer(&challenge_, sizeof(challenge_), /*write=*/true)) return state_;
        state_ = State::kReadResponse;
        break;
      case State::kReadResponse:
        if (!transfer(response_.data(), response_.size(), /*write=*/false)) return state_;
        if (!digests_equal(response_, handshake_proof(secret_, "connector", hello_,
                                                      challenge_.nonce, endpoints_))) {
          return refuse(error(Code::kAborted,
                              "wrong proof of the job's secret (or rewritten addresses: NAT)"));
        }
        return state_ = State::kAdmitted;
      case State::kAdmitted:
      case State::kRefused: return state_;
    }
  }
}

}  // namespace accl
