#include "runtime/one_shot.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/forced_unwind.h"
#include "runtime/call_record.h"
#include "runtime/call_threads.h"
#include "runtime/collective.h"
#include "runtime/stall.h"
#include "runtime/stats.h"
#include "runtime/trace.h"

namespace accl {
namespace {

struct Pending {
  int size = 0;
  int joined = 0;
  std::string label;
  Deadline deadline;
  Clock::time_point first_arrival;
  std::vector<Signature> signatures;
  std::vector<uint8_t> present;
  std::vector<std::vector<char>> inputs;    // staged, all segments back to back
  std::vector<std::vector<void*>> outputs;  // per rank, per segment
  std::vector<int64_t> devices;
  std::vector<int64_t> group_devices;  // every rank's, known or not yet arrived
  int64_t run_id = 0;
  std::vector<int> recv_from;  // a permutation's source of each rank (-1: none)
  int root = -1;               // a rooted collective's root (every rank's the same)
  std::vector<std::function<void(const Status&)>> done;
  // Per rank: kWaiting while its thread still waits inline for the result (briefly),
  // kDetached once it has returned a pending future, kHandedBack when the completer left
  // the result for the waiting thread to deliver itself.
  std::unique_ptr<std::atomic<int>[]> handoff;
  int handoff_size = 0;  // its length (a pending call reused keeps it)
  Status result;
};

constexpr int kWaiting = 0, kDetached = 1, kHandedBack = 2;
// How long an early rank waits inline for the others before it returns a pending future.
constexpr auto kInlineWait = std::chrono::microseconds(50);

// Delivers `s` to every present rank except `self`: to a rank still waiting inline by
// handing it back, else on a call thread (see complete()).
void release(Pending& p, int self, const Status& s) {
  p.result = s;
  for (int r = 0; r < p.size; ++r) {
    if (r == self || !p.present[r]) continue;
    int expected = kWaiting;
    if (p.handoff[r].compare_exchange_strong(expected, kHandedBack)) continue;
    run_on_call_thread([done = std::move(p.done[r]), s] { done(s); });
  }
}

}  // namespace

// A meeting place's one-shot calls: those whose ranks have not all arrived, and those the
// watchdog failed, kept a while so that a rank arriving late fails at once with their
// error instead of waiting alone for its own deadline. Its own lock: the calls of other
// call sites never contend for it.
class OneShotTable {
 public:
  // Calls still pending when their meeting place goes (never while XLA runs a launch of
  // its executable) end with an error, never silently.
  ~OneShotTable() {
    for (auto& [key, p] : pending) {
      release(*p, -1,
              error(Code::kAborted, p->label, ": its call site was freed before every rank came"));
    }
  }
  std::mutex mutex;
  std::unordered_map<CallKey, std::shared_ptr<Pending>, CallKeyHash> pending;

  Status failed_before(const CallKey& key) const {  // (under mutex)
    auto it = failed_.find(key);
    return it == failed_.end() ? Status::Ok() : it->second;
  }
  void remember_failed(const CallKey& key, const Status& s) {  // (under mutex)
    if (!failed_.emplace(key, s).second) return;
    failed_order_.push_back(key);
    if (failed_order_.size() > kFailedKept) {
      failed_.erase(failed_order_.front());
      failed_order_.pop_front();
    }
  }

 private:
  static constexpr size_t kFailedKept = 1024;
  std::unordered_map<CallKey, Status, CallKeyHash> failed_;
  std::deque<CallKey> failed_order_;
};

namespace {

// The tables of every meeting place, for the watchdog alone (a call never takes this
// lock). Never destroyed (see call_threads.cc): the watchdog runs until exit.
std::mutex& g_tables_mutex = *new std::mutex;
auto& g_tables = *new std::vector<std::weak_ptr<OneShotTable>>;

// Fails the expired calls of `table` (a rank never arrived, jax_accl.abort(), or devices
// XLA:CPU never started: missing_ranks_end, as a rendezvous's waiting ranks ask it).
void expire(OneShotTable& table) {
  std::vector<std::pair<std::shared_ptr<Pending>, Status>> expired;
  {
    std::lock_guard<std::mutex> lock(table.mutex);
    for (auto it = table.pending.begin(); it != table.pending.end();) {
      Pending& p = *it->second;
      Status why = missing_ranks_end(p.label, p.deadline, p.present, &p.group_devices, p.run_id,
                                     p.first_arrival);
      if (why.ok()) {
        ++it;
        continue;
      }
      table.remember_failed(it->first, why);
      expired.emplace_back(it->second, std::move(why));
      it = table.pending.erase(it);
    }
  }
  for (auto& [p, s] : expired) release(*p, -1, s);
}

// Every 50 ms, the expired calls of every live table. One thread per process, started
// with the first table.
void watchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<std::shared_ptr<OneShotTable>> tables;
    {
      std::lock_guard<std::mutex> lock(g_tables_mutex);
      for (auto it = g_tables.begin(); it != g_tables.end();) {
        if (auto table = it->lock()) {
          tables.push_back(std::move(table));
          ++it;
        } else {
          it = g_tables.erase(it);
        }
      }
    }
    for (auto& table : tables) expire(*table);
  }
}

