// The handshake that opens every TCP connection between jax_accl processes: mutual
// authentication by challenge and response, with the job's secret never on the wire.
//
//   connector -> acceptor   Hello      who and what (devices, rail, stripe, weight, the
//                                      channel space: group and epoch) and
//                                      a fresh nonce of the connector's
//   acceptor  -> connector  Challenge  a fresh nonce of the acceptor's, and its proof:
//                                      HMAC-SHA256(secret, "jax_accl acceptor" | hello |
//                                      acceptor nonce | endpoints); the connector checks
//                                      it (the acceptor knows the secret, and answers this
//                                      hello on this connection)
//   connector -> acceptor   Response   HMAC-SHA256(secret, "jax_accl connector" | hello |
//                                      acceptor nonce | endpoints); the acceptor checks it
//   acceptor  -> connector  'K'        admitted
//
// An observer learns no secret and cannot replay an exchange (the acceptor's nonce is
// new every time); distinct role labels keep one side's proof from serving as the
// other's. Both proofs bind the connection's endpoints (the connector's address and
// port, then the acceptor's, as each side's socket sees them): a relay between the two
// holds two connections with different endpoints, so neither side accepts the other's
// proof through it. Every step has a deadline.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/sha256.h"
#include "common/wait.h"

namespace accl {

constexpr uint32_t kHandshakeMagic = 0x4c434341;  // "ACCL" little-endian
// A hello with this magic is a reachability probe (tcp_probe): closed, not a refusal.
constexpr uint32_t kProbeMagic = 0x424f5250;  // "PROB" little-endian
constexpr uint32_t kProtocolVersion = 5;      // 5: the plan in every frame header
constexpr size_t kSecretBytes = 32;
constexpr size_t kNonceBytes = 16;
constexpr char kHandshakeAccepted = 'K';
// What a busy acceptor sends, alone, before it closes a connection it will not read, or
// in place of the admission byte when it evicts a handshake: try again (a refusal
// closes with nothing, a challenge is 48 bytes).
constexpr char kHandshakeBusy = 'B';

struct Hello {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kProtocolVersion;
  int64_t src_device = -1;  // connector's global device id
  int64_t dst_device = -1;  // acceptor's global device id
  uint32_t rail = 0;
  uint32_t stripe = 0;  // connection index on that rail
  double weight = 1.0;  // share of striped messages this connection carries
  uint64_t space = 0;   // the channel space (group and epoch, runtime/channel_space.h)
  uint8_t nonce[kNonceBytes] = {};
};
static_assert(sizeof(Hello) == 64, "the wire layout: no padding");

struct Challenge {
  uint8_t nonce[kNonceBytes];
  Digest proof;
};
static_assert(sizeof(Challenge) == 48, "the wire layout: no padding");

// A rail's weight (its share of striped messages) must be positive and finite; the
// bound keeps every share of a message representable.
inline bool valid_rail_weight(double w) { return w > 0 && w <= 1e6; }

// Magic, version and weight of a hello; the reason when refused.
Status check_hello(const Hello& h);

// A connection's two ends as both sides see them: the connector's address and port,
// then the acceptor's, each as 16 address bytes (IPv4 mapped into IPv6) and the port in
// network order.
struct Endpoints {
  uint8_t bytes[36] = {};
};
// From a connected socket; `connector` says which side of the handshake `fd` is.
Status endpoints_of(int fd, bool connector, Endpoints* out);

// The proof of `role` ("acceptor" or "connector") for `hello`, the acceptor's nonce and
// the connection's endpoints.
Digest handshake_proof(const std::string& secret, const char* role, const Hello& hello,
                       const uint8_t* acceptor_nonce, const Endpoints& endpoints);

void random_bytes(void* out, size_t bytes);  // from the kernel's generator

// The connector's side of the exchange on `fd` (hello's nonce is filled in here).
// *closed_unread (if given) tells that the listener was busy (it sent kHandshakeBusy
// alone and closed, or sent it in place of the admission byte): worth another try.
Status handshake_as_connector(int fd, const std::string& secret, Hello hello,
                              const Deadline& deadline, bool* closed_unread = nullptr);

// The acceptor's side, as a state machine over a non-blocking socket, so that one event
// loop drives the handshakes of many connections at once (tcp_transport.cc): step()
// moves as far as the socket allows without blocking, events() says what to poll for.
// Where a hello's destination device lives, as the acceptor's process knows it.
enum class Destination {
  kHere,
  kElsewhere,    // refused unanswered
  kNotKnownYet,  // this process has no process table yet: answered busy, so the connector retries
};

class AcceptorHandshake {
 public:
  enum class State { kReadHello, kWriteChallenge, kReadResponse, kAdmitted, kRefused };
  // `wanted(hello)`, if given, is checked before anything is proved to the connector.
  AcceptorHandshake(int fd, const std::string& secret, Deadline deadline,
                    std::function<Destination(const Hello&)> wanted = nullptr)
      : fd_(fd), secret_(secret), deadline_(deadline), wanted_(std::move(wanted)) {}
  State step();
  State state() const { return state_; }
  short events() const;  // POLLIN or POLLOUT
  int fd() const { return fd_; }
  const Deadline& deadline() const { return deadline_; }
  const Hello& hello() const { return hello_; }          // once admitted: what the connector said
  const Status& reason() const { return reason_; }       // once refused: why
  bool answered_busy() const { return answered_busy_; }  // refused only for now
  // Closed without counting as a refused connection: answered busy, or a probe.
  bool uncounted() const { return answered_busy_ || probe_; }
  // Gives up this handshake for a newer connection's (the caller closes the socket):
  // says busy where the connector reads it, before the challenge or instead of the
  // admission byte, so that a peer's connector tries again.
  void evict();

 private:
  State refuse(Status why);
  // Moves bytes between the socket and [buffer, buffer + bytes) from done_ on.
  bool transfer(void* buffer, size_t bytes, bool write);

  int fd_;
  const std::string& secret_;
  Deadline deadline_;
  std::function<Destination(const Hello&)> wanted_;
  State state_ = State::kReadHello;
  size_t done_ = 0;  // bytes of the current message moved so far
  Hello hello_;
  Challenge challenge_{};
  Digest response_{};
  Endpoints endpoints_;
  Status reason_;
  bool answered_busy_ = false;
  bool probe_ = false;
};

}  // namespace accl
