#include "algorithms/step_times.h"

namespace accl {

std::atomic<bool>& step_times_enabled() {
  static std::atomic<bool> on{false};
  return on;
}

void StepTimesLink::record(int peer, size_t bytes, Clock::time_point start) {
  const auto end = Clock::now();
  PhaseRecord step{PhaseRecord::kStep, steps_++, chunk_, start, end, bytes};
  step.peer = peer;
  times_->push_back(step);
  last_ = end;
}

Status StepTimesLink::wait_sends() {
  const auto start = Clock::now();
  Status s = inner_.wait_sends();
  record(-1, 0, start);
  return s;
}

Status StepTimesLink::recv(int peer, void* dst, size_t bytes) {
  const auto start = last_;
  Status s = inner_.recv(peer, dst, bytes);
  record(peer, bytes, start);
  return s;
}

Status StepTimesLink::recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                                  const Reduction& reduction) {
  const auto start = last_;
  Status s = inner_.recv_reduce(peer, local, dst, bytes, reduction);
  record(peer, bytes, start);
  return s;
}

}  // namespace accl
