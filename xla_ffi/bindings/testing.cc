// The nanobind module jax_accl._accl_testing, the tests' harness (jax_accl imports it
// never): all-reduces with a thread per rank over the in-process transport and over
// memory channels, the hierarchy on simulated hosts (no processes), the wire parsers on
// arbitrary bytes (fuzzing). It links the same core library as jax_accl._accl, so both
// see one World, one set of stats and one abort flag.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "bindings/parse.h"
#include "common/dtype.h"
#include "common/faults.h"
#include "common/health.h"
#include "reduce/reduce.h"
#include "runtime/call_plan.h"
#include "runtime/collective_call.h"
#include "runtime/rendezvous.h"
#include "runtime/stall.h"
#include "testing/cma_lanes.h"
#include "testing/simulated_hosts.h"
#include "transport/channel_link.h"
#include "transport/handshake.h"
#include "transport/ring_channel.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "transport/wire_link.h"

namespace nb = nanobind;

namespace accl {
namespace {

// Where the ranks of the harness's in-process calls meet (for as long as the module).
const std::shared_ptr<Group>& harness_group() {
  static const auto* group = new std::shared_ptr<Group>(std::make_shared<Group>());
  return *group;
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
                                           std::vector<int> present, double timeout_s,
                                           bool wire_bf16) {
  const int n = static_cast<int>(ins.size());
  if (outs.size() != ins.size() || counts.size() != ins.size() || dtypes.size() != ins.size() ||
      ops.size() != ins.size() || algorithms.size() != ins.size()) {
    throw nb::value_error("allreduce_threads: every per-rank list needs one entry per rank");
  }
  std::vector<CallSpec> specs;
  const int64_t op_id = fresh_op_id();
  CallGroup group;
  group.devices.assign(n, -1);  // no XLA device: a missing rank is late, never stalled
  group.label = str_cat("native test group of ", n, " (op ", op_id, ")");
  group.group = harness_group();
  for (int r = 0; r < n; ++r) {  // each rank's own settings: tests make ranks disagree
    group.rank = r;
    CallSettings settings;
    settings.signature.op = parse_or_throw<ReduceOp>(ops[r], parse_reduce_op, "reduce op");
    settings.signature.algorithm =
        parse_or_throw<Algorithm>(algorithms[r], parse_algorithm, "algorithm");
    settings.timeout_s = timeout_s;
    specs.push_back(make_call(group, CallKey{0, op_id, 0, 0}, settings,
                              parse_or_throw<DType>(dtypes[r], parse_dtype, "dtype")));
  }
  std::vector<std::string> errors(n);
  {
    nb::gil_scoped_release release;
    std::vector<std::thread> threads;
    for (int r : present) {
      if (r < 0 || r >= n) continue;
      threads.emplace_back([&, r] {
        Status s = run_call(specs[r], CallBuffers{specs[r].signature.dtype,
                                                  {reinterpret_cast<const void*>(ins[r])},
                                                  {reinterpret_cast<void*>(outs[r])},
                                                  {counts[r]},
                                                  {counts[r]},
                                                  wire_bf16});
        if (!s.ok()) errors[r] = str_cat(code_name(s.code()), ": ", s.message());
      });
    }
    for (auto& t : threads) t.join();
  }
  return errors;
}

// Runs one all-reduce with a thread per rank over message channels (memory rings, the
// same framing and progress engine as the cross-process transports): the message path
// of every algorithm, without processes. Returns one error message per rank.
std::vector<std::string> allreduce_threads_channels(std::vector<uintptr_t> ins,
                                                    std::vector<uintptr_t> outs,
                                                    std::vector<uint64_t> counts,
                                                    const std::string& dtype, const std::string& op,
                                                    const std::string& algorithm, int stripes,
                                                    double timeout_s, bool wire_bf16) {
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
        // bfloat16 on the wire: float32 buffers, bfloat16 messages (transport/wire_link.h).
        std::unique_ptr<WireLink> wire;
        Link* used = wire_view(&link, wire_bf16, &wire);
        Status s = run_allreduce(alg, *used,
                                 {Buffers{reinterpret_cast<const void*>(ins[r]),
                                          reinterpret_cast<void*>(outs[r]), counts[r], elem, 0}},
                                 wire_bf16 ? wire_sum_reduction() : Reduction{fn, elem});
        if (!s.ok()) errors[r] = str_cat(code_name(s.code()), ": ", s.message());
      });
    }
    for (auto& t : threads) t.join();
  }
  return errors;
}

