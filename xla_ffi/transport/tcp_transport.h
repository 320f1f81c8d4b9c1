// TCP between hosts: a listener per rail, an acceptor thread whose one event loop
// drives the handshakes of every connection at once (the job's secret, handshake.h), and
// connect(), which makes one connection per matched rail and stripe, from the lower
// device id to the higher (the higher waits for the lower's connections to be
// accepted; the lower retries a connection closed unread within its deadline).
//
// Strangers cannot lock the job out: the job's own peers (the rail addresses of the
// process table) have handshake places of their own, at most 64 in progress, 5 s each;
// any other address gets at most 4 places of 16 shared by all strangers, 1 s each for
// the whole exchange. A new connection whose places are full takes the place of the
// oldest handshake in them (that address's own, for a stranger at its 4), which is
// closed saying busy and counted as refused: a program on a job host, connecting from
// that host's rail address, shares the job's 64 places but cannot hold them, since the
// newest connection, a real peer's, always gets in and finishes its exchange in a round
// trip while the holders' older ones go first. A hello for a device that does not live
// here is refused before anything is proved to it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "transport/handshake.h"
#include "transport/transport.h"

namespace accl {

// Rails of the lower and higher process of a pair, matched by interface name (the
// rails of rail-optimised clusters have the same names everywhere), else by position.
std::vector<std::pair<int, int>> match_rails(const std::vector<Rail>& lower,
                                             const std::vector<Rail>& higher);

class TcpTransport final : public Transport {
 public:
  // Opens one listener per rail (fills rails[i].port) and starts accepting;
  // `where(device)` tells whether a connection's destination is this process's (or
  // not known yet: the connector is told to try again).
  static Status start(std::string secret, std::vector<Rail>* rails, int stripes_per_rail,
                      std::function<Destination(int64_t)> where,
                      std::unique_ptr<TcpTransport>* out);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  bool can_connect(const DevicePair& pair) const override {
    return pair.mine->host != pair.theirs->host;
  }
  Status connect(const DevicePair& pair, const Deadline& deadline,
                 std::vector<std::unique_ptr<Channel>>* out,
                 std::vector<std::unique_ptr<Channel>>* reverse) override;
  // Closes the accepted connections of `space` that nobody claimed.
  void forget(uint64_t space) override;
  // Connections refused for a wrong secret, protocol or destination (not those told to
  // try again).
  uint64_t refused() const { return refused_.load(); }
  // The job's peers: every process's rail addresses (IPv4, dotted), from the process table.
  void set_known_peers(const std::vector<std::string>& ips);

 private:
  TcpTransport() = default;
  void accept_loop();
  struct Pending {
    std::unique_ptr<AcceptorHandshake> handshake;
    uint32_t address;  // the connector's IPv4 address (network order)
    bool known;        // one of the job's peers
  };
  // One round of the event loop; false when the transport stops.
  bool accept_round(std::vector<Pending>* pending, Clock::time_point* backoff_until);
  // The handshake whose place a new connection from `address` takes (the top), or
  // pending.end() when there is room.
  static std::vector<Pending>::iterator displaced(std::vector<Pending>& pending, uint32_t address,
                                                  bool known);
  bool known_peer(uint32_t address);
  // A handshake passed: files the connection for connect(), or refuses it.
  void admit(const AcceptorHandshake& h);

  std::string secret_;
  int stripes_per_rail_ = 1;
  std::function<Destination(int64_t)> where_;
  std::vector<int> listeners_;
  int wake_pipe_[2] = {-1, -1};
  std::thread acceptor_;
  std::mutex mutex_;
  std::condition_variable accepted_cv_;
  // Accepted connections not yet claimed: (space, src, dst, rail pair, stripe) -> fd, weight.
  using Key = std::tuple<uint64_t, int64_t, int64_t, int, int>;
  std::map<Key, std::pair<int, double>> accepted_;
  std::set<uint64_t> forgotten_;  // spaces gone: their late connections are refused
  std::atomic<uint64_t> refused_{0};
  std::mutex known_mutex_;
  std::set<uint32_t> known_peers_;
};

}  // namespace accl
