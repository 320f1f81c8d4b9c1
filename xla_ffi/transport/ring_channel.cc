#include "transport/ring_channel.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "common/wait.h"

namespace accl {

size_t ring_pair_region_bytes() { return sizeof(RingPairHeader) + 2 * kRingBytes; }

RingChannel::RingChannel(void* region, int side, std::shared_ptr<void> keepalive, std::string label,
                         bool check_pid)
    : header_(static_cast<RingPairHeader*>(region)),
      side_(side),
      keepalive_(std::move(keepalive)),
      label_(std::move(label)),
      check_pid_(check_pid) {
  char* rings = static_cast<char*>(region) + sizeof(RingPairHeader);
  out_data_ = rings + side * kRingBytes;
  in_data_ = rings + (1 - side) * kRingBytes;
  out_ = &header_->control[side];
  in_ = &header_->control[1 - side];
}

RingChannel::~RingChannel() {
  if (g_stopping.load(std::memory_order_acquire)) mark_left();
}

void RingChannel::mark_left() {
  if (!check_pid_) return;
  const int pid = header_->pid[side_].load(std::memory_order_acquire);
  if (pid > 0) header_->pid[side_].store(-pid, std::memory_order_release);
}

Status RingChannel::write_some(const void* data, size_t bytes, size_t* done) {
  *done = 0;
  if (header_->poisoned.load(std::memory_order_acquire)) return poisoned_error();
  const uint64_t head = out_->head.load(std::memory_order_relaxed);
  const uint64_t tail = out_->tail.load(std::memory_order_acquire);
  if (head - tail > kRingBytes) return corrupted_error(head, tail);
  size_t n = std::min<size_t>(bytes, kRingBytes - (head - tail));
  const size_t at = head % kRingBytes;
  const size_t first = std::min(n, kRingBytes - at);
  std::memcpy(out_data_ + at, data, first);
  std::memcpy(out_data_, static_cast<const char*>(data) + first, n - first);
  out_->head.store(head + n, std::memory_order_release);
  *done = n;
  return Status::Ok();
}

Status RingChannel::read_some(void* data, size_t bytes, size_t* done) {
  *done = 0;
  if (header_->poisoned.load(std::memory_order_acquire)) return poisoned_error();
  const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  const uint64_t head = in_->head.load(std::memory_order_acquire);
  if (head - tail > kRingBytes) return corrupted_error(head, tail);
  size_t n = std::min<size_t>(bytes, head - tail);
  const size_t at = tail % kRingBytes;
  const size_t first = std::min(n, kRingBytes - at);
  std::memcpy(data, in_data_ + at, first);
  std::memcpy(static_cast<char*>(data) + first, in_data_, n - first);
  in_->tail.store(tail + n, std::memory_order_release);
  *done = n;
  return Status::Ok();
}

namespace {

// Gone, or a zombie nobody has reaped yet (killed children of a launcher stay zombies
// until it waits for them).
bool process_dead(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

}  // namespace

Status RingChannel::check_peer() { return peer_process_ended(); }

Status RingChannel::peer_process_ended() { return peer_ended_status(); }

Status RingChannel::peer_ended_status() const {
  if (!check_pid_) return Status::Ok();
  const int pid = header_->pid[1 - side_].load(std::memory_order_acquire);
  // Either way, jax.distributed's job lost a process: without jax_enable_recoverability
  // it cannot go on (its heartbeat ends it); with it, live_devices() leaves it out.
  constexpr const char* kWhatNow =
      ": restart the job (or, under jax_enable_recoverability, go on with the processes "
      "jax.experimental.multihost_utils.live_devices() names)";
  if (pid < 0) {
    return error(Code::kAborted, "peer process ", -pid, " (", label_,
                 ") left the job (its jax_accl stopped: jax.distributed.shutdown(), an "
                 "exception or an interrupt ending it)",
                 kWhatNow);
  }
  if (pid > 0 && process_dead(pid)) {
    return error(Code::kAborted, "peer process ", pid, " (", label_, ") died", kWhatNow);
  }
  return Status::Ok();
}

void RingChannel::poison(Code reason) {
  // A call ended because this process leaves the job: the side is marked as left before
  // the poison, so the peer that sees the poison names the departure (where the stream
  // was poisoned already, the peer's waits still see it through check_peer).
  if (g_leaving.load(std::memory_order_acquire)) mark_left();
  uint32_t expected = 0;  // the first failure is the one worth reporting
  header_->poisoned.compare_exchange_strong(expected, 1 + static_cast<uint32_t>(reason),
                                            std::memory_order_seq_cst);
}

// The counters live in memory the peer can write: a pair that no ring could hold (more
// unread bytes than the ring has, or a tail past the head) is refused before any copy.
Status RingChannel::corrupted_error(uint64_t head, uint64_t tail) const {
  header_->poisoned.store(1 + static_cast<uint32_t>(Code::kInternal), std::memory_order_release);
  return error(Code::kInternal, label_, ": ring counters out of bounds (head ", head, ", tail ",
               tail, ", ring ", kRingBytes, " bytes): the shared memory was overwritten");
}

Status RingChannel::poisoned_error() const {
  const Code reason = static_cast<Code>(header_->poisoned.load(std::memory_order_acquire) - 1);
  // An abort from a peer that left the job or died: its departure is the reason (a
  // process whose jax_accl stops aborts its calls in flight).
  if (reason == Code::kAborted) {
    if (Status ended = peer_ended_status(); !ended.ok()) return ended;
  }
  if (reason == Code::kMismatch) {
    return error(Code::kMismatch, label_,
                 ": the peer found a mismatch: the ranks are in different calls (shapes, "
                 "dtypes, ops, algorithm or the processes' plans differ between ranks)");
  }
  return error(reason == Code::kTimeout ? Code::kTimeout : Code::kAborted, label_,
               ": the peer aborted this stream after an error of its own (", code_name(reason),
               ")");
}

void make_memory_channels(std::unique_ptr<Channel>* side0, std::unique_ptr<Channel>* side1,
                          const std::string& label0, const std::string& label1) {
  const size_t bytes = ring_pair_region_bytes();
  void* region = std::aligned_alloc(64, bytes);
  if (region == nullptr) throw std::bad_alloc();
  new (region) RingPairHeader{};
  auto* header = static_cast<RingPairHeader*>(region);
  for (auto& c : header->control) {
    c.head.store(0);
    c.tail.store(0);
  }
  std::shared_ptr<void> owner(region, [](void* p) { std::free(p); });
  *side0 = std::make_unique<RingChannel>(region, 0, owner, label0, false);
  *side1 = std::make_unique<RingChannel>(region, 1, owner, label1, false);
}

}  // namespace accl
