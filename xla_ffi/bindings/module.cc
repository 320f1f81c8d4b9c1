// The nanobind module jax_accl._accl: FFI handler capsules for XLA, the native test
// entry point (threads as ranks), stats and the cost model. Only this file sees nanobind.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/select.h"
#include "ffi/handlers.h"
#include "runtime/allreduce.h"
#include "runtime/stats.h"

namespace nb = nanobind;

namespace accl {
namespace {

nb::dict registrations() {
  nb::dict targets;
  targets["accl_allreduce"] = nb::capsule(reinterpret_cast<void*>(AcclAllreduceHandler));
  return targets;
}

template <typename T, typename Parse>
T parse_or_throw(const std::string& name, Parse parse, const char* what) {
  T value;
  if (!parse(name, &value)) throw nb::value_error((std::string("unknown ") + what + ": " + name).c_str());
  return value;
}

// Runs one all-reduce with a thread per rank over the in-process transport. Rank r
// reads count[r] elements at ins[r] and writes outs[r]; the per-rank signature lists
// exist so that tests can make ranks disagree. Ranks not in `present` never arrive.
// Returns one error message per rank ("" where the rank succeeded).
std::vector<std::string> allreduce_threads(std::vector<uintptr_t> ins, std::vector<uintptr_t> outs,
                                           std::vector<uint64_t> counts,
                                           std::vector<std::string> dtypes,
                                           std::vector<std::string> ops,
                                           std::vector<std::string> algorithms,
                                           std::vector<int> present, double timeout_s) {
  const int n = static_cast<int>(ins.size());
  if (outs.size() != ins.size() || counts.size() != ins.size() || dtypes.size() != ins.size() ||
      ops.size() != ins.size() || algorithms.size() != ins.size()) {
    throw nb::value_error("allreduce_threads: every per-rank list needs one entry per rank");
  }
  std::vector<CallSpec> specs(n);
  const int64_t op_id = fresh_op_id();
  for (int r = 0; r < n; ++r) {
    specs[r].key = CallKey{0, op_id, 0, 0};
    specs[r].rank = r;
    specs[r].size = n;
    specs[r].label = str_cat("native test group of ", n, " (op ", op_id, ")");
    specs[r].signature.dtype = parse_or_throw<DType>(dtypes[r], parse_dtype, "dtype");
    specs[r].signature.op = parse_or_throw<ReduceOp>(ops[r], parse_reduce_op, "reduce op");
    specs[r].signature.algorithm =
        parse_or_throw<Algorithm>(algorithms[r], parse_algorithm, "algorithm");
    specs[r].timeout_s = timeout_s;
  }
  std::vector<std::string> errors(n);
  {
    nb::gil_scoped_release release;
    std::vector<std::thread> threads;
    for (int r : present) {
      if (r < 0 || r >= n) continue;
      threads.emplace_back([&, r] {
        Status s = allreduce_local(specs[r], {reinterpret_cast<const void*>(ins[r])},
                                   {reinterpret_cast<void*>(outs[r])}, {counts[r]});
        if (!s.ok()) errors[r] = str_cat(code_name(s.code()), ": ", s.message());
      });
    }
    for (auto& t : threads) t.join();
  }
  return errors;
}

nb::dict stats() {
  nb::dict out;
  for (int a = 1; a < kNumAlgorithms; ++a) {
    const AlgorithmStats& s = algorithm_stats()[a];
    nb::dict entry;
    entry["calls"] = s.calls.load();
    entry["bytes"] = s.bytes.load();
    entry["seconds"] = s.nanoseconds.load() * 1e-9;
    entry["errors"] = s.errors.load();
    out[algorithm_name(static_cast<Algorithm>(a))] = entry;
  }
  return out;
}

}  // namespace
}  // namespace accl

NB_MODULE(_accl, m) {
  using namespace accl;
  m.doc() = "jax_accl native core: hierarchical all-reduce algorithms and XLA FFI handlers";
  m.def("registrations", &registrations, "FFI handler capsules by target name");
  m.def("allreduce_threads", &allreduce_threads, nb::arg("ins"), nb::arg("outs"),
        nb::arg("counts"), nb::arg("dtypes"), nb::arg("ops"), nb::arg("algorithms"),
        nb::arg("present"), nb::arg("timeout_s"));
  m.def("stats", &stats);
  m.def("reset_stats", &reset_stats);
  m.def("pending_calls", &pending_calls);
  m.def("reduce_isa", &reduce_isa);
  m.def(
      "choose_algorithm",
      [](int n, size_t bytes, bool peer_memory) {
        return std::string(algorithm_name(choose_algorithm(n, bytes, peer_memory, cost_model())));
      },
      nb::arg("n"), nb::arg("bytes"), nb::arg("peer_memory") = true);
  m.def(
      "predict_seconds",
      [](const std::string& algorithm, int n, size_t bytes, bool peer_memory) {
        return predict_seconds(parse_or_throw<Algorithm>(algorithm, parse_algorithm, "algorithm"),
                               n, bytes, peer_memory, cost_model());
      },
      nb::arg("algorithm"), nb::arg("n"), nb::arg("bytes"), nb::arg("peer_memory") = true);
  m.def("get_cost_model", [] {
    const CostModel& c = cost_model();
    return std::vector<double>{c.alpha_s, c.beta_s_per_byte, c.gamma_s_per_byte};
  });
  m.def("set_cost_model", [](double alpha, double beta, double gamma) {
    cost_model() = CostModel{alpha, beta, gamma};
  });
}
