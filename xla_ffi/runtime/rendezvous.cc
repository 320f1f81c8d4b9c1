#include "runtime/rendezvous.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <vector>
#include "runtime/stall.h"

namespace accl {

struct Rendezvous::PendingCall {
  PendingCall(int size, const std::string& label, size_t bytes)
      : exchange(std::make_shared<LocalExchange>(size, label, bytes)),
        signatures(size),
        present(size, 0) {}
  std::shared_ptr<LocalExchange> exchange;
  std::vector<Signature> signatures;  // written under mutex_ before `arrived` is bumped
  std::vector<uint8_t> present;
  Flag arrived;
  int joined = 0;          // ranks that registered (or left), under mutex_
  bool abandoned = false;  // a rank timed out waiting; late arrivals fail at once
  Status left;             // why a rank left without joining (leave), under mutex_
};

namespace {
// Calls waiting for ranks in every rendezvous of the process, abandoned ones not counted.
std::atomic<int64_t> g_pending{0};

// Added to `arrived`, once, by the first rank that leaves (the one that sets `left`):
// every wait for the whole group ends. Once only, so that the count cannot wrap.
constexpr uint32_t kLeftMark = 1u << 30;

}  // namespace

std::shared_ptr<Rendezvous::PendingCall>& Rendezvous::slot_of(const CallKey& key, int size,
                                                              const std::string& label,
                                                              size_t bytes) {
  auto& slot = calls_[key];
  if (!slot) {
    try {
      slot = std::make_shared<PendingCall>(size, label, bytes);
    } catch (...) {
      calls_.erase(key);
      throw;
    }
    g_pending.fetch_add(1, std::memory_order_relaxed);
  }
  return slot;
}

// The call's entry goes (under mutex_); it no longer counts as pending.
void Rendezvous::drop(const CallKey& key, PendingCall& call) {
  if (!call.abandoned) g_pending.fetch_sub(1, std::memory_order_relaxed);
  calls_.erase(key);
}

void Rendezvous::abandon(PendingCall& call) {
  if (call.abandoned) return;
  call.abandoned = true;
  g_pending.fetch_sub(1, std::memory_order_relaxed);
}

bool Rendezvous::count_in(const CallKey& key, PendingCall& call, int rank) {
  if (rank < 0 || rank >= static_cast<int>(call.present.size()) || call.present[rank]) return false;
  call.present[rank] = 1;
  if (++call.joined == static_cast<int>(call.present.size())) drop(key, call);
  return true;
}

bool Rendezvous::record_left(PendingCall& call, int rank, const Status& why) {
  if (!call.left.ok()) return false;
  call.left = error(why.code(), "rank ", rank, ": ", why.message());
  return true;
}

Rendezvous::Rendezvous() = default;

Rendezvous::~Rendezvous() {
  for (auto& [key, call] : calls_) {
    if (!call->abandoned) g_pending.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::string missing_ranks(const std::vector<uint8_t>& present) {
  std::string out;
  for (size_t r = 0; r < present.size(); ++r) {
    if (!present[r]) out += str_cat(out.empty() ? "" : ", ", r);
  }
  return out;
}

Status missing_ranks_end(const std::string& who, const Deadline& deadline,
                         const std::vector<uint8_t>& present, const std::vector<int64_t>* devices,
                         int64_t run_id, Clock::time_point since) {
  if (deadline.expired()) {
    return deadline.ended(
        who, str_cat("waiting for ranks [", missing_ranks(present), "] to join the call"));
  }
  if (devices != nullptr && xla_launch_stalled(*devices, present, run_id, since)) {
    return error(Code::kAborted, who, ": ", stall_message(*devices, present, run_id, since));
  }
  return Status::Ok();
}

OneShotTable& Rendezvous::one_shot_table(std::shared_ptr<OneShotTable> (*make)()) {
  if (OneShotTable* table = one_shot_.load(std::memory_order_acquire)) return *table;
  std::lock_guard<std::mutex> lock(mutex_);
  if (one_shot_owner_ == nullptr) {
    one_shot_owner_ = make();
    one_shot_.store(one_shot_owner_.get(), std::memory_order_release);
  }
  return *one_shot_owner_;
}

Status Rendezvous::join(const CallKey& key, int rank, int size, const Signature& signature,
                        const std::string& label, const Deadline& deadline,
                        const std::vector<Buffers>& segments,
                        std::shared_ptr<LocalExchange>* exchange,
                        const std::vector<int64_t>* devices) {
  size_t bytes = 0;
  for (const Buffers& b : segments) bytes += b.count * b.elem_size;
  std::shared_ptr<PendingCall> call;
  ACCL_RETURN_IF_ERROR(enter(key, rank, size, signature, label, bytes, &call));
  try {
    call->exchange->publish(rank, segments);
  } catch (const std::exception& e) {  // registered, never to arrive: the others go
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      first = record_left(*call, rank, error(Code::kInternal, e.what()));
    }
    if (first) call->arrived.fetch_add_and_wake(kLeftMark);
    throw;
  }
  call->arrived.fetch_add_and_wake(1);
  ACCL_RETURN_IF_ERROR(wait_for_all(*call, rank, size, label, deadline, key.run_id, devices));
  *exchange = call->exchange;
  return Status::Ok();
}

Status Rendezvous::enter(const CallKey& key, int rank, int size, const Signature& signature,
                         const std::string& label, size_t bytes,
                         std::shared_ptr<PendingCall>* out) {
  std::unique_lock<std::mutex> lock(mutex_);
  try {
    *out = slot_of(key, size, label, bytes);
  } catch (const std::exception& e) {  // never registered: leave, so nobody waits
    lock.unlock();
    leave(key, rank, size, label, error(Code::kInternal, e.what()));
    throw;
  }
  PendingCall& call = **out;
  if (!call.left.ok()) {
    const Status left = call.left;
    count_in(key, call, rank);
    return error(Code::kAborted, "rank ", rank, " of ", label,
                 ": a sibling left the call: ", left.message());
  }
  if (call.abandoned) {
    return error(Code::kTimeout, "rank ", rank, " of ", label,
                 ": arrived after its peers had given up waiting (timeout)");
  }
  if (static_cast<int>(call.present.size()) != size) {
    return error(Code::kMismatch, "rank ", rank, " of ", label, ": group size ", size,
                 " differs from ", call.present.size(), " given by another rank");
  }
  if (call.present[rank]) {
    return error(Code::kInternal, "rank ", rank, " of ", label,
                 ": joined the same collective twice");
  }
  call.signatures[rank] = signature;
  count_in(key, call, rank);
  return Status::Ok();
}

Status Rendezvous::wait_for_all(PendingCall& call, int rank, int size, const std::string& label,
                                const Deadline& deadline, int64_t run_id,
                                const std::vector<int64_t>* devices) {
  const auto all_here = [&](uint32_t n) { return n >= static_cast<uint32_t>(size); };
  const auto since = Clock::now();
  for (;;) {
    // In slices of a second where the devices are known: between them, whether the
    // missing ranks are devices XLA:CPU never started on this launch (runtime/stall.h).
    Deadline slice = deadline;
    if (devices != nullptr)
      slice.at = std::min(deadline.at, Clock::now() + std::chrono::seconds(1));
    if (call.arrived.wait(all_here, slice, nullptr).ok() || call.arrived.load() >= kLeftMark) {
      break;
    }
    std::vector<uint8_t> present;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      present = call.present;
    }
    // (Nothing is allocated before the first slice ends: a rank that has arrived must
    // not throw, its siblings reading its buffers.)
    const std::string who = str_cat("rank ", rank, " of ", label);
    const Status ended = missing_ranks_end(who, deadline, present, devices, run_id, since);
    if (ended.ok()) continue;
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The missing ranks may have arrived since the look: then the call goes on.
      if (call.arrived.load() >= static_cast<uint32_t>(size)) continue;
      abandon(call);  // no longer pending (its ranks may never come); late arrivals fail
      // A stall fails the others at once too (a timeout is each rank's own).
      if (!deadline.expired())
        first = record_left(call, rank, Status(ended.code(), message_without(ended, who)));
    }
    if (first) call.arrived.fetch_add_and_wake(kLeftMark);
    return ended;
  }
  if (call.arrived.load() >= kLeftMark) {
    std::lock_guard<std::mutex> lock(mutex_);
    return error(Code::kAborted, "rank ", rank, " of ", label,
                 ": a sibling left the call: ", call.left.message());
  }
  // Every rank checks every signature, so a mismatch fails on all ranks alike.
  for (int r = 0; r < size; ++r) {
    if (!(call.signatures[r] == call.signatures[0])) {
      return error(Code::kMismatch, "rank ", rank, " of ", label, ": ranks disagree on the ",
                   collective_name(call.signatures[0].collective), ": rank 0 calls ",
                   describe(call.signatures[0]), " but rank ", r, " calls ",
                   describe(call.signatures[r]));
    }
  }
  return Status::Ok();
}

void Rendezvous::leave(const CallKey& key, int rank, int size, const std::string& label,
                       const Status& why) {
  std::shared_ptr<PendingCall> call;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    call = slot_of(key, size, label, 0);
    if (!count_in(key, *call, rank)) return;  // (our pointer outlives a dropped entry)
    first = record_left(*call, rank, why);
  }
  if (first) call->arrived.fetch_add_and_wake(kLeftMark);
}

size_t pending_calls() { return static_cast<size_t>(g_pending.load(std::memory_order_relaxed)); }

int64_t fresh_op_id() {
  static std::atomic<int64_t> next{int64_t{1} << 40};
  return next.fetch_add(1);
}

}  // namespace accl
