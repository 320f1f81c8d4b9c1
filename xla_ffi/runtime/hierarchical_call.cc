#include "runtime/hierarchical_call.h"

#include "transport/local.h"
#include "transport/wire_link.h"

namespace accl {
namespace {

// What one rank's call holds: its links, by tier. fail() ends the call on every path:
// each link poisoned (its peers fail at once), and the process's sibling threads told
// (through the exchange once joined, through the rendezvous before).
struct RankCall {
  RankCall(const HierarchyCall& c, const std::vector<int>& ranks, int t)
      : call(c), process(ranks), thread(t) {}
  const HierarchyCall& call;
  const std::vector<int>& process;  // ranks of this rank's process
  int thread;                       // this rank's place among them
  std::shared_ptr<LocalExchange> exchange;
  std::unique_ptr<LocalLink> threads;
  std::unique_ptr<ChannelLink> processes, between;
  bool met = false;  // went to the rendezvous, which then tells the siblings itself

  Status fail(const Status& s) {
    if (exchange && !threads) {  // joined, no link yet: one to fail (and fence) with
      try {
        threads = std::make_unique<LocalLink>(exchange, thread, call.deadline);
      } catch (const std::exception&) {
        exchange->abort(thread, s.message());
      }
    }
    if (threads) {
      threads->fail(s);
    } else if (process.size() > 1 && !met) {  // the siblings wait for this rank to join
      call.rendezvous->leave(call.key, thread, static_cast<int>(process.size()), call.label, s);
    }
    if (processes) processes->fail(s.code());
    if (between) between->fail(s.code());
    return s;
  }
};

Status run_rank(RankCall& rc, const std::vector<Buffers>& segments, const Reduction& reduction,
                const ConnectGroup& connect, HierarchyResult* result) {
  const HierarchyCall& call = rc.call;
  const GroupLayout& layout = *call.layout;
  const int rank = call.rank;
  const int t = rc.thread, j = layout.process_position(rank);
  std::vector<Tier> tiers{Tier{nullptr, layout.thread_owners()},
                          Tier{nullptr, layout.process_owners()}};
  // Every link first, joining this process's threads last: should the join fail (the
  // threads disagree), every peer of this rank learns it from a poisoned link at once,
  // not at its deadline.
  if (layout.owns_slice(rank) && layout.host_count() > 1) {
    if (call.between == Algorithm::kAuto) {
      return rc.fail(error(Code::kInternal, call.label, ": no algorithm between hosts planned"));
    }
    Status s = connect(layout.host_peers(rank), layout.host_of(rank), &rc.between);
    if (!s.ok()) return rc.fail(s);
  }
  if (t < tiers[0].owners && layout.process_peers(rank).size() > 1) {
    Status s = connect(layout.process_peers(rank), j, &rc.processes);
    if (!s.ok()) return rc.fail(s);
    tiers[1].link = rc.processes.get();
  }
  if (rc.process.size() > 1) {
    rc.met = true;
    Status s =
        call.rendezvous->join(call.key, t, static_cast<int>(rc.process.size()), call.signature,
                              call.label, call.deadline, segments, &rc.exchange);
    if (!s.ok()) return rc.fail(s);
    rc.threads = std::make_unique<LocalLink>(rc.exchange, t, call.deadline);
    tiers[0].link = rc.threads.get();
    // A sibling's failure ends this rank's waits on the other links too: it must leave
    // the call promptly, since the sibling waits for that before it returns.
    auto sibling_failed = [exchange = rc.exchange, label = call.label]() -> Status {
      if (!exchange->aborted()) return Status::Ok();
      return error(Code::kAborted, label, ": ", exchange->abort_reason());
    };
    if (rc.processes) rc.processes->also_fail_when(sibling_failed);
    if (rc.between) rc.between->also_fail_when(sibling_failed);
  }
  // bfloat16 on the wire: the step between hosts sends bfloat16; the tiers within a host
  // (memory, not a network) send float32 of rounded values (transport/wire_link.h).
  std::unique_ptr<WireLink> wire;
  Link* between = wire_view(rc.between.get(), call.signature.wire_bf16, &wire);
  Status s = allreduce_hierarchical(tiers, between, call.between, segments, reduction, call.chunks,
                                    call.deadline, &result->times);
  if (rc.between) result->sent_by_rail = rc.between->bytes_sent_by_rail();
  return s.ok() ? s : rc.fail(s);
}

}  // namespace

Status run_hierarchy(const HierarchyCall& call, const std::vector<Buffers>& segments,
                     const Reduction& reduction, const ConnectGroup& connect,
                     HierarchyResult* result) {
  const GroupLayout& layout = *call.layout;
  RankCall rc(call, layout.process_ranks(call.rank), layout.device_position(call.rank));
  // An exception (an allocation that failed) ends the call like any error, so that no
  // peer or sibling waits for this rank to its deadline.
  try {
    return run_rank(rc, segments, reduction, connect, result);
  } catch (const std::exception& e) {
    return rc.fail(error(Code::kInternal, call.label, ": ", e.what()));
  }
}

}  // namespace accl
