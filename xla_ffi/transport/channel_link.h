// A Link over byte-stream channels (TCP rails, shared-memory rings, in-process rings).
//
// Every message travels as frames: a header (magic, the channels' epoch, call tag, the
// sender's plan of the call, per-channel sequence number, length) and the payload. A
// message to a peer reached over several channels (rails) is striped across them in
// proportion to their weights, one frame per channel; both ends compute the same split.
// The receiver checks every header, so a peer in a different call (other shape, dtype,
// op or plan), a lost or extra frame or a stranger's bytes are an error, never a wrong
// result.
//
// Sends are asynchronous: post_send only queues; every wait (recv, wait_sends) drives
// all queued sends and the awaited receives together, so two ranks that send to each
// other never deadlock on full buffers. A reducing receive reduces each stripe's bytes
// as they arrive (after its frame header was checked), overlapping the reduction with
// the transfer. Waiting on sockets keeps looking for link_spin_microseconds() (yielding
// the core between looks), then sleeps in poll(); between looks at memory rings it
// yields, then sleeps briefly; it checks the deadline and the peers' liveness.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/wait.h"
#include "transport/channel.h"
#include "transport/link.h"

namespace accl {

struct FrameHeader {
  uint32_t magic;
  uint32_t epoch;  // the group's epoch (runtime/communicator.h): a frame from before a
                   // recovery is refused
  uint64_t tag;    // identifies the call (signature); equal on both ends
  uint64_t plan;   // the sender's plan (runtime/call_plan.h's encode_wire_plan): two
                   // processes configured differently fail at the first frame, naming both
  uint64_t seq;    // frame number on this channel
  uint64_t bytes;  // payload length
};
constexpr uint32_t kFrameMagic = 0x46434341;  // "ACCF"

// Cuts `bytes` into one piece per channel by weight (small messages use only the first).
std::vector<size_t> stripe_lengths(size_t bytes, const std::vector<Channel*>& channels);

// Channels between every pair of n ranks (tests, self-test): mesh[a][b] holds rank a's
// ends towards rank b, `stripes` of them, each pair made by make_pair(a, b, &a_end, &b_end).
using ChannelMesh = std::vector<std::vector<std::vector<std::unique_ptr<Channel>>>>;
using PairMaker =
    std::function<void(int a, int b, std::unique_ptr<Channel>*, std::unique_ptr<Channel>*)>;
ChannelMesh make_channel_mesh(int n, int stripes, const PairMaker& make_pair);
// Rank r's view of the mesh, as ChannelLink takes it.
std::vector<std::vector<Channel*>> channels_of(const ChannelMesh& mesh, int rank);

class ChannelLink : public Link {
 public:
  // channels[r]: the channels to rank r (empty for this rank).
  ChannelLink(int rank, std::vector<std::vector<Channel*>> channels, uint64_t tag,
              std::string where, Deadline deadline, uint32_t epoch = 0);
  ~ChannelLink() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(channels_.size()); }
  Status post_send(int peer, const void* data, size_t bytes) override;
  Status wait_sends() override;
  Status recv(int peer, void* dst, size_t bytes) override;
  Status recv_reduce(int peer, const void* local, void* dst, size_t bytes,
                     const Reduction& reduction) override;
  std::string where() const override { return where_; }
  bool queues_sends() const override { return true; }
  Status begin_peer_access() override;
  Status check_peer_access() override;
  void end_peer_access() override;
  // Payload bytes this link has sent, per rail (Channel::rail).
  const std::map<std::string, uint64_t>& bytes_sent_by_rail() const { return sent_by_rail_; }
  // Marks every channel of this link broken and tells the peers (see Channel::poison);
  // then waits (up to kDrainSeconds) until no peer is in a phase that touches this
  // rank's buffers, so that they can be released.
  void fail(Code reason);
  // The plan word every frame carries and every received frame must match (0 unless
  // set); `describe(peer, theirs)` says what differs when a peer's does not.
  using PlanMismatch = std::function<std::string(int peer, uint64_t theirs)>;
  void set_plan(uint64_t plan, PlanMismatch describe) {
    plan_ = plan;
    plan_mismatch_ = std::move(describe);
  }
  // Every wait of this link also ends as soon as `failed()` gives an error (the call
  // failed on another thread of this process, e.g. a sibling of the hierarchy).
  void also_fail_when(std::function<Status()> failed) { also_failed_ = std::move(failed); }

