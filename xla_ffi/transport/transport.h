// How the channels between two devices of the job are made. The World (runtime/world.h)
// asks its transports in order and the first whose can_connect holds for the pair makes
// its channels, once; the World keeps them. Transports: memory (two device threads of
// this process, a heap ring pair), shm (two processes of one host, a ring pair in POSIX
// shared memory), tcp (two hosts, a connection per rail and stripe; tcp_transport.h).
// Transports never include algorithms.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

struct Rail {
  std::string name;   // interface name, e.g. "eth1"
  std::string ip;     // this process's address on it
  uint16_t port = 0;  // listener port
  double weight = 1.0;
  // Where the listener may bind (JAX_ACCL_PORTS, for a firewall): the first free port of
  // [first_port, last_port]; 0, 0: any (the kernel's ephemeral range).
  uint16_t first_port = 0, last_port = 0;
};

// One row of the job's process table.
struct ProcessEntry {
  int index = 0;
  std::string host;
  std::vector<Rail> rails;
  std::vector<int64_t> devices;  // global device ids
};

// Device `me` of this process (`mine`) and device `peer` of process `theirs`, connected
// for channel space `space` (a group at one epoch, runtime/channel_space.h): channels of
// different spaces never share a connection or a segment.
struct DevicePair {
  int64_t me;
  const ProcessEntry* mine;
  int64_t peer;
  const ProcessEntry* theirs;
  uint64_t space = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual bool can_connect(const DevicePair& pair) const = 0;
  // This device's channels to the peer into *out. A transport that makes both ends here
  // (memory) puts the peer's ends, towards this device, into *reverse.
  virtual Status connect(const DevicePair& pair, const Deadline& deadline,
                         std::vector<std::unique_ptr<Channel>>* out,
                         std::vector<std::unique_ptr<Channel>>* reverse) = 0;
  // Space `space` is gone: drop what was made for it and never claimed.
  virtual void forget(uint64_t space) {}
};

std::unique_ptr<Transport> memory_transport();
// Segments named from the job's secret and the space (shm.h: shm_segment_name).
std::unique_ptr<Transport> shm_transport(std::string secret);

}  // namespace accl
