// Native self-test, no Python: the algorithms over every transport the core has, run
// with threads as ranks and checked against a reference, plus the error paths. Built
// with -DACCL_SELFTEST=ON, mainly under sanitizers:
//   ASan+UBSan (CI):  -DACCL_SANITIZE=address   TSan (documented): -DACCL_SANITIZE=thread
// Exit status 0 when every check passed; each failure is printed.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/all_to_all.h"
#include "algorithms/permute.h"
#include "algorithms/ragged_all_to_all.h"
#include "algorithms/scatter_gather.h"
#include "common/wait.h"
#include "runtime/call_sequences.h"
#include "runtime/collective_call.h"
#include "runtime/collective_site.h"
#include "runtime/one_shot.h"
#include "runtime/stall.h"
#include "selftest/by_host_selftest.h"
#include "selftest/checks.h"
#include "selftest/interposed_link.h"
#include "selftest/mpiabi_selftest.h"
#include "testing/cma_lanes.h"
#include "testing/simulated_hosts.h"
#include "transport/channel_link.h"
#include "transport/cma.h"
#include "transport/local.h"
#include "transport/ring_channel.h"
#include "transport/shm.h"
#include "transport/tcp.h"

// Allocation failures on demand: a thread that sets t_allocations_left to k has its
// k+1-th allocation after that throw std::bad_alloc (and the count disarm itself).
thread_local int64_t t_allocations_left = -1;
std::atomic<int> g_allocations_failed{0};  // how many were made to fail

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t bytes) {
  if (t_allocations_left >= 0 && t_allocations_left-- == 0) {
    g_allocations_failed.fetch_add(1);
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's buffer): it is freed by the delete below.
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(bytes);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace accl {
namespace {

// Where the ranks of the self-test's in-process calls meet.
const std::shared_ptr<Group> g_group = std::make_shared<Group>();

// Rank `rank` of an in-process group of `n` devices (ids 0..n-1) meeting in g_group.
CallGroup selftest_group(int n, int rank, const char* label) {
  CallGroup group;
  for (int64_t d = 0; d < n; ++d) group.devices.push_back(d);
  group.rank = rank;
  group.label = label;
  group.group = g_group;
  return group;
}

Checks g_checks;
void expect(bool ok, const std::string& what) { g_checks.expect(ok, what); }

// in_place: out is in (XLA's aliased operand), as the lowering asks for.
void test_in_process(Algorithm algorithm, int n, size_t count, bool in_place = false) {
  auto in = random_inputs(n, count, n * 7919 + count);
  const auto want = reference_sum(in);
  std::vector<std::vector<int32_t>> copies(in_place ? 0 : n, std::vector<int32_t>(count));
  auto& out = in_place ? in : copies;
  const int64_t op_id = fresh_op_id();
  auto status = on_threads(n, [&](int r) {
    CallSettings settings;
    settings.signature.algorithm = algorithm;
    settings.timeout_s = 30;
    const CallSpec spec =
        make_call(selftest_group(n, r, "selftest"), CallKey{0, op_id, 0, 0}, settings, DType::kI32);
    return run_call(spec, CallBuffers{DType::kI32, {in[r].data()}, {out[r].data()}, {count}, {}});
  });
  for (int r = 0; r < n; ++r) {
    expect(status[r].ok() && out[r] == want,
           str_cat("in-process ", algorithm_name(algorithm), in_place ? " in place" : "", " n=", n,
                   " count=", count, " rank ", r, ": ", status[r].message()));
  }
}

void test_channels(const char* transport, const PairMaker& make_pair, Algorithm algorithm, int n,
                   size_t count, int stripes, bool in_place = false) {
  const ChannelMesh mesh = make_channel_mesh(n, stripes, make_pair);
  auto in = random_inputs(n, count, n * 104729 + count);
  const auto want = reference_sum(in);
  std::vector<std::vector<int32_t>> copies(in_place ? 0 : n, std::vector<int32_t>(count));
  auto& out = in_place ? in : copies;
  auto status = on_threads(n, [&](int r) {
    ChannelLink link(r, channels_of(mesh, r), 7, "selftest", Deadline::after_seconds(30));
    return run_allreduce(algorithm, link, {Buffers{in[r].data(), out[r].data(), count, 4, 0}},
                         Reduction{reduce_kernel(DType::kI32, ReduceOp::kSum), 4});
  });
  for (int r = 0; r < n; ++r) {
    expect(status[r].ok() && out[r] == want,
           str_cat(transport, " ", algorithm_name(algorithm), in_place ? " in place" : "", " n=", n,
                   " count=", count, " stripes=", stripes, " rank ", r, ": ", status[r].message()));
  }
}

// Reduce-scatter and all-gather of `block` int32 per rank, by `algorithm`, over the
// links link_of(rank) makes: every rank's output checked against the reference.
void check_scatter_gather(
    const std::string& what, int n, size_t block, Algorithm algorithm,
    const std::function<std::unique_ptr<Link>(int, const void* in, size_t in_bytes)>& link_of) {
  auto in = random_inputs(n, n * block, n * 31 + block);
  std::vector<std::vector<int32_t>> scattered(n, std::vector<int32_t>(block));
  const Reduction sum{reduce_kernel(DType::kI32, ReduceOp::kSum), 4};
  auto status = on_threads(n, [&](int r) {
    auto link = link_of(r, in[r].data(), in[r].size() * 4);
    return run_reduce_scatter(algorithm, *link,
                              {BlockBuffers{in[r].data(), scattered[r].data(), block, 4, 0}}, sum);
  });
  const auto total = reference_sum(in);
  for (int r = 0; r < n; ++r) {
    const std::vector<int32_t> want(total.begin() + r * block, total.begin() + (r + 1) * block);
    expect(status[r].ok() && scattered[r] == want,
           str_cat(what, " reduce-scatter ", algorithm_name(algorithm), " n=", n, " block=", block,
                   " rank ", r, ": ", status[r].message()));
  }
  std::vector<std::vector<int32_t>> gathered(n, std::vector<int32_t>(n * block));
  status = on_threads(n, [&](int r) {
    auto link = link_of(r, scattered[r].data(), block * 4);
    return run_all_gather(algorithm, *link,
                          {BlockBuffers{scattered[r].data(), gathered[r].data(), block, 4, 0}});
  });
  std::vector<int32_t> want;
  for (int r = 0; r < n; ++r) want.insert(want.end(), scattered[r].begin(), scattered[r].end());
  for (int r = 0; r < n; ++r) {
    expect(status[r].ok() && gathered[r] == want,
           str_cat(what, " all-gather ", algorithm_name(algorithm), " n=", n, " block=", block,
                   " rank ", r, ": ", status[r].message()));
  }
}

// A permutation r -> r + 1 of all but the last rank (so rank 0 receives nothing: zeros)
// over links link_of(rank) makes.
void check_permute(
    const std::string& what, int n, size_t count,
    const std::function<std::unique_ptr<Link>(int, const void* in, size_t in_bytes)>& link_of) {
  auto in = random_inputs(n, count, n * 17 + count);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count, 7));
  auto status = on_threads(n, [&](int r) {
    auto link = link_of(r, in[r].data(), count * 4);
    const CollectiveArgs peers{r < n - 1 ? r + 1 : -1, r > 0 ? r - 1 : -1};
    return run_permute(*link, {Buffers{in[r].data(), out[r].data(), count, 4, 0}}, peers);
  });
  for (int r = 0; r < n; ++r) {
    const std::vector<int32_t> want = r > 0 ? in[r - 1] : std::vector<int32_t>(count, 0);
    expect(status[r].ok() && out[r] == want, str_cat(what, " permute n=", n, " count=", count,
                                                     " rank ", r, ": ", status[r].message()));
  }
}

// An all-to-all of n blocks of `block` elements per rank, out of place and in place:
// block q of rank r's result is block r of rank q's input.
void check_all_to_all(
    const std::string& what, int n, size_t block,
    const std::function<std::unique_ptr<Link>(int, const void* in, size_t in_bytes)>& link_of) {
  for (bool in_place : {false, true}) {
    auto in = random_inputs(n, n * block, n * 23 + block);
    const auto original = in;
    std::vector<std::vector<int32_t>> copies(n, std::vector<int32_t>(n * block, 7));
    auto& out = in_place ? in : copies;
    auto status = on_threads(n, [&](int r) {
      auto link = link_of(r, in[r].data(), n * block * 4);
      return run_all_to_all(*link, {Buffers{in[r].data(), out[r].data(), n * block, 4, 0}});
    });
    for (int r = 0; r < n; ++r) {
      std::vector<int32_t> want;
      for (int q = 0; q < n; ++q) {
        want.insert(want.end(), original[q].begin() + r * block,
                    original[q].begin() + (r + 1) * block);
      }
      expect(status[r].ok() && out[r] == want,
             str_cat(what, " all-to-all n=", n, " block=", block, in_place ? " in place" : "",
                     " rank ", r, ": ", status[r].message()));
    }
  }
}

// A ragged all-to-all of 2 slices per peer (sizes 0..2 rows of 3 elements, rank r's
// slice i to rank i / 2, at rows chosen so that no two overlap): block by block as the
// semantics say, rows nobody writes keep the output's value.
void check_ragged(
    const std::string& what, int n,
    const std::function<std::unique_ptr<Link>(int, const void* in, size_t in_bytes)>& link_of) {
  const int per_peer = 2, k = n * per_peer, row = 3, in_rows = 2 * k, out_rows = 2 * k + 1;
  auto size_of = [&](int q, int i) { return (q * 7 + i * 3) % 3; };  // rows q sends in slice i
  std::vector<std::vector<int32_t>> tables(n), in(n),
      out(n, std::vector<int32_t>(out_rows * row, -1));
  for (int q = 0; q < n; ++q) {
    std::vector<int32_t>& t = tables[q];
    t = {row, in_rows, out_rows, k, /*instances=*/1, 0, 0, 0};
    t.resize(kRaggedHeader + 4 * k, 0);
    for (int i = 0; i < k; ++i) {
      t[kRaggedHeader + i] = 2 * (k - 1 - i);    // input offsets, backwards
      t[kRaggedHeader + k + i] = size_of(q, i);  // send sizes
      t[kRaggedHeader + 2 * k + i] = 2 * (q * per_peer + i % per_peer) + 1;  // rows at the receiver
    }
    for (int from = 0; from < n; ++from) {
      for (int s = 0; s < per_peer; ++s)
        t[kRaggedHeader + 3 * k + from * per_peer + s] = size_of(from, q * per_peer + s);
    }
    in[q].resize(in_rows * row);
    for (int e = 0; e < in_rows * row; ++e) in[q][e] = q * 1000 + e;
  }
  auto status = on_threads(n, [&](int r) {
    auto link = link_of(r, in[r].data(), in[r].size() * 4);
    const std::vector<Buffers> segments = {
        Buffers{in[r].data(), out[r].data(), in[r].size(), 4, 0},
        Buffers{tables[r].data(), nullptr, tables[r].size(), 4, 1}};
    return run_ragged_all_to_all(*link, segments);
  });
  for (int b = 0; b < n; ++b) {
    std::vector<int32_t> want(out_rows * row, -1);
    for (int q = 0; q < n; ++q) {
      for (int s = 0; s < per_peer; ++s) {
        const int i = b * per_peer + s, at = 2 * (q * per_peer + s) + 1;
        for (int e = 0; e < size_of(q, i) * row; ++e) {
          want[at * row + e] = in[q][tables[q][kRaggedHeader + i] * row + e];
        }
      }
    }
    expect(status[b].ok() && out[b] == want,
           str_cat(what, " ragged all-to-all n=", n, " rank ", b, ": ", status[b].message()));
  }
  // Rank 1's slice 0 reaches past its operand: it fails naming the slice before sending
  // anything, and its peers fail too (not at their deadline), nothing written outside.
  tables[1][kRaggedHeader] = in_rows - 1;
  tables[1][kRaggedHeader + k] = 2;
  auto refused = on_threads(n, [&](int r) {
    auto link = link_of(r, in[r].data(), in[r].size() * 4);
    Status s =
        run_ragged_all_to_all(*link, {Buffers{in[r].data(), out[r].data(), in[r].size(), 4, 0},
                                      Buffers{tables[r].data(), nullptr, tables[r].size(), 4, 1}});
    // As the runtime does: a failed rank's channels tell its peers at once.
    if (auto* channels = dynamic_cast<ChannelLink*>(link.get()); channels && !s.ok()) {
      channels->fail(s.code());
    }
    return s;
  });
  const std::string named =
      str_cat("rank 1 sends slice 0 (rows ", in_rows - 1, " to ", in_rows + 1, ") outside");
  expect(refused[1].message().find(named) != std::string::npos,
         str_cat(what, " ragged all-to-all, a slice past the operand: ", refused[1].message()));
  for (int r = 0; r < n; ++r) {
    expect(!refused[r].ok(), str_cat(what, " ragged all-to-all, rank ", r, " fails too"));
  }
}

// Over message channels (memory rings, shared memory, TCP).
void test_scatter_gather_channels(const char* transport, const PairMaker& make_pair, int n,
                                  size_t block) {
  for (Algorithm algorithm : {Algorithm::kDirect, Algorithm::kRing}) {
    const ChannelMesh mesh = make_channel_mesh(n, 1, make_pair);
    check_scatter_gather(transport, n, block, algorithm, [&](int r, const void*, size_t) {
      return std::make_unique<ChannelLink>(r, channels_of(mesh, r), 9, "selftest",
                                           Deadline::after_seconds(30));
    });
  }
  const ChannelMesh mesh = make_channel_mesh(n, 1, make_pair);
  check_permute(transport, n, block, [&](int r, const void*, size_t) {
    return std::make_unique<ChannelLink>(r, channels_of(mesh, r), 11, "selftest",
                                         Deadline::after_seconds(30));
  });
  const ChannelMesh exchange_mesh = make_channel_mesh(n, 1, make_pair);
  check_all_to_all(transport, n, block, [&](int r, const void*, size_t) {
    return std::make_unique<ChannelLink>(r, channels_of(exchange_mesh, r), 13, "selftest",
                                         Deadline::after_seconds(30));
  });
  const ChannelMesh ragged_mesh = make_channel_mesh(n, 1, make_pair);
  check_ragged(transport, n, [&](int r, const void*, size_t) {
    return std::make_unique<ChannelLink>(r, channels_of(ragged_mesh, r), 15, "selftest",
                                         Deadline::after_seconds(30));
  });
}

// Links between device threads of one process (peer memory: direct reads in place):
// each call's n ranks publish their input into an exchange of its own.
std::function<std::unique_ptr<Link>(int, const void*, size_t)> in_process_links(int n) {
  struct Calls {
    std::mutex m;
    std::condition_variable all_published;
    std::shared_ptr<LocalExchange> exchange;
    int published = 0;
  };
  auto calls = std::make_shared<Calls>();
  return [calls, n](int r, const void* in, size_t bytes) -> std::unique_ptr<Link> {
    std::unique_lock<std::mutex> lock(calls->m);
    if (calls->published == 0 || calls->published == n) {  // a new call
      calls->exchange = std::make_shared<LocalExchange>(n, "selftest", bytes);
      calls->published = 0;
    }
    auto mine = calls->exchange;
    mine->publish(r, {Buffers{in, nullptr, bytes / 4, 4, 0}});
    ++calls->published;
    calls->all_published.notify_all();
    calls->all_published.wait(lock, [&] { return calls->published == n; });
    return std::make_unique<LocalLink>(mine, r, Deadline::after_seconds(30));
  };
}

void test_scatter_gather_in_process(int n, size_t block) {
  for (Algorithm algorithm : {Algorithm::kDirect, Algorithm::kRing}) {
    check_scatter_gather("in-process", n, block, algorithm, in_process_links(n));
  }
  check_permute("in-process", n, block, in_process_links(n));
  check_all_to_all("in-process", n, block, in_process_links(n));
}

// The cross-memory-attach reduce-broadcast between threads of this process (where its
// copies are plain memcpy; the multi-process tests run the kernel's), addresses and
// barrier over memory rings.
void test_cma(int n, size_t count, bool in_place) {
  const ChannelMesh mesh = make_channel_mesh(
      n, 1, [](int, int, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
        make_memory_channels(x, y);
      });
  auto in = random_inputs(n, count, n * 31 + count);
  const auto want = reference_sum(in);
  std::vector<std::vector<int32_t>> copies(in_place ? 0 : n, std::vector<int32_t>(count));
  auto& out = in_place ? in : copies;
  auto status = on_threads(n, [&](int r) {
    ChannelLink link(r, channels_of(mesh, r), 9, "selftest cma", Deadline::after_seconds(30));
    bool usable = false;
    Status s =
        allreduce_cma(link, cross_memory(), {Buffers{in[r].data(), out[r].data(), count, 4, 0}},
                      Reduction{reduce_kernel(DType::kI32, ReduceOp::kSum), 4,
                                reduce_many_kernel(DType::kI32, ReduceOp::kSum)},
                      /*probe=*/true, &usable);
    if (s.ok() && !usable) s = error(Code::kInternal, "cross-memory attach unusable");
    return s;
  });
  for (int r = 0; r < n; ++r) {
    expect(status[r].ok() && out[r] == want,
           str_cat("cma", in_place ? " in place" : "", " n=", n, " count=", count, " rank ", r,
                   ": ", status[r].message()));
  }
}

// The ptrace permission is counted (testing/cma_lanes.h): a lane that finds cross-memory
// attach unusable and ends revokes it only when it was the last to hold it.
void test_cma_permission() {
  const CmaLanesReport r = run_cma_lanes(3, 100003, 30);
  std::string errors;
  for (const std::string& e : r.errors) errors += "; " + e;
  expect(r.errors.empty(), str_cat("cma permission: errors", errors));
  expect(!r.allowed_before && !r.allowed_after_lone_lane && !r.lane_a_usable,
         "cma permission: a lone lane that found it unusable revoked it at its end");
  expect(r.allowed_while_b_waits && r.lane_b_usable && r.lane_b_exact && r.refused == 0 &&
             r.lane_b_bytes > 0,
         str_cat("cma permission: the other lane kept it (allowed ", r.allowed_while_b_waits,
                 ", usable ", r.lane_b_usable, ", exact ", r.lane_b_exact, ", refused ", r.refused,
                 ")"));
  expect(!r.allowed_after, "cma permission: revoked once both lanes ended");
}

// Launch ids are not ordered: a launch with a small id still running while thousands of
// launches with large ids come and go keeps its counters.
void test_sequence_counters() {
  CallSequences sequences;
  const int64_t running = 5;
  expect(sequences.next(0, running, 120) == 0, "first call of a launch is call 0");
  expect(sequences.next(1, running, 120) == 0, "each device counts its own calls");
  for (int64_t run = int64_t{3} << 30; run < (int64_t{3} << 30) + 5000; ++run) {
    sequences.next(0, run, 120);
  }
  expect(sequences.next(0, running, 120) == 1,
         "a running launch keeps its call count while others come and go");
}

// A call site checks its attributes once (at instantiate), and a device outside its
// groups learns it when it calls; a good site runs a call of its two-device group.
void test_call_site() {
  auto attributes = [] {
    SiteAttributes a;
    a.groups = {0, 1, 2, -1};  // partitions 0 and 1; partition 2 alone
    a.group_size = 2;
    a.timeout_ms = 5000;
    a.name = "psum_site";
    a.devices = {10, 11, 12, 13};  // partition 3 runs on device 13, in no group
    return a;
  };
  std::unique_ptr<CollectiveSite> site;
  auto refused = [&](SiteAttributes a, const std::string& want) {
    Status s = CollectiveSite::make(std::move(a), &site);
    expect(!s.ok() && s.message().find(want) != std::string::npos,
           "site refused with '" + want + "': " + s.message());
  };
  SiteAttributes bad_op = attributes();
  bad_op.op = kNumReduceOps;
  refused(bad_op, "bad attributes in psum_site");
  SiteAttributes outside = attributes();
  outside.groups = {0, 4};
  refused(outside, "partition id 4 of psum_site is outside the device list (4 partitions)");
  SiteAttributes twice = attributes();
  twice.groups = {0, 1, 1, -1};
  refused(twice, "partition 1 is in two groups of psum_site");

  expect(CollectiveSite::make(attributes(), &site).ok(), "a good site is made");
  auto call_status = [&](int64_t device, std::vector<float>* in, std::vector<float>* out) {
    CallBuffers buffers;
    buffers.in = {in->data()};
    buffers.out = {out->data()};
    buffers.counts = {in->size()};
    buffers.out_counts = {out->size()};
    struct Ending {
      std::mutex m;
      std::condition_variable cv;
      std::optional<Status> result;
    };
    auto ending = std::make_shared<Ending>();
    site->run(device, /*run_id=*/7, buffers, Clock::now(), [ending](const Status& s) {
      std::lock_guard<std::mutex> lock(ending->m);
      ending->result = s;
      ending->cv.notify_all();
    });
    return [ending]() {  // waits for the call's end
      std::unique_lock<std::mutex> lock(ending->m);
      ending->cv.wait(lock, [&] { return ending->result.has_value(); });
      return *ending->result;
    };
  };
  std::vector<float> x{1, 2}, y{3, 4}, ox(2), oy(2), z{5};
  std::vector<float> oz(1);
  auto none = call_status(13, &z, &oz)();
  expect(none.message().find("device 13 is in no replica group of psum_site") != std::string::npos,
         "a device in no group: " + none.message());
  auto stranger = call_status(99, &z, &oz)();
  expect(stranger.message().find("device 99 runs no partition of psum_site") != std::string::npos,
         "a device of no partition: " + stranger.message());
  // Both waits are started before either is awaited: the call completes once both came.
  auto first = call_status(10, &x, &ox);
  auto second = call_status(11, &y, &oy);
  Status a = first(), b = second();
  expect(a.ok() && b.ok() && ox == std::vector<float>{4, 6} && oy == ox,
         "a site's call of its group: " + a.message() + b.message());
  auto alone = call_status(12, &z, &oz)();
  expect(alone.ok() && oz[0] == 5, "a group of one: " + alone.message());

  // The same group's reduce-scatter and all-gather: each site of its own collective.
  SiteAttributes scatter = attributes();
  scatter.collective = Collective::kReduceScatter;
  expect(CollectiveSite::make(scatter, &site).ok(), "a reduce-scatter site is made");
  std::vector<float> p{1, 2, 3, 4}, q{10, 20, 30, 40}, op(2), oq(2), wrong(3);
  auto p_done = call_status(10, &p, &op);
  auto q_done = call_status(11, &q, &oq);
  a = p_done(), b = q_done();
  expect(a.ok() && b.ok() && op == std::vector<float>{11, 22} && oq == std::vector<float>{33, 44},
         "a site's reduce-scatter: " + a.message() + b.message());
  auto misfit = call_status(10, &p, &wrong)();
  expect(misfit.message().find("operand 0 has 4 elements and result 3, which a reduce-scatter "
                               "over 2 devices cannot have") != std::string::npos,
         "a reduce-scatter's result of the wrong size: " + misfit.message());
  SiteAttributes gather = attributes();
  gather.collective = Collective::kAllGather;
  expect(CollectiveSite::make(gather, &site).ok(), "an all-gather site is made");
  std::vector<float> gp(4), gq(4);
  auto gp_done = call_status(10, &op, &gp);
  auto gq_done = call_status(11, &oq, &gq);
  a = gp_done(), b = gq_done();
  expect(a.ok() && b.ok() && gp == std::vector<float>{11, 22, 33, 44} && gq == gp,
         "a site's all-gather: " + a.message() + b.message());
}

void memory_pair(int, int, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
  make_memory_channels(x, y);
}

void shm_pair(int a, int b, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
  static int serial = 0;
  const std::string name = str_cat("/jax_accl_selftest_", getpid(), "_", serial++);
  Status s0 = open_shm_channel(name, name + "_failed", 0, "shm", Deadline::after_seconds(10), x);
  Status s1 = open_shm_channel(name, name + "_failed", 1, "shm", Deadline::after_seconds(10), y);
  expect(s0.ok() && s1.ok(), "open shm pair: " + s0.message() + s1.message());
  expect(access(("/dev/shm" + name).c_str(), F_OK) != 0, "shm name unlinked once both attached");
}

void tcp_pair(int, int, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
  int listener = -1, client = -1;
  uint16_t port = 0;
  Status s = tcp_listen("127.0.0.1", 0, 0, &listener, &port);
  if (s.ok()) s = tcp_connect("127.0.0.1", "127.0.0.1", port, Deadline::after_seconds(10), &client);
  int server = s.ok() ? accept(listener, nullptr, nullptr) : -1;
  expect(s.ok() && server >= 0, "loopback tcp pair: " + s.message());
  close(listener);
  *x = std::make_unique<TcpChannel>(client, "tcp", 1.0);
  *y = std::make_unique<TcpChannel>(server, "tcp", 1.0);
}

// The hierarchy on simulated hosts: `layout` lists per host the devices of each
// process; processes and hosts talk over `make_pair`'s channels.
void test_hierarchical(const char* transport, const PairMaker& make_pair,
                       const std::vector<std::vector<int>>& layout, size_t count, bool in_place,
                       int chunks = 1) {
  SimulatedCall call;
  call.chunks = chunks;
  int process = 0;
  for (size_t h = 0; h < layout.size(); ++h) {
    for (int devices : layout[h]) {
      for (int d = 0; d < devices; ++d) call.places.push_back(RankPlace{process, str_cat("h", h)});
      ++process;
    }
  }
  const int n = static_cast<int>(call.places.size());
  auto in = random_inputs(n, count, n * 7121 + count);
  const auto want = reference_sum(in);
  std::vector<std::vector<int32_t>> copies(in_place ? 0 : n, std::vector<int32_t>(count));
  auto& out = in_place ? in : copies;
  for (int r = 0; r < n; ++r) {
    call.in.push_back(in[r].data());
    call.out.push_back(out[r].data());
    call.counts.push_back(count);
  }
  call.segment_counts = {count / 3, 0, count / 2};
  const std::vector<Status> status = run_on_simulated_hosts(call, make_pair);
  std::string shape;
  for (const auto& host : layout) {
    shape += "[";
    for (int d : host) shape += str_cat(d, " ");
    shape += "]";
  }
  for (int r = 0; r < n; ++r) {
    expect(status[r].ok() && out[r] == want,
           str_cat("hierarchical over ", transport, " ", shape, in_place ? " in place" : "",
                   " count=", count, " chunks=", chunks, " rank ", r, ": ", status[r].message()));
  }
}

void test_one_shot(int n, size_t count, int present) {
  auto in = random_inputs(n, count, n * 31 + count);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count));
  const int64_t op_id = fresh_op_id();
  std::vector<Status> status(n, error(Code::kInternal, "never completed"));
  std::atomic<int> completed{0};
  auto started = std::chrono::steady_clock::now();
  on_threads(present, [&](int r) {
    CallSettings settings;
    settings.timeout_s = 0.3;
    const CallSpec spec = make_call(selftest_group(n, r, "selftest one-shot"),
                                    CallKey{0, op_id, 0, 0}, settings, DType::kI32);
    one_shot(spec, {in[r].data()}, {out[r].data()}, {count}, [&, r](const Status& s) {
      status[r] = s;
      completed.fetch_add(1);
    });
    return Status::Ok();
  });
  while (completed.load() < present &&
         std::chrono::steady_clock::now() - started < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  expect(completed.load() == present, str_cat("one-shot n=", n, ": every present rank completes"));
  const auto want = reference_sum(in);
  for (int r = 0; r < present; ++r) {
    if (present == n) {
      expect(status[r].ok() && out[r] == want,
             str_cat("one-shot n=", n, " count=", count, " rank ", r));
    } else {
      expect(status[r].code() == Code::kTimeout &&
                 status[r].message().find("ranks [" + std::to_string(n - 1) + "]") !=
                     std::string::npos,
             "one-shot missing rank times out naming it: " + status[r].message());
    }
  }
}

// The stall check's count of each device's calls (runtime/stall.h): ids far apart, as
// processes' global ids are, and ids that differ only in their high bits are counted
// apart; a device's calls end where they began.
void test_device_call_counts() {
  const std::vector<int64_t> ids = {int64_t{1} << 40, (int64_t{1} << 40) + (int64_t{1} << 52),
                                    (int64_t{3} << 50) + 1, 123457};
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t k = 0; k <= i; ++k) note_launch_begun(ids[i], 77 + static_cast<int64_t>(k));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    expect(calls_in_progress(ids[i]) == static_cast<int>(i + 1),
           str_cat("device ", ids[i], " is in ", i + 1, " calls"));
    for (size_t k = 0; k <= i; ++k) note_call_ended(ids[i]);
    expect(calls_in_progress(ids[i]) == 0, str_cat("device ", ids[i], "'s calls ended"));
  }
  // Enough devices that some share a first slot (the table probes past them), and one
  // new device made by 8 threads at once: one entry, every call counted.
  for (int64_t k = 1; k <= 300; ++k) note_launch_begun(k << 52, 5);
  bool counted = true;
  for (int64_t k = 1; k <= 300; ++k) {
    counted = counted && calls_in_progress(k << 52) == 1;
    note_call_ended(k << 52);
  }
  expect(counted, "300 devices' calls counted apart");
  const int64_t raced = (int64_t{7} << 44) + 3;
  on_threads(8, [&](int) {
    note_launch_begun(raced, 9);
    return Status::Ok();
  });
  expect(calls_in_progress(raced) == 8, "a device made by 8 threads at once counts 8 calls");
}

