// Where the ranks of one in-process collective call meet. Each call is identified by
// a CallKey; the first rank to arrive creates the LocalExchange, every rank publishes
// the signature of its call (dtype, count, op, algorithm), and nobody moves data until
// all ranks have arrived and the signatures agree, so a mismatch is an error on every
// rank instead of a garbage result. A rank that waits past its deadline reports which
// ranks never arrived and poisons the call, so that late arrivals fail at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/wait.h"
#include "runtime/call.h"
#include "transport/local.h"

namespace accl {

// "0, 3, 5": the ranks whose flag in `present` is 0.
std::string missing_ranks(const std::vector<uint8_t>& present);

// Why a wait for the ranks of a call whose `present` flag is 0 must end now, `who`
// (the waiting rank, or the call) naming it: its deadline ended (timed out, or aborted),
// or they are devices XLA:CPU never started on launch `run_id` (runtime/stall.h;
// `devices`, each rank's global id, null where unknown), waited for since `since`. Ok
// while the wait goes on. Both meeting modes ask it: a rendezvous's waiting ranks and
// the one-shot's watchdog.
Status missing_ranks_end(const std::string& who, const Deadline& deadline,
                         const std::vector<uint8_t>& present, const std::vector<int64_t>* devices,
                         int64_t run_id, Clock::time_point since);

class OneShotTable;  // runtime/one_shot.h: a meeting place's calls completed by the last rank

// Where the ranks of this process meet: each call site has one (runtime/collective_site.h)
// for the calls of its groups, in one process or across processes (the hierarchy's
// device threads); the native tests make their own. Ranks of one call use one.
class Rendezvous {
 public:
  Rendezvous();
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Joins call `key` as `rank` of `size`, publishing this rank's segments. On success
  // *exchange is shared by all ranks, every rank's buffers are published and all
  // signatures agree. `devices` (each rank's global device id, where known): a wait for
  // ranks whose devices XLA:CPU never started on this launch fails within seconds
  // (runtime/stall.h) instead of at the deadline.
  Status join(const CallKey& key, int rank, int size, const Signature& signature,
              const std::string& label, const Deadline& deadline,
              const std::vector<Buffers>& segments, std::shared_ptr<LocalExchange>* exchange,
              const std::vector<int64_t>* devices = nullptr);

  // Rank `rank` will not join call `key` (it failed before it could: a link it could not
  // open, an allocation): the ranks waiting in join fail at once naming `why`, and so do
  // ranks that arrive later.
  void leave(const CallKey& key, int rank, int size, const std::string& label, const Status& why);

  // The other mode of this meeting place: its calls completed by their last rank
  // (runtime/one_shot.h), in a table of its own, which `make` makes at the first.
  OneShotTable& one_shot_table(std::shared_ptr<OneShotTable> (*make)());

 private:
  struct PendingCall;
  std::shared_ptr<PendingCall>& slot_of(const CallKey& key, int size, const std::string& label,
                                        size_t bytes);
  // Counts rank `rank` in (joined or left; under mutex_), once; the call's entry goes
  // when every rank is counted. False if the rank is out of range or counted already.
  bool count_in(const CallKey& key, PendingCall& call, int rank);
  // Records why rank `rank` left (under mutex_); true for the first to leave, which then
  // adds kLeftMark to `arrived` (after unlocking).
  bool record_left(PendingCall& call, int rank, const Status& why);
  void drop(const CallKey& key, PendingCall& call);
  void abandon(PendingCall& call);
  // join's two halves: registering the rank (its signature, under mutex_), then, its
  // buffers published, waiting for every rank and checking that all signatures agree.
  Status enter(const CallKey& key, int rank, int size, const Signature& signature,
               const std::string& label, size_t bytes, std::shared_ptr<PendingCall>* call);
  Status wait_for_all(PendingCall& call, int rank, int size, const std::string& label,
                      const Deadline& deadline, int64_t run_id,
                      const std::vector<int64_t>* devices);

  std::mutex mutex_;
  std::unordered_map<CallKey, std::shared_ptr<PendingCall>, CallKeyHash> calls_;
  std::atomic<OneShotTable*> one_shot_{nullptr};  // read without mutex_ once made
  std::shared_ptr<OneShotTable> one_shot_owner_;  // (under mutex_)
};

// Calls waiting for ranks in every rendezvous of the process (for tests: must return
// to zero).
size_t pending_calls();

// A process-unique key space for callers without XLA run ids (the native test tier).
int64_t fresh_op_id();

}  // namespace accl
