// The processes of a multi-process job as this process sees them: which process and
// host owns every device, the rails (network interfaces) of every process, and the
// channels between devices, opened on first use by the first transport that can
// connect the pair (transport/transport.h: memory within this process, shm within the
// host, tcp between hosts) and kept.
// The table is filled by jax_accl's bootstrap through jax.distributed's key-value store
// (jax_accl/distributed.py); this file never talks to a coordinator itself.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/wait.h"
#include "transport/channel.h"
#include "transport/tcp_transport.h"
#include "transport/transport.h"

namespace accl {

class World {
 public:
  // Opens one listener per rail and starts accepting. Fills rails[i].port. Without
  // `cross_memory_attach` (JAX_ACCL_CMA=0), large transfers between the processes of a
  // host stay on the shared-memory rings.
  static Status start(int process_index, int process_count, const std::string& secret,
                      const std::string& host, std::vector<Rail>* rails, int stripes_per_rail,
                      bool cross_memory_attach);
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
  uint64_t refused_connections() const;
  // Whether large transfers between processes of this host may use cross-memory attach.
  bool cross_memory_attach() const { return cross_memory_attach_; }

  ~World();

 private:
  World() = default;

  int process_index_ = 0;
  int process_count_ = 1;
  uint64_t generation_ = 0;
  std::string host_;
  bool cross_memory_attach_ = true;
  bool ready_ = false;
  std::vector<ProcessEntry> processes_;
  std::map<int64_t, int> device_process_;
  std::vector<std::unique_ptr<Transport>> transports_;
  TcpTransport* tcp_ = nullptr;  // one of transports_

  std::mutex mutex_;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::unique_ptr<Channel>>> channels_;
};

}  // namespace accl