// FIPS 180-4's and RFC 4231's test vectors.
void test_sha256() {
  expect(hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "sha256 of nothing");
  expect(hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
         "sha256 of abc");
  expect(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
         "sha256 of 56 bytes (two padding blocks)");
  expect(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
         "hmac-sha256, RFC 4231 case 2");
  expect(hex(hmac_sha256(std::string(131, '\xaa'),
                         "Test Using Larger Than Block-Size Key - Hash Key First")) ==
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
         "hmac-sha256 with a key longer than a block, RFC 4231 case 6");
  expect(digests_equal(sha256("a"), sha256("a")) && !digests_equal(sha256("a"), sha256("b")),
         "digest comparison");
}

// A process whose jax_accl stops aborts its calls in flight, poisoning their streams:
// its peer's error names the departure (left the job: restart it), not an abort that a
// recovery could mend. A live peer's abort or mismatch keeps its own reason.
void test_shm_poison_of_a_leaving_peer() {
  std::unique_ptr<Channel> stays, goes;
  shm_pair(0, 1, &stays, &goes);
  char byte = 0;
  size_t done = 0;
  goes->poison(Code::kAborted);  // a live peer's abort
  Status s = stays->read_some(&byte, 1, &done);
  expect(s.code() == Code::kAborted && s.message().find("aborted this stream") != std::string::npos,
         "a live peer's abort is named as one: " + s.message());
  shm_pair(0, 1, &stays, &goes);
  goes->poison(Code::kMismatch);
  s = stays->read_some(&byte, 1, &done);
  expect(s.code() == Code::kMismatch, "a live peer's mismatch is named as one: " + s.message());
  shm_pair(0, 1, &stays, &goes);
  g_stopping.store(true);  // a restart's World::stop(): its aborts are aborts
  goes->poison(Code::kAborted);
  s = stays->read_some(&byte, 1, &done);
  expect(s.message().find("aborted this stream") != std::string::npos,
         "an abort from a peer that restarts its jax_accl is named as one: " + s.message());
  shm_pair(0, 1, &stays, &goes);
  g_leaving.store(true);  // as World::stop() does, leaving, before it aborts the calls
  goes->poison(Code::kAborted);
  g_leaving.store(false);
  g_stopping.store(false);
  s = stays->read_some(&byte, 1, &done);
  expect(s.code() == Code::kAborted && s.message().find("left the job") != std::string::npos &&
             s.message().find("restart the job") != std::string::npos,
         "an abort from a peer whose jax_accl stops names its departure: " + s.message());
  s = stays->write_some(&byte, 1, &done);
  expect(s.message().find("left the job") != std::string::npos,
         "and so does a write: " + s.message());
}

