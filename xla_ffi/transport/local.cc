#include "transport/local.h"

#include <cstring>
#include <mutex>

#include "common/cpu.h"
#include "common/health.h"

namespace accl {
namespace {
constexpr uint32_t kWithdrawn = 0, kPosted = 1, kReading = 2, kDone = 3;
uint32_t state_of(uint32_t seq, uint32_t phase) { return seq * 4 + phase; }
std::mutex g_abort_mutex;  // guards abort_reason_ of every exchange (rare path)
}  // namespace

LocalExchange::LocalExchange(int size, std::string label, size_t bytes)
    : size_(size),
      label_(std::move(label)),
      mailboxes_(static_cast<size_t>(size) * size),
      inputs_(size),
      outputs_(size) {
  if (size > 1 && bytes <= kEagerBytes) {
    staging_.resize(bytes * size);
    staged_bytes_ = bytes;
    staged_ = true;
  }
}

void LocalExchange::publish(int rank, const std::vector<Buffers>& segments) {
  // The staging area is sized by the rank that created the exchange; a rank whose size
  // differs is not copied (the signature check then fails the call before any read).
  size_t bytes = 0;
  for (const Buffers& b : segments) bytes += b.count * b.elem_size;
  const bool stage = staged_ && bytes == staged_bytes_;
  char* slot = stage ? staging_.data() + static_cast<size_t>(rank) * staged_bytes_ : nullptr;
  inputs_[rank].resize(segments.size());
  outputs_[rank].resize(segments.size());
  for (size_t k = 0; k < segments.size(); ++k) {
    const Buffers& b = segments[k];
    inputs_[rank][k] = b.in;
    outputs_[rank][k] = b.out;
    if (stage) {
      if (b.count > 0) std::memcpy(slot, b.in, b.count * b.elem_size);
      inputs_[rank][k] = slot;
      slot += b.count * b.elem_size;
    }
  }
}

void LocalExchange::abort(int rank, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(g_abort_mutex);
    if (aborted_.load()) return;
    abort_rank_.store(rank);
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  for (auto& box : mailboxes_) box.state.wake_all();
}

std::string LocalExchange::abort_reason() const {
  std::lock_guard<std::mutex> lock(g_abort_mutex);
  return str_cat("rank ", abort_rank_.load(), " failed: ", abort_reason_);
}

LocalLink::LocalLink(std::shared_ptr<LocalExchange> exchange, int rank, Deadline deadline)
    : exchange_(std::move(exchange)),
      rank_(rank),
      deadline_(deadline),
      sent_(exchange_->size(), 0),
      received_(exchange_->size(), 0) {}

LocalLink::~LocalLink() {
  if (!failed_) {
    // Normal exits have waited for their sends; make sure no reader is left behind.
    Status ignored = wait_sends();
    (void)ignored;
  }
  Flag& departed = exchange_->departed();
  departed.fetch_add_and_wake(1);
  if (!failed_) return;
  // The fence: the others see the abort at their next wait and leave; until they have,
  // they may still read this rank's input or write its output in place.
  const uint32_t all = static_cast<uint32_t>(size());
  Status s = departed.wait([all](uint32_t v) { return v >= all; },
                           Deadline::unabortable_after(kDrainSeconds), nullptr);
  if (!s.ok()) {
    mark_process_unusable(str_cat(where(), ": after a failed call, ", all - departed.load(),
                                  " device thread(s) had not left it after ", kDrainSeconds,
                                  " s and may still touch this rank's buffers"));
  }
}

std::string LocalLink::where() const {
  return str_cat("rank ", rank_, " of ", exchange_->size(), " in ", exchange_->label());
}

Status LocalLink::wait_state(LocalExchange::Mailbox& box, uint32_t want, int peer,
                             const char* what) {
  uint32_t withdrawn = (want & ~3u) | kWithdrawn;
  Status s = box.state.wait([&](uint32_t v) { return v == want || v == withdrawn; }, deadline_,
                            exchange_->abort_flag());
  if (s.ok() && box.state.load() == withdrawn) s = Status(Code::kAborted, "");
  if (!s.ok() && deadline_.expired())
    return deadline_.ended(where(), str_cat(what, " rank ", peer));
  if (s.code() == Code::kAborted) {
    return error(Code::kAborted, where(), ": collective aborted because ",
                 exchange_->abort_reason());
  }
  return s;
}

Status LocalLink::post_send(int peer, const void* data, size_t bytes) {
  auto& box = exchange_->mailbox(rank_, peer);
  uint32_t seq = sent_[peer];
  if (seq > 0) {
    ACCL_RETURN_IF_ERROR(wait_state(box, state_of(seq, kDone), peer, "waiting for a send to"));
  }
  box.data = data;
  box.bytes = bytes;
  sent_[peer] = seq + 1;
  box.state.store_and_wake(state_of(seq + 1, kPosted));
  return Status::Ok();
}

Status LocalLink::wait_sends() {
  for (int peer = 0; peer < size(); ++peer) {
    if (sent_[peer] == 0) continue;
    ACCL_RETURN_IF_ERROR(wait_state(exchange_->mailbox(rank_, peer), state_of(sent_[peer], kDone),
                                    peer, "waiting for a send to"));
  }
  return Status::Ok();
}

Status LocalLink::claim(int peer, size_t bytes, LocalExchange::Mailbox** out) {
  auto& box = exchange_->mailbox(peer, rank_);
  uint32_t seq = ++received_[peer];
  ACCL_RETURN_IF_ERROR(wait_state(box, state_of(seq, kPosted), peer, "waiting for a message from"));
  if (!box.state.compare_exchange(state_of(seq, kPosted), state_of(seq, kReading))) {
    return error(Code::kAborted, where(), ": collective aborted because ",
                 exchange_->abort_reason());
  }
  if (box.bytes != bytes) {
    size_t got = box.bytes;
    release(box);
    return error(Code::kMismatch, where(), ": message ", seq, " from rank ", peer, " has ", got,
                 " bytes, expected ", bytes);
  }
  *out = &box;
  return Status::Ok();
}

void LocalLink::release(LocalExchange::Mailbox& box) {
  box.state.store_and_wake((box.state.load() & ~3u) | kDone);
}

Status LocalLink::recv(int peer, void* dst, size_t bytes) {
  LocalExchange::Mailbox* box = nullptr;
  ACCL_RETURN_IF_ERROR(claim(peer, bytes, &box));
  if (bytes > 0 && dst != box->data) std::memcpy(dst, box->data, bytes);
  release(*box);
  return Status::Ok();
}

Status LocalLink::recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                              const Reduction& reduction) {
  LocalExchange::Mailbox* box = nullptr;
  ACCL_RETURN_IF_ERROR(claim(peer, bytes, &box));
  if (bytes > 0) reduction.fn(dst, local, box->data, bytes / reduction.elem_size);
  release(*box);
  return Status::Ok();
}

