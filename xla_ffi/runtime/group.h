// A group as the runtime runs its calls: one object, made once where the group is made
// (an FFI call site's replica group at instantiate, an MPI communicator at its split, a
// native test's group) and shared by every rank of this process and every call of the
// group. It holds where this process's ranks of a call meet (its Rendezvous, whose two
// modes are: wait until every rank is there, or the last to arrive completes the call,
// runtime/one_shot.h), the count of each device's calls in a launch (which numbers a
// call alike on every rank: runtime/call_sequences.h) and, across processes, its
// communicator in the World (runtime/communicator.h: its layout, plan, epochs, turns and
// channels), asked of the World's registry at the group's first call there and kept
// for every later call.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/call_sequences.h"
#include "runtime/rendezvous.h"

namespace accl {

class Communicator;
class World;

class Group {
 public:
  Group() : meeting_(std::make_shared<Rendezvous>()) {}
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Where this process's ranks of the group's calls meet.
  Rendezvous& meeting() const { return *meeting_; }
  // The launch-scoped count of each device's calls of the group (an FFI call site's
  // groups; the MPI library numbers its communicators' calls itself).
  CallSequences& sequences() { return sequences_; }

  // The communicator of lane `lane` of the group `devices` (global ids in rank order) in
  // `world`: the registry's (World::communicator) at the first call, then the one kept.
  // Kept weakly (the World owns it, and a World that stopped takes it along) and for
  // one World, devices and lane: another of them asks the registry again.
  Status communicator(World& world, const std::vector<int64_t>& devices, uint64_t lane,
                      const std::string& label, std::shared_ptr<Communicator>* out);

 private:
  const std::shared_ptr<Rendezvous> meeting_;
  std::mutex mutex_;  // over what is kept
  const World* world_ = nullptr;
  std::weak_ptr<Communicator> communicator_;
  std::vector<int64_t> devices_;
  uint64_t lane_ = 0;
  // Written by every call: a cache line of its own, away from what the calls read.
  alignas(64) CallSequences sequences_;
};

}  // namespace accl
