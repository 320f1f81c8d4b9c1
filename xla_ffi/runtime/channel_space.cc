#include "runtime/channel_space.h"

#include <chrono>

#include "common/hash.h"

namespace accl {

uint64_t channel_space_id(const std::vector<int64_t>& devices, uint64_t lane, uint32_t epoch) {
  Fnv64 h;
  for (int64_t d : devices) h.mix(static_cast<uint64_t>(d));
  return h.mix(devices.size()).mix(lane).mix(epoch).value();
}

ChannelSpace::~ChannelSpace() {
  channels_.clear();
  if (maker_ != nullptr) maker_->forget(id_);
}

void ChannelSpace::poison_all(Code reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [pair, list] : channels_) {
    for (auto& c : list) c->poison(reason);
  }
}

Status ChannelSpace::peer_process_ended() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [pair, list] : channels_) {
    for (auto& c : list) ACCL_RETURN_IF_ERROR(c->peer_process_ended());
  }
  return Status::Ok();
}

Status ChannelSpace::channels(int64_t me, int64_t peer, const Deadline& deadline,
                              std::vector<Channel*>* out) {
  out->clear();
  const auto key = std::make_pair(me, peer);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = channels_.find(key);
    if (it != channels_.end()) {
      for (auto& c : it->second) out->push_back(c.get());
      return Status::Ok();
    }
  }
  if (maker_ == nullptr) return error(Code::kInternal, "a planning communicator has no channels");
  std::vector<std::unique_ptr<Channel>> made, reverse;
  ACCL_RETURN_IF_ERROR(maker_->connect(me, peer, id_, deadline, &made, &reverse));
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = channels_[key];
  if (slot.empty()) {  // else another thread connected the pair first (memory): use its
    slot = std::move(made);
    if (!reverse.empty()) channels_[{peer, me}] = std::move(reverse);
  }
  for (auto& c : slot) out->push_back(c.get());
  return Status::Ok();
}

bool ChannelSpace::plans_checked() {
  std::lock_guard<std::mutex> lock(verdict_mutex_);
  return checked_;
}

void ChannelSpace::set_plans_agree(const Status& verdict) {
  {
    std::lock_guard<std::mutex> lock(verdict_mutex_);
    if (checked_) return;
    checked_ = true;
    verdict_ = verdict;
  }
  verdict_set_.notify_all();
}

Status ChannelSpace::plans_agree(const std::string& where, const Deadline& deadline) {
  std::unique_lock<std::mutex> lock(verdict_mutex_);
  // In short waits, so that an abort (which ends the deadline) is seen promptly.
  while (!checked_) {
    if (deadline.expired()) {
      return deadline.ended(where, "waiting for this process's check of the processes' plans");
    }
    verdict_set_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return verdict_;
}

}  // namespace accl
