#include "testing/cma_lanes.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "algorithms/algorithm.h"
#include "common/dtype.h"
#include "reduce/reduce.h"
#include "transport/channel_link.h"
#include "transport/cma.h"
#include "transport/ring_channel.h"

namespace accl {
namespace {

// This process's memory as a peer under Yama sees it: every access needs the
// permission. Lane B's probes first wait for `gate` (when given); lane A's fail.
class YamaMemory final : public ProcessMemory {
 public:
  struct Gate {
    std::mutex mutex;
    std::condition_variable cv;
    int waiting = 0;  // ranks waiting to probe
    bool open = false;
  };
  YamaMemory(bool probe_fails, Gate* gate, double timeout_s)
      : probe_fails_(probe_fails), gate_(gate), timeout_s_(timeout_s) {}

  uint64_t handle() const override { return static_cast<uint64_t>(getpid()); }
  Status read(uint64_t peer, uint64_t remote, void* local, size_t bytes) override {
    ACCL_RETURN_IF_ERROR(permitted());
    moved += bytes;
    return cross_memory().read(peer, remote, local, bytes);
  }
  Status write(uint64_t peer, uint64_t remote, const void* local, size_t bytes) override {
    ACCL_RETURN_IF_ERROR(permitted());
    moved += bytes;
    return cross_memory().write(peer, remote, local, bytes);
  }
  Status probe(uint64_t peer, uint64_t remote, void* local, size_t bytes) override {
    if (probe_fails_) return error(Code::kInternal, "a peer in another pid namespace");
    wait_at_gate();
    ACCL_RETURN_IF_ERROR(permitted());
    return cross_memory().probe(peer, remote, local, bytes);
  }

  std::atomic<uint64_t> moved{0};
  std::atomic<uint64_t> refused{0};

 private:
  Status permitted() {
    if (cross_memory_attach_allowed()) return Status::Ok();
    refused.fetch_add(1);
    return error(Code::kInternal, "Operation not permitted (the peer revoked PR_SET_PTRACER)");
  }
  void wait_at_gate() {
    if (gate_ == nullptr) return;
    std::unique_lock<std::mutex> lock(gate_->mutex);
    ++gate_->waiting;
    gate_->cv.notify_all();
    gate_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s_),
                       [&] { return gate_->open; });
  }

  const bool probe_fails_;
  Gate* const gate_;
  const double timeout_s_;
};

// One lane: a thread per rank over memory channels, each rank an all-reduce by
// cross-memory attach (probing first) of data[r] in place.
class Lane {
 public:
  Lane(const char* name, std::vector<std::vector<int32_t>> data, YamaMemory* memory,
       double timeout_s)
      : name_(name), data_(std::move(data)), memory_(memory), timeout_s_(timeout_s) {
    const int n = static_cast<int>(data_.size());
    mesh_ = make_channel_mesh(n, 1, [](int, int, auto* x, auto* y) { make_memory_channels(x, y); });
    usable_.assign(n, 0);
    status_.resize(n);
  }
  void start() {
    for (size_t r = 0; r < data_.size(); ++r) threads_.emplace_back([this, r] { run(r); });
  }
  void join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  bool usable() const {
    for (char u : usable_) {
      if (!u) return false;
    }
    return true;
  }
  const std::vector<std::vector<int32_t>>& data() const { return data_; }
  void errors(std::vector<std::string>* out) const {
    for (size_t r = 0; r < status_.size(); ++r) {
      if (!status_[r].ok()) out->push_back(str_cat(name_, " rank ", r, ": ", status_[r].message()));
    }
  }

 private:
  void run(size_t r) {
    ChannelLink link(static_cast<int>(r), channels_of(mesh_, static_cast<int>(r)), 7,
                     str_cat("cma lane ", name_), Deadline::after_seconds(timeout_s_));
    const Reduction sum{reduce_kernel(DType::kI32, ReduceOp::kSum), 4,
                        reduce_many_kernel(DType::kI32, ReduceOp::kSum)};
    bool usable = false;
    int32_t* buffer = data_[r].data();
    status_[r] = allreduce_cma(link, *memory_, {Buffers{buffer, buffer, data_[r].size(), 4, 0}},
                               sum, /*probe=*/true, &usable);
    usable_[r] = usable;
  }

  const char* name_;
  std::vector<std::vector<int32_t>> data_;
  YamaMemory* memory_;
  double timeout_s_;
  ChannelMesh mesh_;
  std::vector<char> usable_;
  std::vector<Status> status_;
  std::vector<std::thread> threads_;
};

std::vector<std::vector<int32_t>> inputs(int ranks, size_t count) {
  std::vector<std::vector<int32_t>> data(ranks, std::vector<int32_t>(count));
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<int32_t>((i * 7 + r * 13) % 1000);
  }
  return data;
}

// Lane A alone, to its end.
bool run_lane_a(int ranks, size_t count, double timeout_s, CmaLanesReport* report) {
  YamaMemory failing(/*probe_fails=*/true, nullptr, timeout_s);
  Lane a("A", inputs(ranks, count), &failing, timeout_s);
  a.start();
  a.join();
  a.errors(&report->errors);
  return a.usable();
}

}  // namespace

CmaLanesReport run_cma_lanes(int ranks, size_t count, double timeout_s) {
  CmaLanesReport report;
  report.allowed_before = cross_memory_attach_allowed();
  report.lane_a_usable = run_lane_a(ranks, count, timeout_s, &report);
  report.allowed_after_lone_lane = cross_memory_attach_allowed();

  // Lane B's ranks inside their call, waiting to probe, while lane A runs and ends.
  YamaMemory::Gate gate;
  YamaMemory gated(/*probe_fails=*/false, &gate, timeout_s);
  const std::vector<std::vector<int32_t>> given = inputs(ranks, count);
  Lane b("B", given, &gated, timeout_s);
  b.start();
  {
    std::unique_lock<std::mutex> lock(gate.mutex);
    gate.cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                     [&] { return gate.waiting == ranks; });
  }
  report.lane_a_usable = run_lane_a(ranks, count, timeout_s, &report) || report.lane_a_usable;
  report.allowed_while_b_waits = cross_memory_attach_allowed();
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    gate.open = true;
  }
  gate.cv.notify_all();
  b.join();
  b.errors(&report.errors);
  report.lane_b_usable = b.usable();
  report.lane_b_bytes = gated.moved.load();
  report.refused = gated.refused.load();
  std::vector<int32_t> want(count, 0);
  for (const auto& d : given) {
    for (size_t i = 0; i < count; ++i) want[i] += d[i];
  }
  report.lane_b_exact = true;
  for (const auto& d : b.data()) report.lane_b_exact &= d == want;
  report.allowed_after = cross_memory_attach_allowed();
  return report;
}

}  // namespace accl