void ensure_watchdog() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::thread([] {
      for (;;) {  // nothing may escape a thread: an allocation that failed restarts it
        try {
          watchdog();
        } catch (ForcedUnwind&) {  // a cancelled thread must unwind to its end
          throw;
        } catch (...) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    }).detach();
  });
}

// A meeting place's table, made at its first one-shot call and watched from then on.
std::shared_ptr<OneShotTable> make_table() {
  auto table = std::make_shared<OneShotTable>();
  {
    std::lock_guard<std::mutex> lock(g_tables_mutex);
    g_tables.push_back(table);
  }
  ensure_watchdog();
  return table;
}

// Segment `seg` (`offset` bytes into every staged input) of every rank's output.
void write_outputs(Pending& p, size_t seg, size_t offset, uint64_t count,
                   const Reduction& reduction) {
  OneShotSegment segment{p.size, count, {}, {}, &p.recv_from, &reduction, p.root};
  for (int r = 0; r < p.size; ++r) {
    segment.staged.push_back(p.inputs[r].data() + offset);
    segment.outputs.push_back(static_cast<char*>(p.outputs[r][seg]));
  }
  collective_row(p.signatures[0].collective).one_shot(segment);
}

// The last rank: write every output from the staged inputs, complete every rank.
void complete(Pending& p, int self, const std::vector<uint64_t>& counts, const Reduction& reduction,
              Algorithm recorded) {
  const size_t elem = reduction.elem_size;
  const Collective collective = p.signatures[self].collective;
  Status s;
  for (int r = 1; r < p.size && s.ok(); ++r) {
    if (!(p.signatures[r] == p.signatures[0])) {
      s = error(Code::kMismatch, p.label, ": ranks disagree on the ", collective_name(collective),
                ": rank 0 calls ", describe(p.signatures[0]), " but rank ", r, " calls ",
                describe(p.signatures[r]));
    }
  }
  if (s.ok()) {
    try {  // every rank is completed, whatever happens here (an allocation that failed)
      size_t offset = 0;
      for (size_t seg = 0; seg < counts.size(); ++seg) {
        if (counts[seg] > 0) write_outputs(p, seg, offset, counts[seg], reduction);
        offset += counts[seg] * elem;
      }
      CallSpec spec;
      spec.label = p.label;
      spec.signature.collective = collective;
      for (int r = 0; r < p.size; ++r) {
        spec.device = p.devices[r];
        record_call(recorded, spec, p.first_arrival, Clock::now(), offset);
      }
    } catch (const std::exception& e) {
      s = error(Code::kInternal, p.label, ": ", e.what());
    }
  }
  if (!s.ok()) {
    for (int r = 0; r < p.size; ++r) record_error(recorded, collective);
  }
  // A rank that returned a pending future is completed on a call thread:
  // XLA may continue the device's program right inside the completion, and that program
  // may block (another collective), which must not hold up this thread or other devices.
  // A rank still waiting inline delivers the result on its own thread.
  release(p, self, s);
  p.done[self](s);
}

// Finished pending calls kept for their next use: their vectors keep their capacity, so
// that a small call allocates almost nothing (each allocation and free costs a call of a
// few microseconds ~0.1 us). At most kPendingKept, each staging at most kPendingBytes.
constexpr size_t kPendingKept = 8;
constexpr size_t kPendingBytes = size_t{1} << 20;
std::mutex& g_pool_mutex = *new std::mutex;  // after a table's where both are held
auto& g_pool = *new std::vector<Pending*>;

size_t staged_capacity(const Pending& p) {
  size_t bytes = 0;
  for (const auto& input : p.inputs) bytes += input.capacity();
  return bytes;
}

// A pending call's last reference is gone: its ranks' completions and result go now (as
// a destroyed call's would); its storage, staged inputs, label and device lists (written
// over by its next use), is kept for the next call.
void recycle(Pending* p) {
  for (auto& done : p->done) done = nullptr;
  p->result = Status::Ok();
  if (staged_capacity(*p) <= kPendingBytes) {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (g_pool.size() < kPendingKept) return g_pool.push_back(p);
  }
  delete p;
}

// The pending call of `spec`'s key, as its first rank makes it.
std::shared_ptr<Pending> new_pending(const CallSpec& spec) {
  std::unique_ptr<Pending> p;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (!g_pool.empty()) {
      p.reset(g_pool.back());
      g_pool.pop_back();
    }
  }
  if (p == nullptr) p = std::make_unique<Pending>();
  const int n = spec.size;
  p->size = n;
  p->joined = 0;
  p->label = spec.label;
  p->deadline = Deadline::after_seconds(spec.timeout_s);
  p->first_arrival = Clock::now();
  p->signatures.assign(n, Signature{});
  p->present.assign(n, 0);
  p->inputs.resize(n);
  for (auto& input : p->inputs) input.clear();
  p->outputs.resize(n);
  for (auto& output : p->outputs) output.clear();
  p->devices.assign(n, -1);
  p->group_devices = spec.devices;
  p->run_id = spec.key.run_id;
  p->recv_from.assign(n, -1);
  p->root = -1;
  p->done.resize(n);
  if (p->handoff_size < n) {
    p->handoff = std::make_unique<std::atomic<int>[]>(n);
    p->handoff_size = n;
  }
  for (int r = 0; r < n; ++r) p->handoff[r].store(kWaiting);
  p->result = Status::Ok();
  // (Should the shared pointer's own allocation throw, it recycles p itself.)
  return std::shared_ptr<Pending>(p.release(), recycle);
}