// A segment that exists before side 0 creates it is refused; so is one that side 1
// finds open to others; side 1 gives up at its deadline when nobody creates it.
void test_shm_refusals() {
  const std::string squatted = str_cat("/jax_accl_selftest_squat_", getpid());
  int fd = shm_open(squatted.c_str(), O_CREAT | O_RDWR, 0600);
  expect(fd >= 0, "pre-create a segment");
  close(fd);
  std::unique_ptr<Channel> c;
  Status s =
      open_shm_channel(squatted, squatted + "_failed", 0, "shm", Deadline::after_seconds(1), &c);
  expect(!s.ok() && s.message().find("exists already") != std::string::npos,
         "an existing segment is refused: " + s.message());
  fchmod(fd = shm_open(squatted.c_str(), O_RDWR, 0), 0666);
  expect(ftruncate(fd, static_cast<off_t>(ring_pair_region_bytes())) == 0, "size it");
  close(fd);
  s = open_shm_channel(squatted, squatted + "_failed", 1, "shm", Deadline::after_seconds(1), &c);
  expect(!s.ok() && s.message().find("not this user's alone") != std::string::npos,
         "a segment others may open is refused: " + s.message());
  shm_unlink(squatted.c_str());
  s = open_shm_channel(squatted, squatted + "_failed", 1, "shm", Deadline::after_seconds(0.05), &c);
  expect(s.code() == Code::kTimeout, "nobody creates it: side 1 times out: " + s.message());
  // A space marked failed (its creator could not allocate a segment): side 1 fails at once.
  const std::string marker = squatted + "_failed";
  close(shm_open(marker.c_str(), O_CREAT | O_RDWR, 0600));
  const auto asked = Clock::now();
  s = open_shm_channel(squatted, marker, 1, "shm", Deadline::after_seconds(5), &c);
  expect(!s.ok() && s.message().find("could not allocate") != std::string::npos &&
             Clock::now() - asked < std::chrono::seconds(1),
         "a space marked failed: side 1 fails within a second: " + s.message());
  shm_forget_failed(marker);
  expect(shm_segment_name("secret", 1, 2, 0) != shm_segment_name("secret", 1, 3, 0) &&
             shm_segment_name("secret", 1, 2, 0) != shm_segment_name("secret", 1, 2, 1) &&
             shm_segment_name("secret", 1, 2, 0).find("secret") == std::string::npos &&
             shm_segment_name("secret", 1, 2, 0).size() == 10 + 32,
         "segment names: per pair and channel space, 32 hex digits, nothing of the secret");
}

