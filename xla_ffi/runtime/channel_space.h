// The channels of one group at one epoch: a communicator's connections (TCP
// connections, shared-memory segments, memory rings), made on first use through the
// process's transports (a ChannelMaker: the World) and kept until the group moves to a
// newer epoch (it recovered from a failed call, runtime/communicator.h). Then the
// space is dropped, and it closes its channels once the last call that still runs in
// it has returned (calls hold it by shared_ptr). A space's id is on the wire (in the
// TCP hello, in the shared-memory segment's name) and its epoch in every frame, so
// nothing of an older epoch can be taken for part of a newer one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/wait.h"
#include "transport/channel.h"

namespace accl {

// What a channel space needs of the process it lives in, which the World
// (runtime/world.h) provides: new channels between two devices through its transports,
// and forgetting what they made for a space. An interface, so that the layers above the
// World's transports (spaces, communicators) never include the World that owns them.
class ChannelMaker {
 public:
  virtual ~ChannelMaker() = default;
  // New channels from device `me` (of this process) to device `peer` for space `space`;
  // *reverse: the peer's ends, if made here (memory).
  virtual Status connect(int64_t me, int64_t peer, uint64_t space, const Deadline& deadline,
                         std::vector<std::unique_ptr<Channel>>* out,
                         std::vector<std::unique_ptr<Channel>>* reverse) = 0;
  // Space `space` is gone: the transports drop what they made for it and nobody claimed.
  virtual void forget(uint64_t space) = 0;
};

class ChannelSpace {
 public:
  // Without a `maker` (a communicator that only plans) the space has no channels.
  ChannelSpace(ChannelMaker* maker, uint64_t id, uint32_t epoch)
      : maker_(maker), id_(id), epoch_(epoch) {}
  ~ChannelSpace();  // closes the channels; the transports forget what was not claimed
  ChannelSpace(const ChannelSpace&) = delete;
  ChannelSpace& operator=(const ChannelSpace&) = delete;

  uint64_t id() const { return id_; }
  uint32_t epoch() const { return epoch_; }
  // Marks every channel of the space broken and tells the peers (Channel::poison).
  void poison_all(Code reason);
  // Fails, naming it, when the process at the other end of one of the space's channels
  // is known to have ended (Channel::peer_process_ended).
  Status peer_process_ended();
  // The channels from device `me` (of this process) to device `peer`.
  Status channels(int64_t me, int64_t peer, const Deadline& deadline, std::vector<Channel*>* out);

  // Whether the group's processes plan the space's first call alike, as one rank of this
  // process found (runtime/multiprocess.cc's check_plans_agree): set once; the other
  // ranks of the process wait for it, within their deadline.
  bool plans_checked();
  void set_plans_agree(const Status& verdict);
  Status plans_agree(const std::string& where, const Deadline& deadline);

 private:
  ChannelMaker* maker_;
  uint64_t id_;
  uint32_t epoch_;
  std::mutex mutex_;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::unique_ptr<Channel>>> channels_;
  std::mutex verdict_mutex_;
  std::condition_variable verdict_set_;
  bool checked_ = false;
  Status verdict_;
};

// The id of epoch `epoch` of lane `lane` of the group of `devices` (global ids in rank
// order).
uint64_t channel_space_id(const std::vector<int64_t>& devices, uint64_t lane, uint32_t epoch);

}  // namespace accl