// Rank spec.rank joins `p` (under its table's mutex): its inputs staged, its outputs and `done`
// kept; an error if the ranks disagree on the group's size or it joined twice.
Status join_pending(Pending& p, const CallSpec& spec, const std::vector<const void*>& in,
                    std::vector<void*>* out, const std::vector<uint64_t>& counts, size_t elem,
                    std::function<void(const Status&)>* done) {
  if (p.size != spec.size) {
    return error(Code::kMismatch, "rank ", spec.rank, " of ", spec.label, ": group size ",
                 spec.size, " differs from ", p.size, " given by another rank");
  }
  if (p.present[spec.rank]) {
    return error(Code::kInternal, "rank ", spec.rank, " of ", spec.label,
                 ": joined the same collective twice");
  }
  auto& staged = p.inputs[spec.rank];  // first: what may throw, before the rank is counted
  for (size_t k = 0; k < counts.size(); ++k) {
    const char* src = static_cast<const char*>(in[k]);
    staged.insert(staged.end(), src, src + counts[k] * elem);
  }
  p.present[spec.rank] = 1;
  p.signatures[spec.rank] = spec.signature;
  p.devices[spec.rank] = spec.device;
  p.recv_from[spec.rank] = spec.args.recv_from;
  p.root = spec.args.root;
  p.outputs[spec.rank] = std::move(*out);
  p.done[spec.rank] = std::move(*done);
  *done = nullptr;  // the pending call has it now
  return Status::Ok();
}

// An early rank: waits a moment for the last one (then the result is delivered on
// this thread, no hand-off), else returns and leaves the call pending.
void wait_for_the_last(Pending& p, int rank) {
  std::atomic<int>& state = p.handoff[rank];
  const auto until = Clock::now() + kInlineWait;
  while (state.load(std::memory_order_acquire) == kWaiting && Clock::now() < until) {
    sched_yield();
  }
  int expected = kWaiting;
  if (state.compare_exchange_strong(expected, kDetached)) return;  // completed later
  p.done[rank](p.result);
}

// one_shot's work; `done` stays the caller's until the rank joins the pending call.
void join_or_complete(CallSpec& spec, const std::vector<const void*>& in, std::vector<void*>& out,
                      const std::vector<uint64_t>& counts,
                      std::function<void(const Status&)>& done) {
  describe_layout(counts, &spec.signature);
  Reduction reduction;
  Status usable = reduction_for(spec, &reduction);
  if (!usable.ok()) {
    record_error(Algorithm::kDirect, spec.signature.collective);
    return done(usable);
  }
  if (spec.group == nullptr) {
    record_error(Algorithm::kDirect, spec.signature.collective);
    return done(error(Code::kInternal, spec.label, ": the call has no meeting place"));
  }
  OneShotTable& table = spec.group->meeting().one_shot_table(make_table);
  std::shared_ptr<Pending> ready, waiting;
  {
    std::lock_guard<std::mutex> lock(table.mutex);
    if (Status failed = table.failed_before(spec.key); !failed.ok()) {
      record_error(Algorithm::kDirect, spec.signature.collective);
      return done(error(failed.code(), "rank ", spec.rank, " of ", spec.label,
                        ": arrived after the call failed: ", failed.message()));
    }
    auto found = table.pending.find(spec.key);
    if (found == table.pending.end()) {
      found = table.pending.emplace(spec.key, new_pending(spec)).first;
    }
    std::shared_ptr<Pending>& slot = found->second;
    Status joined = join_pending(*slot, spec, in, &out, counts, reduction.elem_size, &done);
    if (!joined.ok()) {
      record_error(Algorithm::kDirect, spec.signature.collective);
      return done(joined);
    }
    if (++slot->joined == slot->size) {
      ready = slot;
      table.pending.erase(spec.key);
    } else {
      waiting = slot;
    }
  }
  // Ranks disagreeing on segment sizes may have staged different lengths: complete()
  // checks signatures before reading anything.
  if (ready) return complete(*ready, spec.rank, counts, reduction, Algorithm::kDirect);
  wait_for_the_last(*waiting, spec.rank);
}

}  // namespace

void one_shot(CallSpec spec, const std::vector<const void*>& in, std::vector<void*> out,
              const std::vector<uint64_t>& counts, std::function<void(const Status&)> done) {
  try {
    join_or_complete(spec, in, out, counts, done);
  } catch (const std::exception& e) {  // before the rank joined (an allocation that failed)
    if (done) done(error(Code::kInternal, spec.label, ": ", e.what()));
  }
}

}  // namespace accl
