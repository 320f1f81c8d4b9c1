// The processes of a multi-process job as this process sees them: which process and
// host owns every device, the rails (network interfaces) of every process, the job's
// secret, and the channels between devices, opened on first use and kept:
//   same process      -> a ring pair in memory;
//   same host         -> a ring pair in POSIX shared memory;
//   different hosts   -> one TCP connection per rail (and per stripe), from the lower
//                        device id to the higher, striped by weight.
// The table is filled by jax_accl's bootstrap through jax.distributed's key-value store
// (jax_accl/distributed.py); this file never talks to a coordinator itself.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

struct Rail {
  std::string name;  // interface name, e.g. "eth1"
  std::string ip;    // this process's address on it
  uint16_t port = 0; // listener port
  double weight = 1.0;
};

struct ProcessEntry {
  int index = 0;
  std::string host;
  std::vector<Rail> rails;
  std::vector<int64_t> devices;  // global device ids
};

class World {
 public:
  // Opens one listener per rail and starts accepting. Fills rails[i].port.
  static Status start(int process_index, int process_count, const std::string& secret,
                      const std::string& host, std::vector<Rail>* rails, int stripes_per_rail);
  static World* get();  // nullptr before start()
  static void stop();

  Status set_processes(std::vector<ProcessEntry> processes);
  int process_index() const { return process_index_; }
  // Distinct for every World started in this process (caches keyed by group use it).
  uint64_t generation() const { return generation_; }
  int process_count() const { return process_count_; }
  // Owner process of global device `device`, or -1.
  int process_of(int64_t device) const;
  const ProcessEntry& process(int index) const { return processes_[index]; }
  bool ready() const { return ready_; }

  // The channels from device `me` (of this process) to device `peer`.
  Status channels(int64_t me, int64_t peer, const Deadline& deadline, std::vector<Channel*>* out);
  uint64_t refused_connections() const { return refused_; }
  // TCP connections per rail and peer: channels() lists a rail's together, rail by rail.
  int stripes_per_rail() const { return stripes_per_rail_; }
  // Whether large transfers between processes of this host may use cross-memory attach.
  bool cross_memory_attach() const { return cross_memory_attach_; }

  ~World();

 private:
  World() = default;
  void accept_loop();
  void handle_connection(int fd);
  Status connect_tcp(int64_t me, int64_t peer, const Deadline& deadline,
                     std::vector<std::unique_ptr<Channel>>* out);

  int process_index_ = 0;
  int process_count_ = 1;
  uint64_t generation_ = 0;
  std::string secret_;
  std::string host_;
  std::vector<Rail> rails_;
  int stripes_per_rail_ = 1;
  bool cross_memory_attach_ = true;
  std::vector<int> listeners_;
  int wake_pipe_[2] = {-1, -1};
  std::thread acceptor_;
  bool ready_ = false;
  std::vector<ProcessEntry> processes_;
  std::map<int64_t, int> device_process_;

  std::mutex mutex_;
  std::condition_variable accepted_cv_;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::unique_ptr<Channel>>> channels_;
  // Accepted connections not yet claimed: (src, dst, rail pair, stripe) -> fd, weight.
  std::map<std::tuple<int64_t, int64_t, int, int>, std::pair<int, double>> accepted_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<int> handshakes_in_flight_{0};
};

// Rails of the lower and higher process of a pair, matched by interface name (the
// rails of rail-optimised clusters have the same names everywhere), else by position.
std::vector<std::pair<int, int>> match_rails(const std::vector<Rail>& lower,
                                             const std::vector<Rail>& higher);

}  // namespace accl
