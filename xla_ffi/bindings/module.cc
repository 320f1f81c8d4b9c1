// The nanobind module jax_accl._accl: FFI handler capsules for XLA, the bootstrap, stats
// and the cost model; the runtime's layout and plan are bound in plan.cc. The tests'
// entry points are jax_accl._accl_testing (testing.cc). Only bindings/ sees nanobind.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/measured.h"
#include "algorithms/select.h"
#include "algorithms/step_times.h"
#include "bindings/parse.h"
#include "common/dtype.h"
#include "ffi/handlers.h"
#include "profiler/plugin_profiler.h"
#include "reduce/wire.h"
#include "runtime/collective.h"
#include "runtime/collective_call.h"
#include "runtime/communicator.h"
#include "runtime/stall.h"
#include "runtime/stats.h"
#include "runtime/trace.h"
#include "runtime/world.h"
#include "transport/channel_link.h"
#include "transport/cma.h"
#include "transport/ring_channel.h"
#include "transport/tcp.h"

namespace nb = nanobind;

namespace accl {
void register_plan(nb::module_& m);  // plan.cc
}  // namespace accl

namespace accl {
namespace {

// Each target's handlers by FFI stage, as jax.ffi.register_ffi_target takes them: every
// row of the collectives' table (runtime/collective.h) one target, all on the one
// instantiate handler (its `collective` attribute says which) and the one execute
// handler but the ragged all-to-all's (three operands: the row's layout_table).
nb::dict registrations() {
  nb::dict targets;
  auto stages = [](XLA_FFI_Error* (*execute)(XLA_FFI_CallFrame*)) {
    nb::dict out;
    out["instantiate"] = nb::capsule(reinterpret_cast<void*>(AcclCollectiveInstantiate));
    out["execute"] = nb::capsule(reinterpret_cast<void*>(execute));
    return out;
  };
  for (int c = 0; c < kNumCollectives; ++c) {
    const CollectiveRow& row = collective_row(static_cast<Collective>(c));
    targets[row.target] =
        stages(row.layout_table ? AcclRaggedAllToAllHandler : AcclCollectiveHandler);
  }
  // The all-reduce's float32 sums whose bytes travel as bfloat16: its site, an execute
  // handler of their own (ffi/collective_ffi.cc).
  targets[kAllreduceBf16WireTarget] = stages(AcclWireBf16Handler);
  return targets;
}

// Each target's `collective` attribute (enum Collective), for the lowering.
nb::dict collective_codes() {
  nb::dict codes;
  for (int c = 0; c < kNumCollectives; ++c) {
    codes[collective_row(static_cast<Collective>(c)).target] = c;
  }
  codes[kAllreduceBf16WireTarget] = static_cast<int>(Collective::kAllReduce);
  return codes;
}

// The types of the handlers' state, as jax.ffi.register_ffi_type takes them.
nb::dict state_types() {
  nb::dict site, types;
  site["type_id"] = nb::capsule(reinterpret_cast<void*>(AcclSiteTypeId()));
  site["type_info"] = nb::capsule(reinterpret_cast<void*>(AcclSiteTypeInfo()));
  types["accl_collective_site"] = site;
  return types;
}

// Multi-process bootstrap (driven by jax_accl/distributed.py).
// rails: (name, ip, weight). Returns the listener port of each rail.
std::vector<int> world_start(int process_index, int process_count, nb::bytes secret,
                             const std::string& host,
                             std::vector<std::tuple<std::string, std::string, double>> rails,
                             int stripes_per_rail, bool cross_memory_attach,
                             std::pair<int, int> ports) {
  if (ports.first < 0 || ports.second > 65535 || ports.first > ports.second) {
    throw std::invalid_argument("ports: a range of TCP ports (first <= last, 0-65535)");
  }
  std::vector<Rail> list;
  for (auto& [name, ip, weight] : rails) {
    list.push_back(Rail{name, ip, 0, weight, static_cast<uint16_t>(ports.first),
                        static_cast<uint16_t>(ports.second)});
  }
  Status s = World::start(process_index, process_count,
                          std::string(static_cast<const char*>(secret.data()), secret.size()), host,
                          &list, stripes_per_rail, cross_memory_attach);
  if (!s.ok()) throw std::runtime_error(s.message());
  std::vector<int> bound;
  for (const Rail& r : list) bound.push_back(r.port);
  return bound;
}

// processes[i] = (host, [(rail name, ip, port, weight)], [device ids]) of process i.
void world_set_processes(
    std::vector<
        std::tuple<std::string, std::vector<std::tuple<std::string, std::string, int, double>>,
                   std::vector<int64_t>>>
        processes) {
  const std::shared_ptr<World> w = World::get();
  if (w == nullptr) throw std::runtime_error("world_start() first");
  std::vector<ProcessEntry> entries;
  for (size_t i = 0; i < processes.size(); ++i) {
    auto& [host, rails, devices] = processes[i];
    ProcessEntry e;
    e.index = static_cast<int>(i);
    e.host = host;
    for (auto& [name, ip, port, weight] : rails) {
      e.rails.push_back(Rail{name, ip, static_cast<uint16_t>(port), weight});
    }
    e.devices = devices;
    entries.push_back(std::move(e));
  }
  Status s = w->set_processes(std::move(entries));
  if (!s.ok()) throw std::runtime_error(s.message());
}

// Installs `agree(group, epoch, failed_call, call, processes, me, timeout_s,
// abort_generation) -> (str, start)` ("" and the call the epoch starts at when every
// process of the group agreed, else why not) as the way groups
// agree on a new epoch after a failed call (runtime/communicator.h). Called on a device
// thread, which takes the GIL for it.
void install_epoch_agreement(nb::callable agree) {
  PyObject* fn = agree.ptr();
  Py_INCREF(fn);  // kept for the process's lifetime: device threads may call it until exit
  accl::set_epoch_agreement([fn](const EpochAgreement& a, uint64_t* start) -> Status {
    const double left = std::chrono::duration<double>(a.deadline.at - Clock::now()).count();
    nb::gil_scoped_acquire gil;
    try {
      nb::object result = nb::borrow<nb::callable>(fn)(
          a.group, a.epoch, a.failed_call, a.call, a.processes, a.me, std::max(0.0, left),
          a.deadline.generation == Deadline::kNotAbortable ? -1 : int64_t(a.deadline.generation));
      auto [message, agreed] = nb::cast<std::pair<std::string, uint64_t>>(result);
      *start = agreed;
      if (message.empty()) return Status::Ok();
      return Status(a.deadline.aborted() ? Code::kAborted : Code::kTimeout, message);
    } catch (const std::exception& e) {
      return error(Code::kInternal, "agreeing on epoch ", a.epoch, ": ", e.what());
    }
  });
}

nb::dict call_counts(const AlgorithmStats& s) {
  nb::dict entry;
  entry["calls"] = s.calls.load();
  entry["bytes"] = s.bytes.load();
  entry["seconds"] = s.nanoseconds.load() * 1e-9;
  entry["errors"] = s.errors.load();
  return entry;
}

nb::dict stats() {
  nb::dict out;
  nb::dict algorithms;
  for (int a = 1; a < kNumAlgorithms; ++a) {
    algorithms[algorithm_name(static_cast<Algorithm>(a))] = call_counts(algorithm_stats()[a]);
  }
  out["algorithms"] = algorithms;
  nb::dict collectives;
  for (int c = 0; c < kNumCollectives; ++c) {
    collectives[collective_name(static_cast<Collective>(c))] = call_counts(collective_stats()[c]);
  }
  out["collectives"] = collectives;
  nb::dict xla_collectives;
  for (auto& [function, s] : all_xla_collective_stats()) {
    xla_collectives[function.c_str()] = call_counts(*s);
  }
  out["xla_collectives"] = xla_collectives;
  nb::dict transports;
  for (auto& [key, t] : all_traffic_stats()) {
    nb::dict entry;
    entry["bytes_sent"] = t->bytes_sent.load();
    entry["bytes_received"] = t->bytes_received.load();
    entry["messages_sent"] = t->messages_sent.load();
    transports[key.c_str()] = entry;
  }
  out["transports"] = transports;
  nb::dict phases;
  for (int p = 0; p < kNumPhases; ++p) {
    phases[phase_name(static_cast<Phase>(p))] = phase_nanoseconds()[p].load() * 1e-9;
  }
  out["phase_seconds"] = phases;
  nb::dict streamed;
  streamed["pair"] = streamed_segments().pair.load();
  streamed["ring"] = streamed_segments().ring.load();
  out["streamed_segments"] = streamed;
  out["max_calls_in_flight"] = max_calls_in_flight();
  out["calls_in_flight"] = calls_in_flight();
  out["call_sites"] = call_sites();
  const std::shared_ptr<World> w = World::get();
  out["refused_connections"] = w ? w->refused_connections() : 0;
  out["communicator_lookups"] = w ? w->communicator_lookups() : 0;
  out["cma_fallbacks"] = w ? w->cross_memory_fallbacks() : 0;
  out["recoveries"] = w ? w->recoveries() : 0;
  return out;
}

}  // namespace
}  // namespace accl

