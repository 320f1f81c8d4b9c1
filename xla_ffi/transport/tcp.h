// TCP: listeners bound to one rail's local address, connections made from a rail's
// local address to the peer's address on the same rail (handshake.h authenticates
// them), and non-blocking channels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

// A peer's listener is up before its address is published, so the kernel on the far side
// answers a connection request at once (accepting it, or refusing it when the process is
// gone). No answer at all means the request is dropped on the way (a firewall closed to
// the listeners' ports, a wrong route): after kUnansweredSeconds (three SYN
// retransmissions) that is an error naming the address and the fix, not a wait until the
// call's deadline. "No route" answers get the same window (a link coming back up).
constexpr double kUnansweredSeconds = 10.0;

// kUnansweredSeconds from now.
Clock::time_point unanswered_at();

// Listens on `ip` at the first free port of [first, last] (0, 0: any); *port is it.
Status tcp_listen(const std::string& ip, uint16_t first, uint16_t last, int* fd, uint16_t* port);
// Connects from local address `local_ip` (port chosen by the kernel). Retries a refused
// connection until the deadline; a request that gets no answer for kUnansweredSeconds
// (a firewall dropping it) is an error naming the fix.
Status tcp_connect(const std::string& local_ip, const std::string& ip, uint16_t port,
                   const Deadline& deadline, int* fd);
// Whether the network carries a connection request from `local_ip` to ip:port and back
// (accepted or refused: both answers; the connection is closed at once): Ok, or the
// error tcp_connect gives for one that gets no answer.
Status tcp_probe(const std::string& local_ip, const std::string& ip, uint16_t port,
                 const Deadline& deadline);
// Blocking transfers with a deadline (handshakes only; data goes through channels).
Status write_all(int fd, const void* data, size_t bytes, const Deadline& deadline);
Status read_all(int fd, void* data, size_t bytes, const Deadline& deadline);

// The congestion control of every socket made for connecting or listening after it is
// set (JAX_ACCL_TCP_CONGESTION; an accepted connection has its listener's): "" keeps
// the system's (net.ipv4.tcp_congestion_control).
// An error, naming why, when this kernel has no such algorithm or refuses it to this
// process (one outside net.ipv4.tcp_allowed_congestion_control needs CAP_NET_ADMIN).
Status set_tcp_congestion(const std::string& name);
std::string tcp_congestion();

class TcpChannel : public Channel {
 public:
  TcpChannel(int fd, std::string label, double weight);
  ~TcpChannel() override;
  Status write_some(const void* data, size_t bytes, size_t* done) override;
  Status read_some(void* data, size_t bytes, size_t* done) override;
  int poll_fd() const override { return fd_; }
  void poison(Code reason) override;
  std::string describe() const override { return label_; }
  double weight() const override { return weight_; }
  // Fails when the peer host stopped acknowledging (see tcp.cc); a peer that is alive
  // but not reading (late for the call) keeps acknowledging and is waited for.
  Status check_peer() override;
  // A peer that failed the call reset the connection (poison), read from TCP_INFO's state;
  // a peer that closed it in order (it finished and left) has not failed the call.
  Status poisoned_status() const override;

 private:
  int fd_;
  std::string label_;
  double weight_;
};

}  // namespace accl
