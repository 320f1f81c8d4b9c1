// A pair of single-producer single-consumer byte rings in memory shared by the two
// ends: a POSIX shared-memory segment between processes of one host, or plain heap
// memory between two device threads of one process. Each end writes one ring and
// reads the other; head and tail are free-running byte counters.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/channel.h"

namespace accl {

struct alignas(64) RingControl {
  std::atomic<uint64_t> head;  // bytes ever written (producer)
  char pad0[56];
  std::atomic<uint64_t> tail;  // bytes ever read (consumer)
  char pad1[56];
};

// Layout of the shared region: header, then two rings (side 0 -> 1, side 1 -> 0).
struct alignas(64) RingPairHeader {
  std::atomic<uint32_t> magic;
  std::atomic<uint32_t> attached;     // ends that have mapped the region
  std::atomic<int32_t> pid[2];        // owner process of each side
  std::atomic<uint32_t> poisoned;     // 1 + the Code of the failure, set by an end that failed
  std::atomic<uint32_t> touching[2];  // side s may be reading or writing side 1 - s's buffers
  char pad[36];
  RingControl control[2];
};

constexpr size_t kRingBytes = 4 << 20;
size_t ring_pair_region_bytes();

// One end (`side`, 0 or 1) of a ring pair living at `region`. `keepalive` owns the
// memory (a mapping or a heap block); `peer_pid` is checked while waiting (shm only).
class RingChannel : public Channel {
 public:
  RingChannel(void* region, int side, std::shared_ptr<void> keepalive, std::string label,
              bool check_pid);
  // An end that closes because its process's jax_accl stops (g_stopping: the process
  // leaves the job) marks its side's pid negative: the peer's waits end at once, naming
  // it as gone, instead of waiting for a process that is still alive but left.
  ~RingChannel() override;
  Status write_some(const void* data, size_t bytes, size_t* done) override;
  Status read_some(void* data, size_t bytes, size_t* done) override;
  Status check_peer() override;
  Status peer_process_ended() override;
  void poison(Code reason) override;
  std::string describe() const override { return label_; }
  void set_touching_peer(bool touching) override {
    header_->touching[side_].store(touching ? 1 : 0, std::memory_order_seq_cst);
  }
  bool peer_touching() const override {
    return header_->touching[1 - side_].load(std::memory_order_seq_cst) != 0;
  }
  Status poisoned_status() const override {
    return header_->poisoned.load(std::memory_order_seq_cst) != 0 ? poisoned_error() : broken;
  }

 private:
  Status poisoned_error() const;
  Status peer_ended_status() const;  // the peer's process left the job or died
  void mark_left();                  // this side's pid negative: its process left
  Status corrupted_error(uint64_t head, uint64_t tail) const;
  RingPairHeader* header_;
  char* out_data_;
  char* in_data_;
  RingControl* out_;
  RingControl* in_;
  int side_;
  std::shared_ptr<void> keepalive_;
  std::string label_;
  bool check_pid_;
};

// Heap ring pair for two device threads of one process: returns both ends, each
// described as its label says (errors name the peer by it).
void make_memory_channels(std::unique_ptr<Channel>* side0, std::unique_ptr<Channel>* side1,
                          const std::string& label0 = "memory",
                          const std::string& label1 = "memory");

}  // namespace accl
