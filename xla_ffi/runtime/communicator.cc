#include "runtime/communicator.h"

#include <algorithm>
#include <chrono>
#include <mutex>

namespace accl {

namespace {
std::mutex& agreement_mutex() {
  static std::mutex m;
  return m;
}
AgreeOnEpoch& agreement() {
  static AgreeOnEpoch agree;
  return agree;
}
}  // namespace

void set_epoch_agreement(AgreeOnEpoch agree) {
  std::lock_guard<std::mutex> lock(agreement_mutex());
  agreement() = std::move(agree);
}

Status Communicator::make(ChannelMaker* maker, int process, const std::vector<int64_t>& devices,
                          uint64_t lane, const std::vector<RankPlace>& places, int rails,
                          std::shared_ptr<Communicator>* out) {
  auto made = std::make_shared<Communicator>();
  ACCL_RETURN_IF_ERROR(GroupLayout::make(places, &made->layout_));
  made->maker_ = maker;
  made->process_ = process;
  made->devices_ = devices;
  made->lane_ = lane;
  for (const RankPlace& p : places) made->processes_.push_back(p.process);
  std::sort(made->processes_.begin(), made->processes_.end());
  made->processes_.erase(std::unique(made->processes_.begin(), made->processes_.end()),
                         made->processes_.end());
  made->rails_ = std::max(1, rails);
  made->space_ = std::make_shared<ChannelSpace>(maker, channel_space_id(devices, lane, 0), 0);
  *out = std::move(made);
  return Status::Ok();
}

Status Communicator::begin_call(int64_t device, const std::string& where, const Deadline& deadline,
                                uint64_t* call, std::shared_ptr<ChannelSpace>* space) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t& next_call = next_call_[device];
  next_call = std::max(next_call, first_call_);
  const uint64_t c = *call = next_call++;
  if (c < epoch_start_) {
    return error(Code::kAborted, where, ": call ", c, " of this group failed on another rank, ",
                 "and the group has recovered since (epoch ", space_->epoch(), " began at call ",
                 epoch_start_, ")");
  }
  if (failed_call_ == kNoCall || c <= failed_call_) {
    *space = space_;
    return Status::Ok();
  }
  // A peer process that ended (a dead one seen through shared memory) never announces:
  // waiting for it in the agreement would hold every later call to its deadline (XLA
  // makes the next call of a collective after one failed: the next operand, another
  // thunk). Every call fails at once instead, the epoch left as it is.
  if (Status ended = space_->peer_process_ended(); !ended.ok()) {
    return error(ended.code(), where, ": call ", failed_call_,
                 " of this group failed, and the group cannot recover: ", ended.message(),
                 ", and a process that ended never rejoins: restart the job");
  }
  AgreeOnEpoch agree;
  {
    std::lock_guard<std::mutex> hook(agreement_mutex());
    agree = agreement();
  }
  const uint32_t next = space_->epoch() + 1;
  uint64_t start = c;
  Status s = agree ? agree(EpochAgreement{channel_space_id(devices_, lane_, 0), next, failed_call_,
                                          c, processes_, process_, deadline},
                           &start)
                   : error(Code::kAborted, "no way to agree on a new epoch is installed");
  if (!s.ok()) {
    return error(s.code(), where, ": call ", failed_call_,
                 " of this group failed, and recovering from it (epoch ", next,
                 ") failed: ", s.message());
  }
  space_ = std::make_shared<ChannelSpace>(maker_, channel_space_id(devices_, lane_, next), next);
  epoch_start_ = start;
  failed_call_ = kNoCall;
  ++recoveries_;
  if (c < start) {  // a peer is further on: this call's step happened there without us
    return error(Code::kAborted, where, ": call ", c, " is skipped: the group recovered and ",
                 "goes on at call ", start, ", which a peer process is already in (it came ",
                 "late, or it left the recovery of an earlier call by its deadline)");
  }
  *space = space_;
  return Status::Ok();
}

Status Communicator::wait_turn(int64_t device, uint64_t call, const std::string& where,
                               const Deadline& deadline) {
  std::unique_lock<std::mutex> lock(turn_mutex_);
  turn_[device] = std::max(turn_[device], first_turn_);
  while (turn_[device] != call) {
    if (deadline.expired()) {
      return deadline.ended(where, str_cat("waiting for call ", turn_[device],
                                           " of the same op on this device to end"));
    }
    turn_changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return Status::Ok();
}

void Communicator::end_turn(int64_t device, uint64_t call) {
  {
    std::lock_guard<std::mutex> lock(turn_mutex_);
    uint64_t& turn = turn_[device];
    turn = std::max(turn, first_turn_);
    std::set<uint64_t>& ended = finished_[device];
    ended.insert(call);
    while (ended.erase(turn) > 0) ++turn;
  }
  turn_changed_.notify_all();
}

void Communicator::call_failed(uint64_t call, const ChannelSpace& space) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (&space == space_.get()) failed_call_ = std::min(failed_call_, call);
}

uint64_t Communicator::recoveries() const { return recoveries_.load(); }

Communicator::Position Communicator::position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t next = first_call_;
  for (const auto& [device, n] : next_call_) next = std::max(next, n);
  return Position{space_->epoch(), next, failed_call_};
}

void Communicator::align(uint64_t next_call, uint64_t failed_call) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    first_call_ = std::max(first_call_, next_call);
    for (auto& [device, n] : next_call_) n = std::max(n, first_call_);
    if (failed_call != kNoCall && failed_call >= epoch_start_) {
      failed_call_ = std::min(failed_call_, failed_call);
    }
  }
  {
    std::lock_guard<std::mutex> lock(turn_mutex_);
    first_turn_ = std::max(first_turn_, next_call);
    for (auto& [device, turn] : turn_) turn = std::max(turn, first_turn_);
    for (auto& [device, ended] : finished_)
      ended.erase(ended.begin(), ended.lower_bound(first_turn_));
  }
  turn_changed_.notify_all();
}

std::optional<bool> Communicator::cross_memory_usable() const {
  const int known = cross_memory_.load();
  if (known < 0) return std::nullopt;
  return known == 1;
}

void Communicator::set_cross_memory_usable(bool usable) { cross_memory_.store(usable ? 1 : 0); }

CallPlan Communicator::plan(int rank, size_t bytes, Algorithm forced, bool cma,
                            Collective collective, int chunks) const {
  PlanRequest request;
  request.collective = collective;
  request.bytes = bytes;
  request.forced = forced;
  // Where the group learnt that cross-memory attach is refused between its processes,
  // its calls plan without it (no link opened to find that out again).
  request.cma = cma && cross_memory_.load() != 0;
  request.rails = rails_;
  request.chunks = chunks;
  return plan_call(layout_, rank, request, cost_model());
}

}  // namespace accl
