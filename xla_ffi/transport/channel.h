// A byte stream to one peer (another process or another device thread), the unit the
// cross-process transports provide: TCP connections (one per rail) and shared-memory
// rings. Reads and writes never block; the ChannelLink drives many channels at once
// and waits on them (poll for sockets, short sleeps for memory rings).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace accl {

// Bytes moved over one transport or rail, for jax_accl.stats().
struct TrafficStats {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> messages_sent{0};
};

class Channel {
 public:
  virtual ~Channel() = default;
  // Moves up to `bytes`; *done = how many moved (0 when the channel is full/empty).
  virtual Status write_some(const void* data, size_t bytes, size_t* done) = 0;
  virtual Status read_some(void* data, size_t bytes, size_t* done) = 0;
  // A descriptor to poll(), or -1 for memory channels (which are polled by sleeping).
  virtual int poll_fd() const { return -1; }
  // Called while waiting: fails when the peer is known to be dead.
  virtual Status check_peer() { return Status::Ok(); }
  // Fails when the peer's process is known to have ended (shared memory: its pid is
  // gone), which is final: that process can never take part in a call again.
  virtual Status peer_process_ended() { return Status::Ok(); }
  // After a failure mid-stream: makes the peer's next read or write fail at once
  // (the stream cannot be resynchronised), so errors spread instead of hanging.
  // `reason`: what failed on this side, passed on where the transport can (memory rings).
  virtual void poison(Code reason) {}
  // e.g. "tcp rail eth1 to 10.0.1.2:4711" or "shm".
  virtual std::string describe() const = 0;
  // Share of a striped message this channel carries (rails of different bandwidth).
  virtual double weight() const { return 1.0; }

  // For ends that touch each other's buffers directly (cross-memory attach between the
  // processes of a host, plain copies between device threads): this end says when it
  // may read or write the peer's buffers, so that a peer that failed can wait until
  // nobody does before it returns (ChannelLink::fail). Memory rings carry the flags in
  // their shared header; other channels have no such phase.
  virtual void set_touching_peer(bool touching) {}
  virtual bool peer_touching() const { return false; }
  // Why the channel is failed, where either end has failed it (poisoned, broken, a TCP
  // peer that reset the connection), read without consuming anything; Ok while it is
  // usable (a TCP peer that closed it in order, having finished, leaves it usable).
  virtual Status poisoned_status() const { return broken; }
  bool poisoned() const { return !poisoned_status().ok(); }

  // Frame counters: both ends count the frames on a channel, so a lost, extra or
  // reordered frame is detected by its sequence number.
  uint64_t next_send_seq = 0;
  uint64_t next_recv_seq = 0;
  // A channel whose stream lost sync (bad frame, dead peer) stays failed.
  Status broken;
  TrafficStats* traffic = nullptr;
  std::string rail = "memory";  // "memory", "shm" or the interface name of a TCP rail
};

}  // namespace accl