// Runs one hierarchical all-reduce on simulated hosts over memory rings:
// places[r] = (host, process) of rank r (testing/simulated_hosts.h). Each rank's buffer
// is cut into segments of `segment_counts` elements (or one segment when empty).
// Returns one error message per rank ("" where it succeeded) and what each rank ran:
// {"schedule", "between", "chunks", "protocol"} of the plan it was given, and the phases
// its run recorded ("reduce_scatters", "between_hosts", "all_gathers").
nb::dict hierarchical_threads_report(std::vector<std::pair<std::string, int>> places,
                                     std::vector<uintptr_t> ins, std::vector<uintptr_t> outs,
                                     std::vector<uint64_t> counts,
                                     std::vector<uint64_t> segment_counts, const std::string& dtype,
                                     const std::string& op, const std::string& between_algorithm,
                                     int chunks, double timeout_s, int rails) {
  if (ins.size() != places.size() || outs.size() != places.size() ||
      counts.size() != places.size()) {
    throw nb::value_error("hierarchical_threads: one place, in, out and count per rank");
  }
  SimulatedCall call;
  for (size_t r = 0; r < places.size(); ++r) {
    call.places.push_back(RankPlace{places[r].second, places[r].first});
    call.in.push_back(reinterpret_cast<const void*>(ins[r]));
    call.out.push_back(reinterpret_cast<void*>(outs[r]));
  }
  call.counts = std::move(counts);
  call.segment_counts = std::move(segment_counts);
  call.dtype = parse_or_throw<DType>(dtype, parse_dtype, "dtype");
  call.op = parse_or_throw<ReduceOp>(op, parse_reduce_op, "reduce op");
  call.between = parse_or_throw<Algorithm>(between_algorithm, parse_algorithm, "algorithm");
  call.timeout_s = timeout_s;
  call.chunks = chunks;
  call.rails = rails;
  std::vector<Status> status;
  std::vector<SimulatedRun> runs;
  {
    nb::gil_scoped_release release;
    status = run_on_simulated_hosts(
        call,
        [](int, int, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
          make_memory_channels(x, y);
        },
        &runs);
  }
  std::vector<std::string> errors;
  for (const Status& s : status) {
    errors.push_back(s.ok() ? "" : str_cat(code_name(s.code()), ": ", s.message()));
  }
  nb::list ran;
  for (const SimulatedRun& run : runs) {
    nb::dict entry;
    entry["schedule"] = algorithm_name(run.plan.schedule);
    entry["between"] = algorithm_name(run.plan.between);
    entry["chunks"] = run.plan.chunks;
    entry["protocol"] = protocol_name(run.plan.protocol);
    entry["reduce_scatters"] = run.reduce_scatters;
    entry["between_hosts"] = run.between_hosts;
    entry["all_gathers"] = run.all_gathers;
    ran.append(entry);
  }
  nb::dict out;
  out["errors"] = errors;
  out["ran"] = ran;
  return out;
}

// hierarchical_threads_report's errors alone.
std::vector<std::string> hierarchical_threads(
    std::vector<std::pair<std::string, int>> places, std::vector<uintptr_t> ins,
    std::vector<uintptr_t> outs, std::vector<uint64_t> counts, std::vector<uint64_t> segment_counts,
    const std::string& dtype, const std::string& op, const std::string& between_algorithm,
    int chunks, double timeout_s) {
  nb::dict report = hierarchical_threads_report(std::move(places), std::move(ins), std::move(outs),
                                                std::move(counts), std::move(segment_counts), dtype,
                                                op, between_algorithm, chunks, timeout_s, 1);
  return nb::cast<std::vector<std::string>>(report["errors"]);
}