NB_MODULE(_accl, m) {
  using namespace accl;
  m.doc() = "jax_accl native core: hierarchical all-reduce algorithms and XLA FFI handlers";
  m.def("registrations", &registrations, "FFI handler capsules by target name and stage");
  m.def("collective_codes", &collective_codes, "each FFI target's `collective` attribute");
  m.def("state_types", &state_types, "FFI state types (type id and info capsules) by name");
  m.def(
      "ffi_api_version", [] { return std::make_pair(kAcclFfiApiMajor, kAcclFfiApiMinor); },
      "The XLA FFI API version (major, minor) the handlers were compiled against");
  register_plan(m);
  m.def("world_start", &world_start, nb::arg("process_index"), nb::arg("process_count"),
        nb::arg("secret"), nb::arg("host"), nb::arg("rails"), nb::arg("stripes_per_rail"),
        nb::arg("cross_memory_attach"), nb::arg("ports") = std::pair<int, int>(0, 0));
  m.def("cross_memory_attach_allowed", &cross_memory_attach_allowed,
        "whether this process lets its user's other processes ptrace it (PR_SET_PTRACER)");
  m.def("set_debug_calls", &set_debug_calls, nb::arg("on"),
        "one line per all-reduce per device on stderr (JAX_ACCL_DEBUG=DEBUG)");
  // The names Python uses for the codes the FFI handler decodes: one source, the enums.
  nb::dict algorithm_codes;
  for (int a = 0; a < kNumAlgorithms; ++a) {
    algorithm_codes[algorithm_name(static_cast<Algorithm>(a))] = a;
  }
  m.attr("ALGORITHM_CODES") = algorithm_codes;
  nb::dict op_codes;
  for (int op = 0; op < kNumReduceOps; ++op)
    op_codes[reduce_op_name(static_cast<ReduceOp>(op))] = op;
  m.attr("OP_CODES") = op_codes;
  m.def("world_set_processes", &world_set_processes, nb::arg("processes"));
  m.def(
      "world_announce_job",
      [](int index, int count, double timeout_s) {
        World::announce_job(World::Job{index, count, timeout_s});
      },
      nb::arg("process_index"), nb::arg("process_count"), nb::arg("timeout_s"));
  m.def(
      "world_stop",
      [](double wait_s, bool leaving) {
        nb::gil_scoped_release release;
        return World::stop(wait_s, leaving);
      },
      nb::arg("wait_s") = 10.0, nb::arg("leaving") = true,
      "ends the calls in flight, waits for them (up to wait_s), then closes the transports; "
      "False if a call was still running (the World is then left to it); leaving: the "
      "process leaves the job (its peers are told so), rather than restarting");
  m.def("world_started", [] { return World::get() != nullptr; });
  m.def("set_epoch_agreement", &install_epoch_agreement, nb::arg("agree"));
  m.def("abort", &abort_pending_waits,
        "every pending jax_accl call of this process fails at once (kAborted)");
  m.def("abort_generation", &abort_generation, "how many times abort() was called");
  m.def(
      "profiler_capsule",
      [] {
        return nb::capsule(const_cast<xla_abi::PjrtApiHead*>(profiler_plugin_api()), "pjrt_c_api");
      },
      "a PJRT_Api capsule whose profiler extension XLA's profiler sessions call "
      "(jax._src.lib._profiler.register_plugin_profiler)");
  m.def(
      "lane_positions",
      [] {
        nb::list out;
        const std::shared_ptr<World> w = World::get();
        if (!w) return out;
        std::vector<World::LanePosition> lanes;
        {
          // A call recovering holds its communicator's lock while it waits for the GIL
          // (the epoch agreement runs in Python).
          nb::gil_scoped_release release;
          lanes = w->lane_positions();
        }
        for (const World::LanePosition& l : lanes) {
          const bool failed = l.position.failed_call != Communicator::kNoCall;
          out.append(nb::make_tuple(l.id, l.processes, l.position.epoch, l.position.next_call,
                                    failed ? int64_t(l.position.failed_call) : int64_t{-1}));
        }
        return out;
      },
      "(lane id, the group's processes, epoch, next call, failed call or -1) per lane of this "
      "process");
  m.def(
      "align_lane",
      [](uint64_t id, uint64_t next_call, int64_t failed_call) {
        const std::shared_ptr<World> w = World::get();
        if (!w) return;
        nb::gil_scoped_release release;
        w->align_lane(id, next_call,
                      failed_call < 0 ? Communicator::kNoCall : uint64_t(failed_call));
      },
      nb::arg("id"), nb::arg("next_call"), nb::arg("failed_call"),
      "moves this process's ranks of lane `id` to the agreed call (jax_accl.recover())");
  m.def("stats", &stats);
  m.def("reset_stats", &reset_stats);
  m.def("pending_calls", &pending_calls);
  m.def("reduce_isa", &reduce_isa);
  m.def(
      "stream_copy",
      [](uintptr_t dst, uintptr_t src, size_t bytes) {
        nb::gil_scoped_release release;
        stream_copy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
        stream_fence();
      },
      nb::arg("dst"), nb::arg("src"), nb::arg("bytes"),
      "memcpy with non-temporal stores (the bench's copy bandwidth), without the GIL");
  m.def(
      "choose_algorithm",
      [](int n, size_t bytes, bool peer_memory) {
        return std::string(algorithm_name(choose_algorithm(n, bytes, peer_memory, cost_model())));
      },
      nb::arg("n"), nb::arg("bytes"), nb::arg("peer_memory") = true);
  m.def(
      "choose_one_host",
      [](int processes, int k, size_t bytes, bool cma) {
        return std::string(
            algorithm_name(choose_one_host(processes * k, processes, k, bytes, cma, cost_model())));
      },
      nb::arg("processes"), nb::arg("devices_per_process"), nb::arg("bytes"), nb::arg("cma"),
      "The automatic choice for a group of `processes` x `devices_per_process` on one host.");
  m.def(
      "predict_seconds",
      [](const std::string& algorithm, int n, size_t bytes, bool peer_memory) {
        return predict_seconds(parse_or_throw<Algorithm>(algorithm, parse_algorithm, "algorithm"),
                               n, bytes, peer_memory, cost_model());
      },
      nb::arg("algorithm"), nb::arg("n"), nb::arg("bytes"), nb::arg("peer_memory") = true);
  m.def(
      "predict_one_host",
      [](const std::string& algorithm, int processes, int k, size_t bytes) {
        return predict_one_host_seconds(
            parse_or_throw<Algorithm>(algorithm, parse_algorithm, "algorithm"), processes * k,
            processes, k, bytes, cost_model());
      },
      nb::arg("algorithm"), nb::arg("processes"), nb::arg("devices_per_process"), nb::arg("bytes"),
      "The model's seconds for `algorithm` over `processes` x `devices_per_process` on one "
      "host (reduce_broadcast: by cross-memory attach).");
  m.def(
      "set_measured_one_host",
      [](int processes, int k, const std::map<std::string, std::pair<double, double>>& lines) {
        std::vector<MeasuredLine> parsed;
        for (const auto& [name, line] : lines) {
          parsed.push_back({parse_or_throw<Algorithm>(name, parse_algorithm, "algorithm"),
                            line.first, line.second});
        }
        Status s = set_measured_one_host(processes, k, std::move(parsed));
        if (!s.ok()) throw nb::value_error(s.message().c_str());
      },
      nb::arg("processes"), nb::arg("devices_per_process"), nb::arg("lines"),
      "Calibrated times {algorithm: (latency_s, per_byte_s)} on processes x "
      "devices_per_process (bench --calibrate); choose_one_host then goes by them.");
  m.def("clear_measured_one_host", &clear_measured_one_host);
  m.def(
      "measured_one_host",
      [](int processes, int k, const std::string& algorithm, size_t bytes) {
        return measured_one_host_seconds(
            processes, k, parse_or_throw<Algorithm>(algorithm, parse_algorithm, "algorithm"),
            bytes);
      },
      nb::arg("processes"), nb::arg("devices_per_process"), nb::arg("algorithm"), nb::arg("bytes"));
  m.def(
      "set_pipeline_chunks",
      [](int chunks) {
        if (chunks < 0) throw nb::value_error("pipeline chunks must be >= 0 (0: automatic)");
        pipeline_chunks_setting() = chunks;
      },
      nb::arg("chunks"), "JAX_ACCL_PIPELINE_CHUNKS: 0 automatic, 1 off, n > 1 forced");
  m.def(
      "set_xla_wire_dtype",
      [](const std::string& name) {
        if (name != "" && name != "bfloat16") {
          throw nb::value_error("XLA's wire dtype: bfloat16 or empty (as the operand)");
        }
        xla_wire_bf16_setting() = name == "bfloat16";
      },
      nb::arg("name"),
      "JAX_ACCL_WIRE_DTYPE: bfloat16, XLA's float32 sum all-reduces travel as bfloat16");
  m.def(
      "set_between_hosts",
      [](const std::string& name) {
        const Algorithm a = parse_or_throw<Algorithm>(name, parse_algorithm, "algorithm");
        if (a != Algorithm::kAuto && a != Algorithm::kDirect && a != Algorithm::kRing &&
            a != Algorithm::kHalvingDoubling) {
          throw nb::value_error("between hosts: direct, ring, halving_doubling or auto");
        }
        between_hosts_setting().store(a);
      },
      nb::arg("algorithm"),
      "The algorithm between hosts of this process's hierarchical all-reduces (bench "
      "--steps); 'auto': the cost model's");
  m.def(
      "set_step_times", [](bool on) { step_times_enabled().store(on); }, nb::arg("on"),
      "Whether the step between hosts records each of its steps (bench --steps): traced as "
      "'step between hosts k from p' events");
  m.def(
      "set_stall_seconds",
      [](double seconds) {
        if (!(seconds >= 0)) throw nb::value_error("stall seconds must be >= 0");
        stall_seconds().store(seconds, std::memory_order_relaxed);
      },
      nb::arg("seconds"),
      "JAX_ACCL_STALL_S: how long a call waits for devices XLA:CPU never started (0: never)");
  m.def(
      "set_xla_pool",
      [](int threads, int devices) {
        if (threads < 0 || devices < 0) throw nb::value_error("pool sizes must be >= 0");
        set_xla_pool(threads, devices);
      },
      nb::arg("threads"), nb::arg("devices"),
      "XLA:CPU's thread pool as the client was made (0 threads: unknown): only one of fewer "
      "than two threads per device can stall (runtime/stall.h)");
  m.def("xla_pool", &xla_pool, "(threads, devices) of set_xla_pool; (0, 0) until set");
  m.def(
      "set_link_spin_us",
      [](int microseconds) {
        if (microseconds < 0) throw nb::value_error("spin microseconds must be >= 0");
        link_spin_microseconds().store(microseconds, std::memory_order_relaxed);
      },
      nb::arg("microseconds"),
      "JAX_ACCL_SPIN_US: how long a rank waiting on sockets looks before it sleeps");
  m.def(
      "set_tcp_congestion",
      [](const std::string& name) {
        Status s = set_tcp_congestion(name);
        if (!s.ok()) throw nb::value_error(s.message().c_str());
      },
      nb::arg("name"), "JAX_ACCL_TCP_CONGESTION: the connections' congestion control");
  m.def("tcp_congestion", [] { return tcp_congestion(); });
  m.def("link_spin_us", [] { return link_spin_microseconds().load(std::memory_order_relaxed); });
  m.def(
      "pipeline_chunks",
      [](int hosts, int processes, int k, int rails, size_t bytes) {
        return choose_pipeline_chunks(hosts, processes, k, rails, bytes, cost_model());
      },
      nb::arg("hosts"), nb::arg("processes"), nb::arg("devices_per_process"), nb::arg("rails"),
      nb::arg("bytes"), "The cost model's pipeline chunk count for a hierarchical call.");
  m.def(
      "get_cost_model",
      [] {
        nb::dict values;
        for (const CostModelField& f : kCostModelFields) values[f.name] = cost_model().*f.member;
        return values;
      },
      "The cost model's constants by name, in seconds and seconds per byte.");
  m.def(
      "default_cost_model",
      [] {
        nb::dict values;
        const CostModel defaults;
        for (const CostModelField& f : kCostModelFields) values[f.name] = defaults.*f.member;
        return values;
      },
      "The cost model's constants before any calibration or setting, by name.");
  m.def(
      "set_cost_model",
      [](nb::kwargs values) {
        std::map<std::string, double> named;
        for (auto [key, value] : values)
          named[nb::cast<std::string>(key)] = nb::cast<double>(value);
        cost_model() = with_constants(cost_model(), named);
      },
      "Sets the named constants (see get_cost_model); the others keep their values.");
}
