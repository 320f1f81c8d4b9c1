#include "transport/channel_link.h"

#include <poll.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>

#include "common/health.h"

namespace accl {
namespace {

constexpr size_t kMinStripeBytes = 16 << 10;  // smaller messages use one channel
constexpr auto kLivenessInterval = std::chrono::milliseconds(200);
// A reducing receive reads each stripe into a window of its own, reused round and
// round, and reduces each half as soon as it is full: the received bytes are reduced
// while they are in cache, and no buffer the size of the message is allocated (and
// faulted in) per call.
constexpr size_t kReduceWindowBytes = 512 << 10;
constexpr size_t kReducePieceBytes = kReduceWindowBytes / 2;

// The windows of reducing receives, kept for the next receive of any thread (the step
// between hosts of a pipelined call runs on a thread of its own per call, so windows
// kept per thread would be faulted in afresh every call).
class WindowPool {
 public:
  std::vector<char> take(size_t bytes) {
    std::vector<char> window;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        window = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (window.size() < bytes) window.resize(bytes);
    return window;
  }
  void give(std::vector<char> window) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.size() < kKept) free_.push_back(std::move(window));
  }

 private:
  static constexpr size_t kKept = 16;
  std::mutex mutex_;
  std::vector<std::vector<char>> free_;
};

WindowPool& window_pool() {
  static WindowPool* pool = new WindowPool;  // never destroyed: used until the process ends
  return *pool;
}

// A window taken from the pool for one receive, given back when it ends.
struct BorrowedWindows {
  explicit BorrowedWindows(size_t bytes) : memory(window_pool().take(bytes)) {}
  ~BorrowedWindows() { window_pool().give(std::move(memory)); }
  std::vector<char> memory;
};

}  // namespace

std::vector<size_t> stripe_lengths(size_t bytes, const std::vector<Channel*>& channels) {
  std::vector<size_t> lengths(channels.size(), 0);
  if (channels.empty()) return lengths;
  if (channels.size() == 1 || bytes < kMinStripeBytes * channels.size()) {
    lengths[0] = bytes;
    return lengths;
  }
  double total = 0;
  for (Channel* c : channels) total += c->weight();
  size_t assigned = 0;
  for (size_t i = 0; i + 1 < channels.size(); ++i) {
    size_t share = static_cast<size_t>(static_cast<double>(bytes) * channels[i]->weight() / total);
    share &= ~static_cast<size_t>(63);
    lengths[i] = share;
    assigned += share;
  }
  lengths.back() = bytes - assigned;
  return lengths;
}

ChannelMesh make_channel_mesh(int n, int stripes, const PairMaker& make_pair) {
  ChannelMesh mesh(n);
  for (auto& row : mesh) row.resize(n);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      for (int s = 0; s < stripes; ++s) {
        std::unique_ptr<Channel> x, y;
        make_pair(a, b, &x, &y);
        mesh[a][b].push_back(std::move(x));
        mesh[b][a].push_back(std::move(y));
      }
    }
  }
  return mesh;
}

std::vector<std::vector<Channel*>> channels_of(const ChannelMesh& mesh, int rank) {
  std::vector<std::vector<Channel*>> out(mesh.size());
  for (size_t b = 0; b < mesh.size(); ++b) {
    for (const auto& c : mesh[rank][b]) out[b].push_back(c.get());
  }
  return out;
}

ChannelLink::ChannelLink(int rank, std::vector<std::vector<Channel*>> channels, uint64_t tag,
                         std::string where, Deadline deadline, uint32_t epoch)
    : rank_(rank),
      channels_(std::move(channels)),
      tag_(tag),
      epoch_(epoch),
      where_(std::move(where)),
      deadline_(deadline),
      last_liveness_check_(Clock::now()) {}

ChannelLink::~ChannelLink() { end_peer_access(); }

std::string ChannelLink::peer_label(int peer) const {
  std::string out = str_cat("rank ", peer);
  if (!channels_[peer].empty()) out += str_cat(" (", channels_[peer][0]->describe(), ")");
  return out;
}

void ChannelLink::fail(Code reason) {
  end_peer_access();
  for (auto& list : channels_) {
    for (Channel* c : list) {
      if (c->broken.ok()) c->broken = Status(Code::kAborted, "stream broken by an earlier error");
      c->poison(reason);
    }
  }
  sends_.clear();
  // The fence: a peer inside a phase that touches this rank's buffers sees the poison
  // within one tile and leaves it; until then these buffers must stay as they are.
  const Deadline drain = Deadline::unabortable_after(kDrainSeconds);
  for (size_t r = 0; r < channels_.size(); ++r) {
    for (Channel* c : channels_[r]) {
      while (c->peer_touching() && c->check_peer().ok()) {
        if (drain.expired()) {
          mark_process_unusable(str_cat(where_, ": after a failed call, ", peer_label(r),
                                        " was still touching this rank's buffers after ",
                                        kDrainSeconds, " s"));
          return;
        }
        timespec ts{0, 100000};
        nanosleep(&ts, nullptr);
      }
    }
  }
}