// Checks `data` as a connection's hello: "" if it may go on to the challenge.
std::string parse_hello(nb::bytes data) {
  Hello h;
  if (data.size() < sizeof(h)) return "truncated hello";
  std::memcpy(&h, data.c_str(), sizeof(h));
  Status s = check_hello(h);
  return s.ok() ? "" : s.message();
}

// A connected pair of non-blocking TCP sockets over loopback (the handshake binds the
// proofs to IP endpoints): fds[0] the connector's end, fds[1] the acceptor's.
bool loopback_pair(int fds[2]) {
  int listener = -1;
  uint16_t port = 0;
  if (!tcp_listen("127.0.0.1", 0, 0, &listener, &port).ok()) return false;
  const bool connected =
      tcp_connect("127.0.0.1", "127.0.0.1", port, Deadline::unabortable_after(5.0), &fds[0]).ok();
  fds[1] = connected ? accept4(listener, nullptr, nullptr, SOCK_NONBLOCK) : -1;
  close(listener);
  if (fds[1] < 0 && connected) close(fds[0]);
  return fds[1] >= 0;
}

// The acceptor's handshake fed `data` (what a connector would send, then end of stream)
// over loopback, under `secret`: "" if it admitted the connection, else why not.
std::string accept_handshake(nb::bytes data, nb::bytes secret) {
  int fds[2];
  if (!loopback_pair(fds)) return "no loopback connection";
  const std::string key(secret.c_str(), secret.size());
  size_t sent = 0;
  while (sent < data.size()) {  // a socket pair's buffer holds far more than a handshake
    const ssize_t n = send(fds[0], data.c_str() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fds[0], SHUT_WR);
  AcceptorHandshake h(fds[1], key, Deadline::unabortable_after(1.0));
  while (h.step() != AcceptorHandshake::State::kAdmitted &&
         h.state() != AcceptorHandshake::State::kRefused && !h.deadline().expired()) {
    pollfd p{fds[1], h.events(), 0};
    poll(&p, 1, 10);
  }
  std::string out = h.state() == AcceptorHandshake::State::kAdmitted  ? ""
                    : h.state() == AcceptorHandshake::State::kRefused ? h.reason().message()
                                                                      : "still waiting";
  close(fds[0]);
  close(fds[1]);
  return out;
}

// The connector's handshake against a listener that answers `reply` (its challenge and
// verdict, then end of stream): "" if the connector went on, else why not.
std::string connect_handshake(nb::bytes reply, nb::bytes secret) {
  int fds[2];
  if (!loopback_pair(fds)) return "no loopback connection";
  const ssize_t n = send(fds[1], reply.c_str(), reply.size(), MSG_NOSIGNAL);
  (void)n;
  shutdown(fds[1], SHUT_WR);
  Hello hello;
  hello.src_device = 1;
  hello.dst_device = 2;
  Status s = handshake_as_connector(fds[0], std::string(secret.c_str(), secret.size()), hello,
                                    Deadline::unabortable_after(0.5));
  close(fds[0]);
  close(fds[1]);
  return s.ok() ? "" : s.message();
}

// The congestion control of socket `fd`, by name.
std::string congestion_of(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name) - 1;
  getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len);
  return name;
}

