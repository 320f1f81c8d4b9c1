// The processes of a multi-process job as this process sees them: which process and
// host owns every device, the rails (network interfaces) of every process, the
// transports that connect two devices (transport/transport.h: memory within this
// process, shm within the host, tcp between hosts; the first that can connect a pair
// does) and the communicator of every group, which owns its channels
// (runtime/communicator.h).
// The table is filled by jax_accl's bootstrap through jax.distributed's key-value store
// (jax_accl/distributed.py); this file never talks to a coordinator itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/wait.h"
#include "runtime/channel_space.h"
#include "runtime/communicator.h"
#include "transport/channel.h"
#include "transport/cma.h"
#include "transport/tcp_transport.h"
#include "transport/transport.h"

namespace accl {

class Communicator;

class World : public ChannelMaker {
 public:
  // Opens one listener per rail and starts accepting. Fills rails[i].port. Without
  // `cross_memory_attach` (JAX_ACCL_CMA=0), large transfers between the processes of a
  // host stay on the shared-memory rings.
  static Status start(int process_index, int process_count, const std::string& secret,
                      const std::string& host, std::vector<Rail>* rails, int stripes_per_rail,
                      bool cross_memory_attach);
  // The World, held for as long as the caller uses it (a call holds it to its end);
  // nullptr before start() and after stop().
  static std::shared_ptr<World> get();
  // Shutdown order: nobody gets the World any more; the calls in flight are ended (as
  // by abort(), their errors saying that jax_accl stopped) and waited for, up to
  // `wait_s`; then the transports close and the segments go. A call still running
  // then (stuck outside any wait of jax_accl's) keeps the World alive, and the last
  // such call destroys it when it ends: it is never destroyed under a call. False in
  // that case.
  // `leaving`: the process leaves the job (g_leaving), rather than restarting.
  static bool stop(double wait_s = 10.0, bool leaving = true);

  // The job as jax.distributed knows it: this process's index, the process count and
  // the collective timeout (JAX_ACCL_TIMEOUT_S), told before the World starts (XLA's
  // MPI_Init asks for them while JAX creates its CPU backend, which starting the World
  // needs); false until told.
  struct Job {
    int process_index = 0;
    int process_count = 0;
    double timeout_s = kDefaultCallTimeoutSeconds;
  };
  static void announce_job(const Job& job);
  static bool announced_job(Job* job);

  Status set_processes(std::vector<ProcessEntry> processes);
  int process_index() const { return process_index_; }
  int process_count() const { return process_count_; }
  // Owner process of global device `device`, or -1.
  int process_of(int64_t device) const;
  const ProcessEntry& process(int index) const { return processes_[index]; }
  bool ready() const { return ready_.load(std::memory_order_acquire); }

  // ChannelMaker: channels through the first transport that can connect the pair.
  Status connect(int64_t me, int64_t peer, uint64_t space, const Deadline& deadline,
                 std::vector<std::unique_ptr<Channel>>* out,
                 std::vector<std::unique_ptr<Channel>>* reverse) override;
  void forget(uint64_t space) override;
  // The communicator of lane `lane` of the group `devices` (global ids in rank order),
  // made on first use: each lane has channels of its own, so lanes run concurrently.
  // Asked once per group (runtime/group.h keeps it), not per call: lookups() counts.
  Status communicator(const std::vector<int64_t>& devices, uint64_t lane, const std::string& label,
                      std::shared_ptr<Communicator>* out);
  uint64_t communicator_lookups() const { return lookups_.load(std::memory_order_relaxed); }
  uint64_t refused_connections() const;
  // Every lane's position in this process (jax_accl.recover(); Communicator::align): its
  // id (the same in every process), the group's processes, and where this process is.
  struct LanePosition {
    uint64_t id;
    std::vector<int> processes;
    Communicator::Position position;
  };
  std::vector<LanePosition> lane_positions();
  // Aligns lane `id` to the call the group's processes agreed on (Communicator::align);
  // a lane this process has not made yet is aligned when it is made.
  void align_lane(uint64_t id, uint64_t next_call, uint64_t failed_call);
  // Epochs the communicators of this process started after a failed call.
  uint64_t recoveries();
  // Whether large transfers between processes of this host may use cross-memory attach.
  bool cross_memory_attach() const { return cross_memory_attach_; }
  // A rank's first probe of cross-memory attach in its group found it `usable` or not:
  // once one did, the World keeps the ptrace permission (transport/cma.h) until it is
  // destroyed (jax.distributed.shutdown(), or the last call still holding it ends);
  // otherwise only the calls that probe or copy hold it, each while it runs.
  void cross_memory_probed(bool usable);
  // Calls planned for cross-memory attach that ran another schedule, having found it
  // refused (each group's first such call: its probe; later calls plan without it).
  void cross_memory_fell_back() { fallbacks_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t cross_memory_fallbacks() const { return fallbacks_.load(std::memory_order_relaxed); }

  ~World() override;

 private:
  World() = default;

  int process_index_ = 0;
  int process_count_ = 1;
  std::string host_;
  bool cross_memory_attach_ = true;
  // Set once the process table is written (release): a thread that sees it set reads a
  // complete table, which nothing writes again.
  std::atomic<bool> ready_{false};
  std::vector<ProcessEntry> processes_;
  std::map<int64_t, int> device_process_;
  std::vector<std::unique_ptr<Transport>> transports_;
  TcpTransport* tcp_ = nullptr;  // one of transports_
  std::once_flag cross_memory_kept_once_;
  std::unique_ptr<CrossMemoryPermission> cross_memory_kept_;  // once a group found it usable

  std::mutex mutex_;
  // After the transports: destroyed first, their channel spaces with them.
  std::atomic<uint64_t> lookups_{0};    // communicator() calls
  std::atomic<uint64_t> fallbacks_{0};  // cross_memory_fell_back() calls
  std::map<std::pair<std::vector<int64_t>, uint64_t>, std::shared_ptr<Communicator>> communicators_;
  // By lane id: (next call, failed call) agreed for a lane not made yet.
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> aligned_before_made_;
};

}  // namespace accl
