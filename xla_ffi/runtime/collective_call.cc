#include "runtime/collective_call.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "common/forced_unwind.h"
#include "runtime/call_plan.h"
#include "runtime/call_record.h"
#include "runtime/call_threads.h"
#include "runtime/collective.h"
#include "runtime/one_shot.h"
#include "runtime/stats.h"
#include "transport/wire_link.h"  // wire_sum_reduction

namespace accl {

Status reduction_for(const CallSpec& spec, Reduction* reduction) {
  const Signature& sig = spec.signature;
  reduction->elem_size = dtype_size(sig.dtype);
  if (sig.wire_bf16) {
    if (sig.dtype != DType::kF32 || sig.op != ReduceOp::kSum ||
        sig.collective != Collective::kAllReduce) {
      return error(Code::kInvalidArgument, "rank ", spec.rank, " of ", spec.label,
                   ": bfloat16 on the wire carries float32 sum all-reduces, not a ", describe(sig));
    }
    *reduction = wire_sum_reduction();
    return Status::Ok();
  }
  // An all-gather or a permutation moves data and never reduces it.
  if (!collective_row(sig.collective).reduces) return Status::Ok();
  reduction->fn = reduce_kernel(sig.dtype, sig.op);
  reduction->many = reduce_many_kernel(sig.dtype, sig.op);
  if (reduction->fn == nullptr) {
    return error(Code::kInvalidArgument, "rank ", spec.rank, " of ", spec.label, ": ",
                 reduce_op_name(sig.op), " is not defined for ", dtype_name(sig.dtype));
  }
  return Status::Ok();
}

CallPlan plan_in_process_call(const CallSpec& spec, const std::vector<uint64_t>& counts,
                              bool one_shot) {
  PlanRequest request;
  for (uint64_t count : counts) request.bytes += count * wire_elem_size(spec.signature);
  request.forced = spec.signature.algorithm;
  request.one_shot = one_shot;
  request.collective = spec.signature.collective;
  return plan_call(one_process_layout(spec.size), spec.rank, request, cost_model());
}

Status run_collective(Collective collective, Algorithm algorithm, Link& link,
                      const std::vector<Buffers>& segments, int size, const Reduction& reduction,
                      const CollectiveArgs& args) {
  return collective_row(collective).run_flat(algorithm, link, segments, size, reduction, args);
}

Status run_in_process(CallSpec spec, const std::vector<const void*>& in,
                      const std::vector<void*>& out, const std::vector<uint64_t>& counts,
                      Algorithm algorithm) {
  describe_layout(counts, &spec.signature);
  const Signature& sig = spec.signature;
  Reduction reduction;
  ACCL_RETURN_IF_ERROR(reduction_for(spec, &reduction));
  if (spec.rank < 0 || spec.rank >= spec.size) {
    return error(Code::kInvalidArgument, "rank ", spec.rank, " outside group of ", spec.size);
  }
  if (spec.group == nullptr) {
    return error(Code::kInternal, spec.label, ": the call has no group to meet in");
  }
  Rendezvous& meeting = spec.group->meeting();
  const auto start = spec.start();
  const Deadline deadline = Deadline::after_seconds(spec.timeout_s);
  const size_t elem = reduction.elem_size;

  // An exception (an allocation that failed) fails the call like any error: the other
  // ranks learn it at once instead of at their deadline (before the join, by leaving
  // it; join_call handles its own).
  std::vector<Buffers> segments;
  try {
    for (size_t k = 0; k < counts.size(); ++k) {
      segments.push_back(Buffers{in[k], out[k], counts[k], elem, static_cast<int>(k)});
    }
  } catch (const std::exception& e) {
    meeting.leave(spec.key, spec.rank, spec.size, spec.label, error(Code::kInternal, e.what()));
    throw;
  }
  std::shared_ptr<LocalExchange> exchange;
  Status s = meeting.join(spec.key, spec.rank, spec.size, sig, spec.label, deadline, segments,
                          &exchange, &spec.devices);
  if (s.ok()) {
    std::unique_ptr<LocalLink> link;
    try {
      // bfloat16 on the wire: float32 messages of rounded values within a process (memory,
      // not a network: transport/wire_link.h), the reduction's kernels rounding.
      link = std::make_unique<LocalLink>(exchange, spec.rank, deadline);
      s = run_collective(sig.collective, algorithm, *link, segments, spec.size, reduction,
                         spec.args);
    } catch (const std::exception& e) {
      s = error(Code::kInternal, spec.label, ": ", e.what());
    }
    if (!s.ok()) {
      if (link) {
        link->fail(s);
      } else {
        exchange->abort(spec.rank, s.message());
      }
    }
  }
  if (!s.ok()) {
    record_error(algorithm, sig.collective);
    return s;
  }
  record_call(algorithm, spec, start, Clock::now(), sig.count * wire_elem_size(sig));
  return Status::Ok();
}

CallSpec make_call(const CallGroup& group, const CallKey& key, const CallSettings& settings,
                   DType dtype, Clock::time_point issued) {
  CallSpec spec;
  spec.key = key;
  spec.devices = group.devices;
  spec.across_processes = group.across_processes;
  spec.rank = group.rank;
  spec.device = group.devices.empty() ? -1 : group.devices[group.rank];
  spec.size = static_cast<int>(group.devices.size());
  spec.lane = group.lane;
  // One numbering in errors: "call N" is the call's index in its group's lane, which a
  // call across processes names (runtime/communicator.cc); the count within a launch is
  // said only where a launch makes the call more than once (a loop).
  spec.label =
      key.seq == 0 ? group.label : str_cat(group.label, " (#", key.seq + 1, " in its launch)");
  spec.group = group.group;
  spec.args = group.args;
  spec.signature = settings.signature;
  spec.signature.dtype = dtype;
  spec.signature.wire_bf16 |= group.args.wire_bf16;
  spec.timeout_s = settings.timeout_s;
  spec.pipeline_chunks = settings.pipeline_chunks;
  spec.issued = issued;
  return spec;
}

namespace {

// The call's route and, for an in-process call, its plan: asked once, here.
struct Route {
  bool one_shot = false;
  Algorithm in_process = Algorithm::kAuto;  // an in-process call's schedule
};

// `one_shot`: whether the one-shot protocol may run (the caller does not wait).
Route route_of(const CallSpec& spec, const CallBuffers& buffers, bool one_shot) {
  Route route;
  if (spec.across_processes) return route;                    // the communicator plans
  if (spec.rank < 0 || spec.rank >= spec.size) return route;  // run_in_process refuses it
  const CallPlan plan = plan_in_process_call(spec, buffers.counts, one_shot);
  route.one_shot = plan.protocol == Protocol::kOneShot;
  route.in_process = plan.schedule;
  return route;
}

// The call's route run to its end on this thread (not the one-shot protocol).
Status run_route(const CallSpec& spec, const CallBuffers& buffers, const Route& route) {
  return spec.across_processes
             ? run_across_processes(spec, buffers.in, buffers.out, buffers.counts)
             : run_in_process(spec, buffers.in, buffers.out, buffers.counts, route.in_process);
}

// Runs a call that is not one-shot to its end, on a call thread. Nothing escapes (a call
// thread's escape is std::terminate), and `complete` runs either way: an exception (an
// allocation that failed) becomes the call's error.
void run_to_end(const CallSpec& spec, const CallBuffers& buffers, const Route& route,
                const std::function<void(const Status&)>& complete) {
  Status s;
  try {
    s = run_route(spec, buffers, route);
  } catch (const std::exception& e) {
    s = error(Code::kInternal, spec.label, ": ", e.what());
  } catch (ForcedUnwind&) {  // the thread was cancelled: end the call, unwind
    complete(error(Code::kAborted, spec.label, ": the call's thread was cancelled"));
    throw;
  } catch (...) {
    s = error(Code::kInternal, spec.label, ": an unknown exception");
  }
  complete(s);
}

}  // namespace

Status run_call(CallSpec spec, CallBuffers buffers) {
  Status ended;
  start_call(
      std::move(spec), std::move(buffers), [&ended](const Status& s) { ended = s; },
      RunOn::kCallerThread);
  return ended;
}

void start_call(CallSpec spec, CallBuffers buffers, std::function<void(const Status&)> done,
                RunOn run_on) {
  spec.signature.wire_bf16 |= buffers.wire_bf16;
  const Route route = route_of(spec, buffers, /*one_shot=*/run_on == RunOn::kCallThread);
  if (run_on == RunOn::kCallerThread) return done(run_route(spec, buffers, route));
  // Made before the call counts as begun: what throws here ends nothing begun.
  std::function<void(const Status&)> complete = [done = std::move(done)](const Status& s) {
    call_ended();
    done(s);
  };
  if (route.one_shot) {
    call_began();
    return one_shot(std::move(spec), buffers.in, std::move(buffers.out), buffers.counts,
                    std::move(complete));
  }
  auto shared = std::make_shared<std::function<void(const Status&)>>(std::move(complete));
  call_began();
  // Each call gets a thread of its own, so that calls of one device that XLA runs
  // concurrently never queue behind each other (their order may differ by device).
  std::string label;
  try {
    label = spec.label;
    run_on_call_thread([spec = std::move(spec), buffers = std::move(buffers), route, shared]() {
      run_to_end(spec, buffers, route, *shared);
    });
  } catch (const std::exception& e) {  // not queued (it never runs): the call ends here
    (*shared)(error(Code::kInternal, label, ": the call could not be started: ", e.what()));
  }
}

}  // namespace accl
