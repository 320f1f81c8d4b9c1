// The steps of a schedule between hosts, timed: a Link that forwards every call to
// another and records, for each receive, the time from the previous receive's end (or
// the first call) to its own end, its peer and bytes, and for each wait for sends the
// time it waited. Where step_times_enabled() (bench --steps), the hierarchy runs the step
// between hosts over it, so the runtime's trace shows where each step's time goes
// (runtime/call_record.cc: "step between hosts k from p", "step between hosts k sends").
#pragma once

#include <atomic>

#include "algorithms/hierarchical.h"
#include "transport/forwarding_link.h"

namespace accl {

std::atomic<bool>& step_times_enabled();

class StepTimesLink : public ForwardingLink {
 public:
  // Records join `times` as PhaseRecord::kStep of chunk `chunk`.
  StepTimesLink(Link& inner, int chunk, HierarchicalTimes* times)
      : ForwardingLink(inner), chunk_(chunk), times_(times), last_(Clock::now()) {}
  Status wait_sends() override;
  Status recv(int peer, void* dst, size_t bytes) override;
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override;

 private:
  void record(int peer, size_t bytes, Clock::time_point start);

  int chunk_;
  HierarchicalTimes* times_;
  Clock::time_point last_;
  int steps_ = 0;
};

}  // namespace accl
