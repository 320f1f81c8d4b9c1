// Test-only entry points of jax_accl._accl: the message path of the algorithms over
// memory channels (no processes), and the wire parsers on arbitrary bytes (fuzzing).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "bindings/parse.h"
#include "common/dtype.h"
#include "reduce/reduce.h"
#include "transport/channel_link.h"
#include "transport/ring_channel.h"
#include "transport/tcp.h"

namespace nb = nanobind;

namespace accl {
namespace {

// Runs one all-reduce with a thread per rank over message channels (memory rings, the
// same framing and progress engine as the cross-process transports): the message path
// of every algorithm, without processes. Returns one error message per rank.
std::vector<std::string> allreduce_threads_channels(std::vector<uintptr_t> ins,
                                                    std::vector<uintptr_t> outs,
                                                    std::vector<uint64_t> counts,
                                                    const std::string& dtype,
                                                    const std::string& op,
                                                    const std::string& algorithm, int stripes,
                                                    double timeout_s) {
  const int n = static_cast<int>(ins.size());
  if (outs.size() != ins.size() || counts.size() != ins.size()) {
    throw nb::value_error("allreduce_threads_channels: one in, out and count per rank");
  }
  const DType dt = parse_or_throw<DType>(dtype, parse_dtype, "dtype");
  const ReduceOp rop = parse_or_throw<ReduceOp>(op, parse_reduce_op, "reduce op");
  const Algorithm alg = parse_or_throw<Algorithm>(algorithm, parse_algorithm, "algorithm");
  ReduceFn fn = reduce_kernel(dt, rop);
  if (fn == nullptr) throw nb::value_error("reduce op not defined for dtype");
  const ChannelMesh mesh = make_channel_mesh(
      n, stripes, [](int, int, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
        make_memory_channels(x, y);
      });
  std::vector<std::string> errors(n);
  {
    nb::gil_scoped_release release;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        auto channels = channels_of(mesh, r);
        const Deadline deadline = Deadline::after_seconds(timeout_s);
        ChannelLink link(r, std::move(channels), 42, str_cat("channel test rank ", r), deadline);
        const size_t elem = dtype_size(dt);
        Status s = run_allreduce(alg, link,
                                 {Buffers{reinterpret_cast<const void*>(ins[r]),
                                          reinterpret_cast<void*>(outs[r]), counts[r], elem, 0}},
                                 Reduction{fn, elem});
        if (!s.ok()) errors[r] = str_cat(code_name(s.code()), ": ", s.message());
      });
    }
    for (auto& t : threads) t.join();
  }
  return errors;
}

// Checks `data` as a connection's first bytes against `secret`: "" if admitted.
std::string parse_handshake(nb::bytes data, nb::bytes secret) {
  Handshake h;
  if (data.size() < sizeof(h)) return "truncated handshake";
  std::memcpy(&h, data.c_str(), sizeof(h));
  Status s = check_handshake(h, std::string(secret.c_str(), secret.size()));
  return s.ok() ? "" : s.message();
}

// Feeds raw `data` to a ChannelLink expecting one `expected`-byte message (call tag 42)
// on its first frame; returns "" and the payload when accepted, else the error.
nb::tuple receive_frames(nb::bytes data, size_t expected, double timeout_s) {
  std::unique_ptr<Channel> writer, reader;
  make_memory_channels(&writer, &reader);
  size_t written = 0;
  while (written < data.size()) {
    size_t n = 0;
    writer->write_some(data.c_str() + written, data.size() - written, &n);
    if (n == 0) break;  // ring full: the rest is never delivered
    written += n;
  }
  std::vector<std::vector<Channel*>> channels{{reader.get()}, {}};
  ChannelLink link(1, std::move(channels), 42, "fuzz", Deadline::after_seconds(timeout_s));
  std::string payload(expected, '\0');
  Status s = link.recv(0, payload.data(), expected);
  if (!s.ok()) return nb::make_tuple(s.message(), nb::bytes("", 0));
  return nb::make_tuple(std::string(), nb::bytes(payload.data(), payload.size()));
}

}  // namespace

void register_testing(nb::module_& m) {
  m.def("allreduce_threads_channels", &allreduce_threads_channels, nb::arg("ins"),
        nb::arg("outs"), nb::arg("counts"), nb::arg("dtype"), nb::arg("op"),
        nb::arg("algorithm"), nb::arg("stripes") = 1, nb::arg("timeout_s") = 30.0);
  m.def("parse_handshake", &parse_handshake, nb::arg("data"), nb::arg("secret"));
  m.def("receive_frames", &receive_frames, nb::arg("data"), nb::arg("expected"),
        nb::arg("timeout_s") = 0.002);
}

}  // namespace accl