Status ChannelLink::begin_peer_access() {
  touching_ = true;
  for (auto& list : channels_) {
    for (Channel* c : list) c->set_touching_peer(true);
  }
  // After announcing it: a peer that poisons from now on waits for this rank to leave.
  return check_peer_access();
}

Status ChannelLink::check_peer_access() {
  return peer_failed("while this rank was reading and writing its buffers");
}

Status ChannelLink::peer_failed(const char* while_what) const {
  for (size_t r = 0; r < channels_.size(); ++r) {
    for (Channel* c : channels_[r]) {
      if (Status why = c->poisoned_status(); !why.ok()) {
        return error(why.code(), where_, ": ", peer_label(static_cast<int>(r)),
                     " failed the call (seen ", while_what, "): ", why.message());
      }
    }
  }
  return Status::Ok();
}

void ChannelLink::end_peer_access() {
  if (!touching_) return;
  touching_ = false;
  for (auto& list : channels_) {
    for (Channel* c : list) c->set_touching_peer(false);
  }
}

Status ChannelLink::check(Channel* channel, int peer) {
  if (!channel->broken.ok()) {
    return error(channel->broken.code(), where_, ": channel to ", peer_label(peer),
                 " is unusable after an earlier error: ", channel->broken.message());
  }
  return Status::Ok();
}

Status ChannelLink::post_send(int peer, const void* data, size_t bytes) {
  const std::vector<size_t> lengths = stripe_lengths(bytes, channels_[peer]);
  size_t offset = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] == 0 && !(i == 0 && bytes == 0)) continue;
    Channel* c = channels_[peer][i];
    ACCL_RETURN_IF_ERROR(check(c, peer));
    Transfer t{c,
               peer,
               FrameHeader{kFrameMagic, epoch_, tag_, plan_, c->next_send_seq++, lengths[i]},
               0,
               const_cast<char*>(static_cast<const char*>(data)) + offset,
               lengths[i]};
    sends_.push_back(t);
    offset += lengths[i];
  }
  return Status::Ok();
}