Status LocalLink::barrier() {
  const uint32_t target = ++barriers_ * static_cast<uint32_t>(size());
  Flag& flag = exchange_->barrier_flag();
  flag.fetch_add_and_wake(1);
  Status s = flag.wait([&](uint32_t v) { return v >= target; }, deadline_, exchange_->abort_flag());
  if (!s.ok() && deadline_.expired()) return deadline_.ended(where(), "at a barrier");
  if (s.code() == Code::kAborted) {
    return error(Code::kAborted, where(), ": collective aborted because ",
                 exchange_->abort_reason());
  }
  return s;
}

void LocalLink::fail(const Status& status) {
  failed_ = true;
  exchange_->abort(rank_, status.message());
  // Withdraw unread messages; wait out readers already copying from this rank.
  for (int peer = 0; peer < size(); ++peer) {
    uint32_t seq = sent_[peer];
    if (seq == 0) continue;
    auto& box = exchange_->mailbox(rank_, peer);
    for (;;) {
      uint32_t s = box.state.load();
      if (s == state_of(seq, kPosted) && box.state.compare_exchange(s, state_of(seq, kWithdrawn))) {
        break;
      }
      if (s != state_of(seq, kReading) && s != state_of(seq, kPosted)) break;
      cpu_relax();
    }
  }
}

}  // namespace accl