void test_errors() {
  // Mismatched lengths over channels: every rank fails, nobody hangs.
  std::unique_ptr<Channel> x, y;
  make_memory_channels(&x, &y);
  std::vector<int32_t> a(100, 1), b(50, 1), out_a(100), out_b(50);
  auto status = on_threads(2, [&](int r) {
    std::vector<std::vector<Channel*>> channels(2);
    channels[1 - r].push_back(r == 0 ? x.get() : y.get());
    ChannelLink link(r, std::move(channels), 7, "selftest", Deadline::after_seconds(5));
    auto& in = r == 0 ? a : b;
    auto& out = r == 0 ? out_a : out_b;
    Status s =
        run_allreduce(Algorithm::kRing, link, {Buffers{in.data(), out.data(), in.size(), 4, 0}},
                      Reduction{reduce_kernel(DType::kI32, ReduceOp::kSum), 4});
    if (!s.ok()) link.fail(s.code());
    return s;
  });
  expect(!status[0].ok() && !status[1].ok(), "mismatched lengths fail on both ranks");
  // A missing rank: the present ones time out.
  const int64_t op_id = fresh_op_id();
  std::vector<int32_t> v(10, 1), o(10);
  CallSettings settings;
  settings.timeout_s = 0.2;
  const CallSpec spec =
      make_call(selftest_group(3, 0, "selftest"), CallKey{0, op_id, 0, 0}, settings, DType::kI32);
  Status s = run_call(spec, CallBuffers{DType::kI32, {v.data()}, {o.data()}, {10}, {}});
  expect(s.code() == Code::kTimeout, "a missing rank times out: " + s.message());
}