Status ChannelLink::step_send(Transfer& t, bool* progressed) {
  if (t.finished()) return Status::Ok();
  while (!t.finished()) {
    size_t n = 0;
    Status s = t.header_done < sizeof(FrameHeader)
                   ? t.channel->write_some(reinterpret_cast<char*>(&t.header) + t.header_done,
                                           sizeof(FrameHeader) - t.header_done, &n)
                   : t.channel->write_some(t.data + t.done, t.bytes - t.done, &n);
    if (!s.ok()) {
      t.channel->broken = s;
      return error(s.code(), where_, ": sending to ", peer_label(t.peer), ": ", s.message());
    }
    if (n == 0) return Status::Ok();
    *progressed = true;
    if (t.header_done < sizeof(FrameHeader)) {
      t.header_done += n;
    } else {
      t.done += n;
    }
  }
  sent_by_rail_[t.channel->rail] += t.bytes;
  if (t.channel->traffic != nullptr) {
    t.channel->traffic->bytes_sent.fetch_add(t.bytes, std::memory_order_relaxed);
    t.channel->traffic->messages_sent.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status ChannelLink::step_recv(Transfer& t, bool* progressed) {
  if (t.finished()) return Status::Ok();
  while (!t.finished()) {
    size_t n = 0;
    const bool in_header = t.header_done < sizeof(FrameHeader);
    if (!in_header && t.room() == 0) return Status::Ok();  // the window is full
    Status s = in_header ? t.channel->read_some(reinterpret_cast<char*>(&t.header) + t.header_done,
                                                sizeof(FrameHeader) - t.header_done, &n)
                         : t.channel->read_some(t.next_at(), t.room(), &n);
    if (!s.ok()) {
      t.channel->broken = s;
      return error(s.code(), where_, ": receiving from ", peer_label(t.peer), ": ", s.message());
    }
    if (n == 0) return Status::Ok();
    *progressed = true;
    if (!in_header) {
      t.done += n;
      continue;
    }
    t.header_done += n;
    if (t.header_done < sizeof(FrameHeader)) continue;
    const FrameHeader& h = t.header;
    const uint64_t expected_seq = t.channel->next_recv_seq;
    Status bad;
    if (h.magic != kFrameMagic) {
      bad = error(Code::kMismatch, "garbage instead of a frame header");
    } else if (h.epoch != epoch_) {
      bad = error(Code::kMismatch, "a frame of epoch ", h.epoch, " arrived in epoch ", epoch_,
                  " (left over from before a recovery)");
    } else if (h.seq != expected_seq) {
      bad = error(Code::kMismatch, "frame ", h.seq, " arrived where frame ", expected_seq,
                  " was due (lost or extra message)");
    } else if (h.plan != plan_) {
      bad = error(Code::kMismatch, plan_mismatch_ ? plan_mismatch_(t.peer, h.plan)
                                                  : str_cat("the peer runs plan ", h.plan,
                                                            ", this rank plan ", plan_));
    } else if (h.tag != tag_ || h.bytes != t.bytes) {
      bad = error(Code::kMismatch, "the peer is in a different call: it sent ", h.bytes,
                  " bytes for call tag ", std::hex, h.tag, std::dec, ", this rank expects ",
                  t.bytes, " bytes for tag ", std::hex, tag_, std::dec,
                  " (shapes, dtypes, ops or algorithm differ between ranks)");
    }
    if (!bad.ok()) {
      t.channel->broken = bad;
      return error(Code::kMismatch, where_, ": from ", peer_label(t.peer), ": ", bad.message());
    }
    t.channel->next_recv_seq++;
  }
  if (t.channel->traffic != nullptr) {
    t.channel->traffic->bytes_received.fetch_add(t.bytes, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status ChannelLink::wait_idle(const std::vector<Transfer>& recvs, int* idle_rounds,
                              Clock::time_point* idle_since) {
  if (deadline_.expired()) {
    std::string waiting;
    for (const Transfer& t : recvs) {
      if (!t.finished()) waiting += str_cat(" receive from ", peer_label(t.peer), ";");
    }
    for (const Transfer& t : sends_) {
      if (!t.finished()) waiting += str_cat(" send to ", peer_label(t.peer), ";");
    }
    return deadline_.ended(where_, "waiting for:" + waiting);
  }
  if (also_failed_) ACCL_RETURN_IF_ERROR(also_failed_());
  const auto now = Clock::now();
  if (now - last_liveness_check_ > kLivenessInterval) {
    last_liveness_check_ = now;
    for (const std::vector<Transfer>* list :
         {&recvs, static_cast<const std::vector<Transfer>*>(&sends_)}) {
      for (const Transfer& t : *list) {
        if (t.finished()) continue;
        Status s = t.channel->check_peer();
        if (!s.ok()) {
          t.channel->broken = s;
          return error(s.code(), where_, ": ", peer_label(t.peer), ": ", s.message());
        }
      }
    }
    // A peer this rank is not waiting for failed the call: the peer it waits for may
    // never come (a device XLA:CPU never started, whose process failed the call).
    ACCL_RETURN_IF_ERROR(peer_failed("while this rank waited for another"));
  }
  std::vector<pollfd> fds;
  bool memory = false;
  for (const std::vector<Transfer>* list :
       {&recvs, static_cast<const std::vector<Transfer>*>(&sends_)}) {
    for (const Transfer& t : *list) {
      if (t.finished()) continue;
      const int fd = t.channel->poll_fd();
      if (fd < 0) {
        memory = true;
      } else {
        fds.push_back(pollfd{fd, static_cast<short>(list == &recvs ? POLLIN : POLLOUT), 0});
      }
    }
  }
  ++*idle_rounds;
  if (!memory) {
    // Sockets: look again at once (the other threads of the core served first) for a
    // while, then sleep until one is ready.
    if (*idle_rounds == 1) *idle_since = now;
    if (now - *idle_since <
        std::chrono::microseconds(link_spin_microseconds().load(std::memory_order_relaxed))) {
      sched_yield();
      return Status::Ok();
    }
    poll(fds.data(), fds.size(), 20);
    return Status::Ok();
  }
  if (!fds.empty()) poll(fds.data(), fds.size(), 0);
  if (*idle_rounds < 32) {
    sched_yield();
  } else {
    // Memory rings: back off from 5 to 200 microseconds between looks.
    const long ns = std::min<long>(200000, 5000L << std::min(*idle_rounds - 32, 6));
    timespec ts{0, ns};
    nanosleep(&ts, nullptr);
  }
  return Status::Ok();
}

Status ChannelLink::drive(std::vector<Transfer>* recvs, bool all_sends,
                          const std::function<void()>& on_progress) {
  int idle_rounds = 0;
  Clock::time_point idle_since;
  for (;;) {
    bool progressed = false, pending = false;
    // Sends first: a rank whose peer's first frame is refused (another call, another
    // plan) has written its own header by then, so that peer learns what differs too.
    // A channel carries one frame at a time: only the oldest unfinished send of each
    // channel moves, so two frames queued for one channel never interleave their bytes.
    busy_.clear();
    for (Transfer& t : sends_) {
      if (t.finished()) continue;
      if (std::find(busy_.begin(), busy_.end(), t.channel) != busy_.end()) continue;
      ACCL_RETURN_IF_ERROR(step_send(t, &progressed));
      if (!t.finished()) busy_.push_back(t.channel);
    }
    sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                                [](const Transfer& t) { return t.finished(); }),
                 sends_.end());
    for (Transfer& t : *recvs) {
      ACCL_RETURN_IF_ERROR(step_recv(t, &progressed));
      pending |= !t.finished();
    }
    if (all_sends) pending |= !sends_.empty();
    if (progressed && on_progress) on_progress();
    if (!pending) return Status::Ok();
    if (progressed) {
      idle_rounds = 0;
    } else {
      ACCL_RETURN_IF_ERROR(wait_idle(*recvs, &idle_rounds, &idle_since));
    }
  }
}

Status ChannelLink::wait_sends() {
  std::vector<Transfer> none;
  return drive(&none, /*all_sends=*/true);
}

Status ChannelLink::post_recvs(int peer, void* dst, size_t bytes, std::vector<Transfer>* recvs) {
  const std::vector<size_t> lengths = stripe_lengths(bytes, channels_[peer]);
  size_t offset = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] == 0 && !(i == 0 && bytes == 0)) continue;
    Channel* c = channels_[peer][i];
    ACCL_RETURN_IF_ERROR(check(c, peer));
    Transfer t{c,         peer, FrameHeader{}, 0, dst ? static_cast<char*>(dst) + offset : nullptr,
               lengths[i]};
    t.offset = offset;
    recvs->push_back(t);
    offset += lengths[i];
  }
  return Status::Ok();
}