// What one end of a TcpChannel pair over loopback sees once the other ends its side
// (`how`: "close", a process that finished and left; "poison", a failed call), after
// `sent` bytes from the far end: {"poisoned": the near end's poisoned_status message
// ("" when usable), "read": the bytes it then reads, "read_error": what ends its read}.
std::map<std::string, std::string> tcp_peer_end(const std::string& how, size_t sent) {
  int fds[2];
  if (!loopback_pair(fds)) throw std::runtime_error("no loopback connection");
  const int client = fds[0], server = fds[1];
  TcpChannel near(client, "near", 1.0);
  auto far = std::make_unique<TcpChannel>(server, "far", 1.0);
  std::vector<char> data(sent, 'x');
  size_t written = 0;
  while (written < sent) {
    size_t done = 0;
    if (!far->write_some(data.data() + written, sent - written, &done).ok()) break;
    written += done;
  }
  if (how == "poison") far->poison(Code::kAborted);
  far.reset();  // the far end's descriptor closes, as at its process's exit
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::map<std::string, std::string> out;
  out["poisoned"] = near.poisoned_status().message();
  size_t read = 0;
  Status r;
  for (int tries = 0; tries < 1000 && r.ok(); ++tries) {
    size_t done = 0;
    r = near.read_some(data.data(), data.size() + 1, &done);
    read += done;
    if (done == 0 && r.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  out["read"] = std::to_string(read);
  out["read_error"] = r.message();
  return out;
}

// The options of a TcpChannel over loopback as getsockopt reads them back: the
// dead-peer ones {name: value}, its congestion control, and the congestion control of
// both ends as connected and accepted, before any channel was made of them.
std::map<std::string, std::string> tcp_channel_options() {
  int fds[2];
  if (!loopback_pair(fds)) throw std::runtime_error("no loopback connection");
  const int client = fds[0], server = fds[1];
  std::map<std::string, std::string> out;
  out["connected TCP_CONGESTION"] = congestion_of(client);
  out["accepted TCP_CONGESTION"] = server >= 0 ? congestion_of(server) : "";
  if (server >= 0) close(server);
  TcpChannel channel(client, "options", 1.0);
  auto read = [&](const char* name, int level, int option) {
    int value = -1;
    socklen_t len = sizeof(value);
    getsockopt(channel.poll_fd(), level, option, &value, &len);
    out[name] = std::to_string(value);
  };
  read("SO_KEEPALIVE", SOL_SOCKET, SO_KEEPALIVE);
  read("TCP_KEEPIDLE", IPPROTO_TCP, TCP_KEEPIDLE);
  read("TCP_KEEPINTVL", IPPROTO_TCP, TCP_KEEPINTVL);
  read("TCP_KEEPCNT", IPPROTO_TCP, TCP_KEEPCNT);
  read("TCP_USER_TIMEOUT", IPPROTO_TCP, TCP_USER_TIMEOUT);
  read("TCP_NODELAY", IPPROTO_TCP, TCP_NODELAY);
  out["TCP_CONGESTION"] = congestion_of(channel.poll_fd());
  return out;
}

// Feeds raw `data` to a ChannelLink expecting one `expected`-byte message (call tag 42)
// on its first frame, over a memory ring or (`tcp`) a loopback TCP connection that the
// sender then closes; returns "" and the payload when accepted, else the error.
nb::tuple receive_frames(nb::bytes data, size_t expected, double timeout_s, bool tcp) {
  std::unique_ptr<Channel> writer, reader;
  int sender = -1;
  if (tcp) {
    int listener = -1;
    uint16_t port = 0;
    Status s = tcp_listen("127.0.0.1", 0, 0, &listener, &port);
    if (s.ok())
      s = tcp_connect("127.0.0.1", "127.0.0.1", port, Deadline::after_seconds(10), &sender);
    const int receiver = s.ok() ? accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    if (listener >= 0) close(listener);
    if (receiver < 0) throw std::runtime_error("loopback connection failed: " + s.message());
    s = write_all(sender, data.c_str(), data.size(), Deadline::after_seconds(10));
    shutdown(sender, SHUT_WR);
    reader = std::make_unique<TcpChannel>(receiver, "fuzz tcp", 1.0);
  } else {
    make_memory_channels(&writer, &reader);
    size_t written = 0;
    while (written < data.size()) {
      size_t n = 0;
      writer->write_some(data.c_str() + written, data.size() - written, &n);
      if (n == 0) break;  // ring full: the rest is never delivered
      written += n;
    }
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  } closer{sender};
  std::vector<std::vector<Channel*>> channels{{reader.get()}, {}};
  ChannelLink link(1, std::move(channels), 42, "fuzz", Deadline::after_seconds(timeout_s));
  std::string payload(expected, '\0');
  Status s = link.recv(0, payload.data(), expected);
  if (!s.ok()) return nb::make_tuple(s.message(), nb::bytes("", 0));
  return nb::make_tuple(std::string(), nb::bytes(payload.data(), payload.size()));
}

// Arms a fault (common/faults.h) for the next `times` fault points of jax_accl's native
// core in this process: "allocation" (std::bad_alloc), "thread_start"
// (std::system_error) or "none" (disarms).
void arm_fault(const std::string& kind, int times) {
  static const std::map<std::string, Fault> kinds = {{"none", Fault::kNone},
                                                     {"allocation", Fault::kAllocation},
                                                     {"thread_start", Fault::kThreadStart}};
  auto it = kinds.find(kind);
  if (it == kinds.end()) throw std::invalid_argument("unknown fault " + kind);
  inject_fault(it->second, times);
}

// Two lanes of cross-memory-attach all-reduces sharing the ptrace permission
// (testing/cma_lanes.h): what each found, and when the permission was held.
nb::dict cma_lanes(int ranks, uint64_t count, double timeout_s) {
  CmaLanesReport report;
  {
    nb::gil_scoped_release release;
    report = run_cma_lanes(ranks, count, timeout_s);
  }
  nb::dict out;
  out["allowed_before"] = report.allowed_before;
  out["allowed_after_lone_lane"] = report.allowed_after_lone_lane;
  out["lane_a_usable"] = report.lane_a_usable;
  out["allowed_while_b_waits"] = report.allowed_while_b_waits;
  out["lane_b_usable"] = report.lane_b_usable;
  out["lane_b_exact"] = report.lane_b_exact;
  out["lane_b_bytes"] = report.lane_b_bytes;
  out["refused"] = report.refused;
  out["allowed_after"] = report.allowed_after;
  out["errors"] = report.errors;
  return out;
}

}  // namespace
// One kernel of bfloat16 on the wire (reduce/reduce.h's WireKernels) from the AVX2 or the
// generic build, on raw buffers: `srcs` its inputs (float32, or bfloat16 where the
// kernel takes a message: widen, sum_message's second, widen_message's second), `dst`
// its output, `count` elements; the tests compare the two builds bit for bit.
void wire_kernel(const std::string& kernel, const std::string& isa, uintptr_t dst,
                 std::vector<uintptr_t> srcs, uint64_t count) {
  const WireKernels* k = nullptr;
  if (isa == "generic") k = &kernels_generic::wire();
#ifdef ACCL_AVX2_KERNELS
  if (isa == "avx2") {
    if (std::string(reduce_isa()) != "avx2") throw nb::value_error("this CPU runs no AVX2 kernels");
    k = &kernels_avx2::wire();
  }
#endif
  if (k == nullptr)
    throw nb::value_error(str_cat("wire_kernel: no ", isa, " kernels in this build").c_str());
  auto* out = reinterpret_cast<void*>(dst);
  auto in = [&](size_t i) {
    if (i >= srcs.size())
      throw nb::value_error(str_cat("wire_kernel: ", kernel, " needs more inputs").c_str());
    return reinterpret_cast<const void*>(srcs[i]);
  };
  if (kernel == "narrow") {
    k->narrow(static_cast<uint16_t*>(out), static_cast<const float*>(in(0)), count);
  } else if (kernel == "widen") {
    k->widen(static_cast<float*>(out), static_cast<const uint16_t*>(in(0)), count);
  } else if (kernel == "round") {
    k->round(out, in(0), count);
  } else if (kernel == "sum") {
    k->sum(out, in(0), in(1), count);
  } else if (kernel == "sum_message") {
    k->sum_message(out, in(0), in(1), count);
  } else if (kernel == "widen_message") {
    k->widen_message(out, in(0), in(1), count);
  } else if (kernel == "sum_many") {
    std::vector<const void*> all;
    for (size_t i = 0; i < srcs.size(); ++i) all.push_back(in(i));
    if (all.size() < 2) throw nb::value_error("wire_kernel: sum_many folds two inputs or more");
    k->sum_many(out, all.data(), static_cast<int>(all.size()), count);
  } else {
    throw nb::value_error(str_cat("wire_kernel: no kernel ", kernel).c_str());
  }
}

}  // namespace accl