// The fences of a failing rank (under ASan: a read or write into a freed buffer is an
// error). In-process: rank 0 fails while ranks 1 and 2 still read its input in place
// for a while; rank 0's link must not be gone before they have left, and its buffer is
// freed right after. Over channels: rank 1 writes into rank 0's buffer tile by tile
// (as cross-memory attach does), rank 0 fails: it may not return before rank 1 has
// seen the failure and stopped, and rank 1 fails naming it.
void test_failure_fences() {
  constexpr int n = 3;
  constexpr size_t count = 1 << 16;
  std::vector<std::unique_ptr<std::vector<int32_t>>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(std::make_unique<std::vector<int32_t>>(count, r));
  auto exchange = std::make_shared<LocalExchange>(n, "fence", count * 4);
  for (int r = 0; r < n; ++r) {
    exchange->publish(r, {Buffers{inputs[r]->data(), inputs[r]->data(), count, 4, 0}});
  }
  std::atomic<int> readers_done{0};
  std::atomic<bool> returned_early{false};
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) {
    threads.emplace_back([&, r] {
      LocalLink link(exchange, r, Deadline::after_seconds(10));
      int64_t sum = 0;
      for (int round = 0; round < 5; ++round) {  // slow readers of rank 0's input
        const auto* in = static_cast<const int32_t*>(link.input(0, 0));
        for (size_t i = 0; i < count; ++i) sum += in[i];
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      Status s = link.barrier();  // sees rank 0's failure
      expect(s.code() == Code::kAborted && sum == 0, "a reader learns of the failure");
      readers_done.fetch_add(1);
      link.fail(s);
    });
  }
  {
    LocalLink link(exchange, 0, Deadline::after_seconds(10));
    link.fail(error(Code::kAborted, "injected"));
  }  // the fence: returns once the readers are gone
  returned_early = readers_done.load() < n - 1;
  inputs[0].reset();  // XLA may free the buffer now
  for (auto& t : threads) t.join();
  expect(!returned_early.load(), "a failing rank waits for the ranks reading its buffers");

  // Over channels: the peer-access phase.
  ChannelMesh mesh = make_channel_mesh(2, 1, memory_pair);
  auto target = std::make_unique<std::vector<int32_t>>(count, 0);
  std::atomic<bool> writer_stopped{false}, failed_early{false};
  std::thread writer([&] {
    ChannelLink link(1, channels_of(mesh, 1), 7, "writer", Deadline::after_seconds(10));
    Status s = link.begin_peer_access();
    for (int tile = 0; s.ok() && tile < 100000; ++tile) {
      std::memset(target->data() + (tile % 16) * (count / 16), 1, count / 16 * 4);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      s = link.check_peer_access();
    }
    expect(s.code() == Code::kAborted && s.message().find("failed the call") != std::string::npos,
           "the writer stops at the peer's failure: " + s.message());
    writer_stopped = true;
    link.fail(s.code());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    ChannelLink link(0, channels_of(mesh, 0), 7, "target", Deadline::after_seconds(10));
    link.fail(Code::kAborted);
    failed_early = !writer_stopped.load();
  }
  target.reset();
  writer.join();
  expect(!failed_early.load(), "a failing rank waits until no peer writes into its buffers");
}

// An allocation that fails inside a call, at every allocation the call makes: one rank
// of a hierarchical all-reduce on simulated hosts (processes and hosts over `make_pair`'s
// channels) has its k-th allocation throw, for k = 0, 1, ... until the call makes fewer.
// Each time, every rank must fail within seconds (the failing rank's channels poisoned,
// as the runtime's guard does), never hang to the deadline, leak or touch freed memory
// (ASan); and the same call on fresh channels afterwards is exact.
void test_allocation_failures(const char* transport, const PairMaker& make_pair,
                              const std::vector<RankPlace>& places, int victim, size_t count) {
  const int n = static_cast<int>(places.size());
  auto in = random_inputs(n, count, n * 13 + count);
  const auto want = reference_sum(in);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count));
  auto call_once = [&](int64_t fail_at) {
    SimulatedCall call;
    call.places = places;
    for (int r = 0; r < n; ++r) {
      call.in.push_back(in[r].data());
      call.out.push_back(out[r].data());
      call.counts.push_back(count);
    }
    call.timeout_s = 20;
    call.before_rank = [&](int r) { t_allocations_left = r == victim ? fail_at : -1; };
    const auto start = std::chrono::steady_clock::now();
    std::vector<Status> status = run_on_simulated_hosts(call, make_pair);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::make_pair(status, seconds);
  };
  int injected = 0;
  for (int64_t k = 0; k < 10000; ++k) {
    g_allocations_failed = 0;
    auto [status, seconds] = call_once(k);
    t_allocations_left = -1;
    if (g_allocations_failed == 0) break;  // the call makes k allocations or fewer: done
    ++injected;
    // The victim fails, unless it absorbed the failure (a helper thread's start that
    // fell back to running inline); a rank that succeeded is exact.
    // A rank that succeeded did so before the victim failed (it was done with the
    // victim's data): its result must be exact.
    bool succeeded_exact = true;
    for (int r = 0; r < n; ++r) succeeded_exact &= !status[r].ok() || out[r] == want;
    expect(succeeded_exact && seconds < 10,
           str_cat("allocation ", k, " of rank ", victim, " failed over ", transport,
                   ": every rank ends promptly (", seconds,
                   " s), exact where it succeeded: ", status[victim].message()));
    for (auto& o : out) std::fill(o.begin(), o.end(), 0);
  }
  expect(injected > 0, str_cat("allocations were injected over ", transport));
  auto [status, seconds] = call_once(-1);
  for (int r = 0; r < n; ++r) {
    expect(status[r].ok() && out[r] == want,
           str_cat("after ", injected, " injected failures over ", transport, ", rank ", r,
                   " is exact: ", status[r].message()));
  }
}