Status ChannelLink::recv(int peer, void* dst, size_t bytes) {
  std::vector<Transfer> recvs;
  ACCL_RETURN_IF_ERROR(post_recvs(peer, dst, bytes, &recvs));
  return drive(&recvs, /*all_sends=*/false);
}

Status ChannelLink::recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                                const Reduction& reduction) {
  std::vector<Transfer> recvs;
  ACCL_RETURN_IF_ERROR(post_recvs(peer, nullptr, bytes, &recvs));
  BorrowedWindows windows(recvs.size() * kReduceWindowBytes);  // one per stripe
  for (size_t i = 0; i < recvs.size(); ++i) {
    recvs[i].data = windows.memory.data() + i * kReduceWindowBytes;
    recvs[i].window = kReduceWindowBytes;
  }
  // Reduce what has arrived while the rest is on its way: each stripe's received prefix,
  // whole elements, half a window at a time (and the tail at the end), at most up to the
  // window's end at once.
  const size_t elem = reduction.elem_size, out_elem = reduction.out_elem();
  auto reduce_arrived = [&](bool all) {
    for (size_t i = 0; i < recvs.size(); ++i) {
      Transfer& t = recvs[i];
      const size_t ready = t.header_done == sizeof(FrameHeader) ? t.done / elem * elem : 0;
      if (ready == t.consumed || (!all && ready - t.consumed < kReducePieceBytes)) continue;
      while (t.consumed < ready) {
        const size_t in_window = t.consumed % t.window;
        const size_t n = std::min(ready - t.consumed, t.window - in_window);
        const size_t at = (t.offset + t.consumed) / elem * out_elem;
        reduction.fn(static_cast<char*>(dst) + at, static_cast<const char*>(local) + at,
                     t.data + in_window, n / elem);
        t.consumed += n;
      }
    }
  };
  ACCL_RETURN_IF_ERROR(drive(&recvs, /*all_sends=*/false, [&] { reduce_arrived(false); }));
  reduce_arrived(true);
  return Status::Ok();
}

std::atomic<int>& link_spin_microseconds() {
  static std::atomic<int> microseconds{50};
  return microseconds;
}

Status fail_links_on_error(const std::vector<ChannelLink*>& links, const std::string& where,
                           const std::function<Status()>& body) {
  Status s;
  try {
    s = body();
  } catch (const std::exception& e) {  // an allocation that failed, say
    s = error(Code::kInternal, where, ": ", e.what());
  }
  if (s.ok()) return s;
  for (ChannelLink* link : links) {
    if (link != nullptr) link->fail(s.code());
  }
  return s;
}

}  // namespace accl
