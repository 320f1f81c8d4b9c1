// TCP: listeners bound to one rail's local address, connections made from a rail's
// local address to the peer's address on the same rail, a handshake that carries the
// job's secret (a stranger's connection is refused), and non-blocking channels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

constexpr uint32_t kHandshakeMagic = 0x4c434341;  // "ACCL" little-endian
constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kSecretBytes = 32;

// First bytes on every connection, connector -> acceptor. The acceptor answers with
// one byte, kHandshakeAccepted, once it has checked the secret.
struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kProtocolVersion;
  char secret[kSecretBytes] = {};
  int64_t src_device = -1;  // connector's global device id
  int64_t dst_device = -1;  // acceptor's global device id
  uint32_t rail = 0;
  uint32_t stripe = 0;  // connection index on that rail
  double weight = 1.0;  // share of striped messages this connection carries
};
constexpr char kHandshakeAccepted = 'K';

// Checks magic, version and secret (in constant time); the reason when refused.
Status check_handshake(const Handshake& h, const std::string& secret);

Status tcp_listen(const std::string& ip, int* fd, uint16_t* port);
// Connects from local address `local_ip` (port chosen by the kernel).
Status tcp_connect(const std::string& local_ip, const std::string& ip, uint16_t port,
                   const Deadline& deadline, int* fd);
// Blocking transfers with a deadline (handshakes only; data goes through channels).
Status write_all(int fd, const void* data, size_t bytes, const Deadline& deadline);
Status read_all(int fd, void* data, size_t bytes, const Deadline& deadline);

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

 private:
  int fd_;
  std::string label_;
  double weight_;
};

}  // namespace accl