// A link that kills its own process (SIGKILL) at its `after`-th receive or peer-access
// check: a peer that dies in the middle of a call, at a chosen point.
class DyingLink final : public InterposedLink {
 public:
  DyingLink(Link& inner, int after) : InterposedLink(inner), after_(after) {}
  Status check_peer_access() override {
    tick();
    return InterposedLink::check_peer_access();
  }

 private:
  Status before_receive() override {
    tick();
    return Status::Ok();
  }
  void tick() {
    if (++seen_ == after_) kill(getpid(), SIGKILL);
  }
  int after_, seen_ = 0;
};

// Two processes of one host over a shared-memory ring pair: the child dies in the middle
// of the call (cross-memory attach: in its tile loop; ring: at its second receive). The
// survivor must fail within seconds, naming the peer, without touching freed memory
// (ASan) or hanging.
void test_killed_peer(bool cma) {
  const std::string name = str_cat("/jax_accl_selftest_kill_", getpid(), cma ? "_cma" : "_ring");
  constexpr size_t count = 8 << 20;  // 32 MiB of int32 per rank
  const Reduction sum{reduce_kernel(DType::kI32, ReduceOp::kSum), 4,
                      reduce_many_kernel(DType::kI32, ReduceOp::kSum)};
  auto run = [&](int side, Link& link, std::vector<int32_t>& data) {
    bool usable = false;
    return cma ? allreduce_cma(link, cross_memory(),
                               {Buffers{data.data(), data.data(), count, 4, 0}}, sum,
                               /*probe=*/false, &usable)
               : run_allreduce(Algorithm::kRing, link,
                               {Buffers{data.data(), data.data(), count, 4, 0}}, sum);
  };
  std::unique_ptr<Channel> mine;
  Status opened = open_shm_channel(name, name + "_failed", 0, "shm to the child",
                                   Deadline::after_seconds(10), &mine);
  expect(opened.ok(), "open the survivor's end: " + opened.message());
  if (!opened.ok()) return;
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<Channel> theirs;
    if (open_shm_channel(name, name + "_failed", 1, "shm to the parent",
                         Deadline::after_seconds(10), &theirs)
            .ok()) {
      std::vector<std::vector<Channel*>> channels{{theirs.get()}, {}};
      ChannelLink link(1, std::move(channels), 5, "child", Deadline::after_seconds(10));
      DyingLink dying(link, cma ? 10 : 2);
      std::vector<int32_t> data(count, 1);
      run(1, dying, data);
    }
    _exit(0);  // only if it did not die where it should have: the parent then succeeds
  }
  std::vector<std::vector<Channel*>> channels{{}, {mine.get()}};
  ChannelLink link(0, std::move(channels), 5, "survivor", Deadline::after_seconds(20));
  auto data = std::make_unique<std::vector<int32_t>>(count, 2);
  const auto start = Clock::now();
  Status s = run(0, link, *data);
  if (!s.ok()) link.fail(s.code());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  data.reset();
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  expect(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL, "the child died by SIGKILL");
  expect(!s.ok() && seconds < 5,
         str_cat(cma ? "cma" : "ring", ": a peer killed mid-call is an error within seconds (",
                 seconds, " s): ", s.message()));
}

}  // namespace
}  // namespace accl