NB_MODULE(_accl_testing, m) {
  using namespace accl;
  m.doc() = "jax_accl's test harness: the native core without XLA (jax_accl never imports it)";
  m.def("allreduce_threads", &allreduce_threads, nb::arg("ins"), nb::arg("outs"), nb::arg("counts"),
        nb::arg("dtypes"), nb::arg("ops"), nb::arg("algorithms"), nb::arg("present"),
        nb::arg("timeout_s"), nb::arg("wire_bf16") = false);
  m.def("allreduce_threads_channels", &allreduce_threads_channels, nb::arg("ins"), nb::arg("outs"),
        nb::arg("counts"), nb::arg("dtype"), nb::arg("op"), nb::arg("algorithm"),
        nb::arg("stripes") = 1, nb::arg("timeout_s") = 30.0, nb::arg("wire_bf16") = false);
  m.def("wire_kernel", &wire_kernel, nb::arg("kernel"), nb::arg("isa"), nb::arg("dst"),
        nb::arg("srcs"), nb::arg("count"));
  m.def("hierarchical_threads", &hierarchical_threads, nb::arg("places"), nb::arg("ins"),
        nb::arg("outs"), nb::arg("counts"), nb::arg("segment_counts"), nb::arg("dtype"),
        nb::arg("op"), nb::arg("between_algorithm") = "auto", nb::arg("chunks") = 0,
        nb::arg("timeout_s") = 30.0);
  m.def("hierarchical_threads_report", &hierarchical_threads_report, nb::arg("places"),
        nb::arg("ins"), nb::arg("outs"), nb::arg("counts"), nb::arg("segment_counts"),
        nb::arg("dtype"), nb::arg("op"), nb::arg("between_algorithm") = "auto",
        nb::arg("chunks") = 0, nb::arg("timeout_s") = 30.0, nb::arg("rails") = 1);
  m.def("parse_hello", &parse_hello, nb::arg("data"));
  m.def("accept_handshake", &accept_handshake, nb::arg("data"), nb::arg("secret"));
  m.def("connect_handshake", &connect_handshake, nb::arg("reply"), nb::arg("secret"));
  m.def("tcp_channel_options", &tcp_channel_options);
  m.def("tcp_peer_end", &tcp_peer_end, nb::arg("how"), nb::arg("sent") = 0);
  m.def("receive_frames", &receive_frames, nb::arg("data"), nb::arg("expected"),
        nb::arg("timeout_s") = 0.002, nb::arg("tcp") = false);
  m.def("arm_fault", &arm_fault, nb::arg("kind"), nb::arg("times") = 1);
  // This process's shared-memory segments still named (transport/shm.h).
  m.def("shm_names_left", &shm_names_left);
  // The jax_accl calls device `device` is in now (runtime/stall.h's count).
  m.def("calls_in_progress", &calls_in_progress, nb::arg("device"));
  // For good: a process marked so refuses every later call (common/health.h).
  m.def("mark_process_unusable", &mark_process_unusable, nb::arg("why"));
  m.def("cma_lanes", &cma_lanes, nb::arg("ranks") = 2, nb::arg("count") = 1 << 18,
        nb::arg("timeout_s") = 30.0);
}
