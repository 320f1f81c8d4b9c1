#include "runtime/hierarchy.h"

#include "transport/local.h"

namespace accl {

Status run_hierarchy(const HierarchyCall& call, const std::vector<Buffers>& segments,
                     const Reduction& reduction, const ConnectGroup& connect,
                     HierarchyResult* result) {
  const GroupLayout& layout = *call.layout;
  const int rank = call.rank;
  const int t = layout.device_position(rank), j = layout.process_position(rank);
  std::vector<Tier> tiers{Tier{nullptr, layout.thread_owners()},
                          Tier{nullptr, layout.process_owners()}};
  std::shared_ptr<LocalExchange> exchange;
  std::unique_ptr<LocalLink> threads;
  std::unique_ptr<ChannelLink> processes, between;
  auto fail = [&](const Status& s) {
    if (threads) threads->fail(s);
    if (processes) processes->fail(s.code());
    if (between) between->fail(s.code());
    return s;
  };
  // Every link first, joining this process's threads last: should the join fail (the
  // threads disagree), every peer of this rank learns it from a poisoned link at once,
  // not at its deadline.
  if (layout.owns_slice(rank) && layout.host_count() > 1) {
    if (call.between == Algorithm::kAuto) {
      return error(Code::kInternal, call.label, ": no algorithm between hosts planned");
    }
    Status s = connect(layout.host_peers(rank), layout.host_of(rank), &between);
    if (!s.ok()) return fail(s);
  }
  if (t < tiers[0].owners && layout.process_peers(rank).size() > 1) {
    Status s = connect(layout.process_peers(rank), j, &processes);
    if (!s.ok()) return fail(s);
    tiers[1].link = processes.get();
  }
  const std::vector<int>& process = layout.process_ranks(rank);
  if (process.size() > 1) {
    Status s = join_call(call.key, t, static_cast<int>(process.size()), call.signature, call.label,
                         call.deadline, segments, &exchange);
    if (!s.ok()) return fail(s);
    threads = std::make_unique<LocalLink>(exchange, t, call.deadline);
    tiers[0].link = threads.get();
    // A sibling's failure ends this rank's waits on the other links too: it must leave
    // the call promptly, since the sibling waits for that before it returns.
    auto sibling_failed = [exchange, label = call.label]() -> Status {
      if (!exchange->aborted()) return Status::Ok();
      return error(Code::kAborted, label, ": ", exchange->abort_reason());
    };
    if (processes) processes->also_fail_when(sibling_failed);
    if (between) between->also_fail_when(sibling_failed);
  }
  Status s = allreduce_hierarchical(tiers, between.get(), call.between, segments, reduction,
                                    call.chunks, call.deadline, &result->times);
  if (between) result->sent_by_rail = between->bytes_sent_by_rail();
  return s.ok() ? s : fail(s);
}

}  // namespace accl