// `accl_selftest mpiabi` runs the MPI library's part alone (mpiabi_selftest.cc).
int main(int argc, char** argv) {
  using namespace accl;
  if (argc > 1 && std::strcmp(argv[1], "mpiabi") == 0) {
    run_mpiabi_selftest(&g_checks.checks, &g_checks.failures);
    std::printf("%d checks, %d failures\n", g_checks.checks, g_checks.failures);
    return g_checks.failures == 0 ? 0 : 1;
  }
  const Algorithm all[] = {Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling,
                           Algorithm::kReduceBroadcast, Algorithm::kAuto};
  const Algorithm messages[] = {Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling};
  for (int n : {1, 2, 3, 5, 8}) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(70001)}) {
      for (Algorithm a : all) {
        test_in_process(a, n, count);
        test_in_process(a, n, count, /*in_place=*/true);
      }
      if (n == 1) continue;
      for (Algorithm a : messages) {
        test_channels("memory", memory_pair, a, n, count, count > 1000 ? 2 : 1);
        test_channels("memory", memory_pair, a, n, count, 1, /*in_place=*/true);
        if (n <= 3) test_channels("shm", shm_pair, a, n, count, 1);
        if (n <= 3) test_channels("tcp", tcp_pair, a, n, count, n == 2 ? 2 : 1);
      }
    }
  }
  for (int n : {1, 2, 3, 5}) {
    for (size_t block : {size_t(0), size_t(1), size_t(333), size_t(20001)}) {
      test_scatter_gather_in_process(n, block);
      if (n == 1) continue;
      test_scatter_gather_channels("memory", memory_pair, n, block);
      if (n <= 3) test_scatter_gather_channels("shm", shm_pair, n, block);
      if (n <= 3) test_scatter_gather_channels("tcp", tcp_pair, n, block);
    }
  }
  for (int n : {1, 2, 5, 8}) {
    for (size_t count : {size_t(0), size_t(1), size_t(1000)}) test_one_shot(n, count, n);
  }
  test_one_shot(4, 100, 3);
  // Pending calls are reused (one_shot.cc): after a timed-out one, of other sizes.
  test_one_shot(8, 1000, 8);
  test_one_shot(2, 1, 2);
  test_one_shot(5, 0, 5);
  test_device_call_counts();
  test_sequence_counters();
  test_call_site();
  for (int n : {2, 3, 5}) {
    for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(100003)}) {
      test_cma(n, count, false);
      test_cma(n, count, true);
    }
  }
  test_cma_permission();
  const std::vector<std::vector<std::vector<int>>> layouts = {
      {{2}, {2}},         {{1, 1}, {1, 1}}, {{2, 2}, {2, 2}}, {{1, 1}, {1, 1}, {1, 1}},
      {{2, 1}, {2}, {1}}, {{3}, {1, 1}},    {{1, 2, 1}}};
  for (const auto& layout : layouts) {
    for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(70001)}) {
      test_hierarchical("memory", memory_pair, layout, count, count % 2 == 0);
    }
    test_hierarchical("memory", memory_pair, layout, 70001, true, /*chunks=*/3);
    test_hierarchical("shm", shm_pair, layout, 10007, false);
    test_hierarchical("tcp", tcp_pair, layout, 10007, true);
    test_hierarchical("tcp", tcp_pair, layout, 100003, false, /*chunks=*/4);
  }
  // Two hosts of two processes (of one and two devices); the victim is a device of the
  // two-device process (its sibling waits for it in the process's local exchange).
  const std::vector<RankPlace> hosts = {{0, "h0"}, {1, "h0"}, {1, "h0"},
                                        {2, "h1"}, {3, "h1"}, {3, "h1"}};
  for (int victim : {2, 0}) {
    test_allocation_failures("memory", memory_pair, hosts, victim, 3001);
  }
  test_allocation_failures("tcp", tcp_pair, hosts, 4, 70001);
  test_errors();
  test_failure_fences();
  test_killed_peer(/*cma=*/true);
  test_killed_peer(/*cma=*/false);
  test_sha256();
  test_shm_refusals();
  test_shm_poison_of_a_leaving_peer();
  run_by_host_selftest(&g_checks.checks, &g_checks.failures);
  run_mpiabi_selftest(&g_checks.checks, &g_checks.failures);
  std::printf("%d checks, %d failures\n", g_checks.checks, g_checks.failures);
  return g_checks.failures == 0 ? 0 : 1;
}