 private:
  struct Transfer {
    Channel* channel;
    int peer;
    FrameHeader header;
    size_t header_done = 0;
    char* data;
    size_t bytes;
    size_t done = 0;
    // A receive into a window (recv_reduce): byte p of the payload lands at
    // data[p % window], and at most `window` bytes past `consumed` are read.
    size_t window = 0;
    size_t consumed = 0;
    size_t offset = 0;  // where this stripe starts in its message
    bool finished() const { return header_done == sizeof(FrameHeader) && done == bytes; }
    // Where the next payload byte goes and how many may be read there now.
    char* next_at() const { return data + (window ? done % window : done); }
    size_t room() const {
      if (!window) return bytes - done;
      return std::min({bytes - done, window - done % window, consumed + window - done});
    }
  };
  Status check(Channel* channel, int peer);
  Status step_send(Transfer& t, bool* progressed);
  Status step_recv(Transfer& t, bool* progressed);
  // Drives queued sends and `recvs` until the recvs are done (and, if `all_sends`,
  // the sends too); calls on_progress after every round that moved bytes.
  Status drive(std::vector<Transfer>* recvs, bool all_sends,
               const std::function<void()>& on_progress = nullptr);
  // The transfers that receive the next `bytes` from `peer` into dst, one per stripe
  // (dst nullptr: the caller points each at its memory; `offset` says where it starts).
  Status post_recvs(int peer, void* dst, size_t bytes, std::vector<Transfer>* recvs);
  // `idle_since`: when the current run of rounds that moved nothing began (drive's).
  Status wait_idle(const std::vector<Transfer>& recvs, int* idle_rounds,
                   Clock::time_point* idle_since);
  std::string peer_label(int peer) const;

  // The first of this link's channels that either end failed (a peer that failed the
  // call, or this process's own failure), with its reason (Channel::poisoned_status).
  Status peer_failed(const char* while_what) const;

  int rank_;
  std::vector<std::vector<Channel*>> channels_;
  uint64_t tag_;
  uint64_t plan_ = 0;
  PlanMismatch plan_mismatch_;
  uint32_t epoch_;
  std::string where_;
  Deadline deadline_;
  std::vector<Transfer> sends_;
  std::vector<Channel*> busy_;  // channels with a send in the middle of a frame (drive)
  Clock::time_point last_liveness_check_;
  std::map<std::string, uint64_t> sent_by_rail_;
  std::function<Status()> also_failed_;
  bool touching_ = false;  // inside begin_peer_access .. end_peer_access
};

// How long a rank waiting for sockets keeps looking before it sleeps in poll(): on a
// fast wire the peer's bytes often arrive within tens of microseconds, and a sleeping
// thread's wake-up (on a virtual machine above all) costs as much again. Set by
// JAX_ACCL_SPIN_US (jax_accl's configuration); 0 sleeps at once.
std::atomic<int>& link_spin_microseconds();

// Runs `body`, one rank's part of a call over `links` (threads it starts joined before
// it returns); where it fails or throws, every link is failed (ChannelLink::fail: each
// peer fails at once, and this rank's buffers are fenced) before the error returns, so
// no peer waits for this rank to its deadline. `where` names the rank in an exception's
// error.
Status fail_links_on_error(const std::vector<ChannelLink*>& links, const std::string& where,
                           const std::function<Status()>& body);

}  // namespace accl
