// Reduce-scatter, all-gather and all-to-all by host (algorithms/scatter_gather_by_host.cc,
// all_to_all_by_host.cc) over memory channels, hosts x ranks interleaved (host h holds ranks h, h +
// H, ...): every block size against the exact int32 sum, whole and pipelined (more chunks than
// elements too), several segments cut by size, a rank that never comes (every other
// rank's error names its link, none hangs) and a rank that fails locally (every other
// rank ends within seconds, learning it from a chain of peers that starts at it). The pipeline's
// stage (InOrderThread), threaded and inline: order, a failing step, a throwing step, a deadline.
#include "selftest/by_host_selftest.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/all_to_all.h"
#include "algorithms/in_order_thread.h"
#include "algorithms/scatter_gather.h"
#include "reduce/reduce.h"
#include "selftest/checks.h"
#include "selftest/interposed_link.h"
#include "transport/channel_link.h"
#include "transport/ring_channel.h"

namespace accl {
namespace {

Checks g;

// Each end named after the rank at its other end, so that an error names the peer.
void memory_pair(int a, int b, std::unique_ptr<Channel>* x, std::unique_ptr<Channel>* y) {
  make_memory_channels(x, y, str_cat("memory to rank ", b), str_cat("memory to rank ", a));
}

// hosts x per_host ranks over one memory mesh; rank r's grid and two links.
struct ByHostRanks {
  ByHostRanks(int hosts, int per_host, double timeout_s)
      : hosts(hosts),
        per_host(per_host),
        mesh(make_channel_mesh(hosts * per_host, 1, memory_pair)),
        deadline(Deadline::after_seconds(timeout_s)) {
    grid.hosts.assign(hosts, {});
    for (int r = 0; r < hosts * per_host; ++r) grid.hosts[r % hosts].push_back(r);
  }
  void tiers(int r, HostGrid* mine, std::unique_ptr<ChannelLink>* in_host,
             std::unique_ptr<ChannelLink>* between) const {
    *mine = grid;
    mine->host = r % hosts;
    mine->position = r / hosts;
    const auto all = channels_of(mesh, r);
    std::vector<std::vector<Channel*>> local, across;
    for (int q = 0; q < per_host; ++q) local.push_back(all[grid.hosts[mine->host][q]]);
    for (int h = 0; h < hosts; ++h) across.push_back(all[grid.hosts[h][mine->position]]);
    *in_host =
        std::make_unique<ChannelLink>(mine->position, local, 21, "selftest in host", deadline);
    *between = std::make_unique<ChannelLink>(mine->host, across, 22, "selftest between", deadline);
  }
  int size() const { return hosts * per_host; }
  // Runs `call` on a thread per rank with its grid and its two links; every rank's status.
  std::vector<Status> run(const std::function<Status(int r, const HostGrid&, ChannelLink& in_host,
                                                     ChannelLink& between)>& call) const {
    return on_threads(size(), [&](int r) {
      HostGrid mine;
      std::unique_ptr<ChannelLink> in_host, between;
      tiers(r, &mine, &in_host, &between);
      return call(r, mine, *in_host, *between);
    });
  }

  int hosts, per_host;
  HostGrid grid;
  ChannelMesh mesh;
  Deadline deadline;
};

std::string label(const char* what, int hosts, int per_host, const std::vector<size_t>& blocks,
                  const ByHostPipeline& pipeline, int r) {
  std::string sizes;
  for (size_t b : blocks) sizes += str_cat(sizes.empty() ? "" : ",", b);
  return str_cat(what, " by host ", hosts, "x", per_host, " blocks=", sizes,
                 " chunks=", pipeline.chunks, " min_chunk_bytes=", pipeline.min_chunk_bytes,
                 " rank ", r);
}

// One segment per entry of `blocks` (elements of a rank's block).
void test_scatter_gather(int hosts, int per_host, const std::vector<size_t>& blocks,
                         const ByHostPipeline& pipeline) {
  const int n = hosts * per_host;
  const size_t segments = blocks.size();
  std::vector<std::vector<std::vector<int32_t>>> in(segments);  // [segment][rank]
  std::vector<std::vector<int32_t>> total(segments);
  for (size_t s = 0; s < segments; ++s) {
    in[s] = random_inputs(n, n * blocks[s], n * 53 + blocks[s] + s);
    total[s] = reference_sum(in[s]);
  }
  const Reduction sum{reduce_kernel(DType::kI32, ReduceOp::kSum), 4};
  for (Algorithm algorithm : {Algorithm::kDirect, Algorithm::kRing}) {
    std::vector<std::vector<std::vector<int32_t>>> scattered(
        n, std::vector<std::vector<int32_t>>(segments));
    std::vector<std::vector<std::vector<int32_t>>> gathered = scattered;
    ByHostRanks ranks(hosts, per_host, 30);
    auto status =
        ranks.run([&](int r, const HostGrid& mine, ChannelLink& in_host, ChannelLink& between) {
          std::vector<BlockBuffers> bufs;
          for (size_t s = 0; s < segments; ++s) {
            scattered[r][s].resize(blocks[s]);
            bufs.push_back(BlockBuffers{in[s][r].data(), scattered[r][s].data(), blocks[s], 4,
                                        static_cast<int>(s)});
          }
          return reduce_scatter_by_host(in_host, between, mine, algorithm, algorithm, bufs, sum,
                                        pipeline, ranks.deadline);
        });
    for (int r = 0; r < n; ++r) {
      bool exact = status[r].ok();
      for (size_t s = 0; s < segments && exact; ++s) {
        exact = scattered[r][s] == std::vector<int32_t>(total[s].begin() + r * blocks[s],
                                                        total[s].begin() + (r + 1) * blocks[s]);
      }
      g.expect(exact, label("reduce-scatter", hosts, per_host, blocks, pipeline, r) + " " +
                          algorithm_name(algorithm) + ": " + status[r].message());
    }
    ByHostRanks again(hosts, per_host, 30);
    status =
        again.run([&](int r, const HostGrid& mine, ChannelLink& in_host, ChannelLink& between) {
          std::vector<BlockBuffers> bufs;
          for (size_t s = 0; s < segments; ++s) {
            gathered[r][s].resize(n * blocks[s]);
            bufs.push_back(BlockBuffers{scattered[r][s].data(), gathered[r][s].data(), blocks[s], 4,
                                        static_cast<int>(s)});
          }
          return all_gather_by_host(in_host, between, mine, algorithm, algorithm, bufs, pipeline,
                                    again.deadline);
        });
    for (int r = 0; r < n; ++r) {
      bool exact = status[r].ok();
      for (size_t s = 0; s < segments && exact; ++s) exact = gathered[r][s] == total[s];
      g.expect(exact, label("all-gather", hosts, per_host, blocks, pipeline, r) + " " +
                          algorithm_name(algorithm) + ": " + status[r].message());
    }
  }
}

// Block j of rank r's all-to-all output is block r of rank j's input; in place too (the
// output the input's buffer).
void test_all_to_all(int hosts, int per_host, const std::vector<size_t>& blocks,
                     const ByHostPipeline& pipeline, bool in_place) {
  const int n = hosts * per_host;
  const size_t segments = blocks.size();
  std::vector<std::vector<std::vector<int32_t>>> in(segments);  // [segment][rank]
  for (size_t s = 0; s < segments; ++s) in[s] = random_inputs(n, n * blocks[s], n * 31 + s);
  std::vector<std::vector<std::vector<int32_t>>> out(n,
                                                     std::vector<std::vector<int32_t>>(segments));
  ByHostRanks ranks(hosts, per_host, 30);
  auto status =
      ranks.run([&](int r, const HostGrid& mine, ChannelLink& in_host, ChannelLink& between) {
        std::vector<BlockBuffers> bufs;
        for (size_t s = 0; s < segments; ++s) {
          out[r][s] = in_place ? in[s][r] : std::vector<int32_t>(n * blocks[s]);
          bufs.push_back(BlockBuffers{in_place ? out[r][s].data() : in[s][r].data(),
                                      out[r][s].data(), blocks[s], 4, static_cast<int>(s)});
        }
        return all_to_all_by_host(in_host, between, mine, bufs, pipeline, ranks.deadline);
      });
  for (int r = 0; r < n; ++r) {
    bool exact = status[r].ok();
    for (size_t s = 0; s < segments && exact; ++s) {
      const size_t b = blocks[s];
      for (int j = 0; j < n && exact; ++j) {
        exact = std::equal(in[s][j].begin() + r * b, in[s][j].begin() + (r + 1) * b,
                           out[r][s].begin() + j * b);
      }
    }
    g.expect(exact, label(in_place ? "all-to-all (in place)" : "all-to-all", hosts, per_host,
                          blocks, pipeline, r) +
                        ": " + status[r].message());
  }
}

// The schedules by host that the failure tests run, each over its two links (ring in
// each tier where there is a choice), of int32 (a sum where it reduces).
enum class Tiered { kReduceScatter, kAllGather, kAllToAll };
constexpr Tiered kTiered[] = {Tiered::kReduceScatter, Tiered::kAllGather, Tiered::kAllToAll};

const char* tiered_name(Tiered kind) {
  switch (kind) {
    case Tiered::kReduceScatter: return "reduce-scatter";
    case Tiered::kAllGather: return "all-gather";
    case Tiered::kAllToAll: return "all-to-all";
  }
  return "?";
}

Status run_tiered(Tiered kind, Link& in_host, Link& between, const HostGrid& grid,
                  const std::vector<BlockBuffers>& bufs, const ByHostPipeline& pipeline,
                  const Deadline& deadline) {
  const Reduction sum{reduce_kernel(DType::kI32, ReduceOp::kSum), 4};
  switch (kind) {
    case Tiered::kReduceScatter:
      return reduce_scatter_by_host(in_host, between, grid, Algorithm::kRing, Algorithm::kRing,
                                    bufs, sum, pipeline, deadline);
    case Tiered::kAllGather:
      return all_gather_by_host(in_host, between, grid, Algorithm::kRing, Algorithm::kRing, bufs,
                                pipeline, deadline);
    case Tiered::kAllToAll:
      return all_to_all_by_host(in_host, between, grid, bufs, pipeline, deadline);
  }
  return Status(Code::kInternal, "unknown schedule");
}

// The last rank never calls: every other rank fails within its deadline with an error
// of one of its links (the second stage's own, not a bare timeout of the pipeline).
void test_absent_rank(Tiered kind, const ByHostPipeline& pipeline) {
  const int hosts = 2, per_host = 2, n = hosts * per_host;
  const size_t block = 3000;
  auto in = random_inputs(n, n * block, 7);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(n * block));
  ByHostRanks ranks(hosts, per_host, 1.0);
  const auto start = std::chrono::steady_clock::now();
  auto status = on_threads(n, [&](int r) {
    if (r == n - 1) return Status::Ok();
    HostGrid mine;
    std::unique_ptr<ChannelLink> in_host, between;
    ranks.tiers(r, &mine, &in_host, &between);
    const std::vector<BlockBuffers> bufs = {BlockBuffers{in[r].data(), out[r].data(), block, 4, 0}};
    return run_tiered(kind, *in_host, *between, mine, bufs, pipeline, ranks.deadline);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r + 1 < n; ++r) {
    g.expect(!status[r].ok() && status[r].code() == Code::kTimeout &&
                 status[r].message().find("selftest") != std::string::npos,
             str_cat(tiered_name(kind), " by host, rank ", n - 1, " absent, chunks=",
                     pipeline.chunks, ": rank ", r, " says: ", status[r].message()));
  }
  g.expect(seconds < 10,
           str_cat("an absent rank ends every call by its deadline (1 s): took ", seconds, " s"));
}

// A link whose `after`-th receive fails on this rank: an error of its own, or a throw.
class FailingLink final : public InterposedLink {
 public:
  FailingLink(Link& inner, int after, bool throws)
      : InterposedLink(inner), after_(after), throws_(throws) {}

 private:
  Status before_receive() override {
    if (++seen_ != after_) return Status::Ok();
    if (throws_) throw std::runtime_error("injected exception");
    return Status(Code::kInternal, "injected failure");
  }
  int after_, seen_ = 0;
  bool throws_;
};

// The rank an error learnt its failure from: the K of its first "memory to rank K", or -1.
int told_by(const Status& s) {
  const std::string key = "memory to rank ";
  const size_t at = s.message().find(key);
  return at == std::string::npos ? -1 : std::atoi(s.message().c_str() + at + key.size());
}

// Rank r's result of test_by_host_local_failure's call: its block of the sum (reduce-scatter),
// every rank's first block (all-gather), block r of every rank's input (all-to-all).
bool exact_by_host(Tiered kind, const std::vector<std::vector<int32_t>>& in,
                   const std::vector<int32_t>& out, int r, size_t block) {
  if (kind == Tiered::kAllToAll) {
    for (size_t j = 0; j < in.size(); ++j) {
      if (!std::equal(in[j].begin() + r * block, in[j].begin() + (r + 1) * block,
                      out.begin() + j * block)) {
        return false;
      }
    }
    return true;
  }
  if (kind == Tiered::kAllGather) {
    for (size_t j = 0; j < in.size(); ++j) {
      if (!std::equal(in[j].begin(), in[j].begin() + block, out.begin() + j * block)) return false;
    }
    return true;
  }
  std::vector<std::vector<int32_t>> mine;
  for (const auto& v : in) mine.emplace_back(v.begin() + r * block, v.begin() + (r + 1) * block);
  const std::vector<int32_t> want = reference_sum(mine);
  return std::equal(want.begin(), want.end(), out.begin());
}

// Rank 0 fails locally at a receive (its second with several chunks), in the host (the caller's
// thread) or between hosts (the pipeline's second stage), by an error or an exception. It fails
// both its links (fail_links_on_error, as the runtime does), and so does every rank that learns of
// it: each other rank ends within seconds, long before the deadline (20 s), its error
// naming the rank it learnt it from, a chain that leads back to rank 0.
void test_by_host_local_failure(Tiered kind, bool between_hosts, bool throws, int chunks) {
  const int hosts = 2, per_host = 2, n = hosts * per_host;
  const size_t block = 20000;
  auto in = random_inputs(n, n * block, 11);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(n * block));
  const ByHostPipeline pipeline{chunks, 0};
  ByHostRanks ranks(hosts, per_host, 20.0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> seconds(n);
  auto status = ranks.run([&](int r, const HostGrid& mine, ChannelLink& in_host,
                              ChannelLink& between) {
    // With one chunk, a ring of two ranks receives once per link.
    FailingLink failing(between_hosts ? static_cast<Link&>(between) : in_host, chunks > 1 ? 2 : 1,
                        throws);
    Link& host_link = r == 0 && !between_hosts ? failing : static_cast<Link&>(in_host);
    Link& between_link = r == 0 && between_hosts ? failing : static_cast<Link&>(between);
    const std::vector<BlockBuffers> bufs = {BlockBuffers{in[r].data(), out[r].data(), block, 4, 0}};
    Status s = fail_links_on_error({&in_host, &between}, str_cat("selftest rank ", r), [&] {
      return run_tiered(kind, host_link, between_link, mine, bufs, pipeline, ranks.deadline);
    });
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s;
  });
  const std::string what =
      str_cat(tiered_name(kind), " by host, chunks=", chunks, ", rank 0 ",
              throws ? "throws" : "fails", between_hosts ? " between hosts" : " in the host");
  g.expect(!status[0].ok() && status[0].message().find("injected") != std::string::npos,
           what + ": rank 0 says: " + status[0].message());
  for (int r = 1; r < n; ++r) {
    if (status[r].ok()) {  // done with rank 0's data before it failed: exact
      g.expect(exact_by_host(kind, in, out[r], r, block),
               str_cat(what, ": rank ", r, " succeeded, exact"));
      continue;
    }
    // Follow who told whom: every step to a rank that failed, ending at rank 0.
    int k = r, steps = 0;
    while (k > 0 && steps++ < n) k = told_by(status[k]);
    g.expect(status[r].code() != Code::kTimeout && k == 0 && seconds[r] < 5,
             str_cat(what, ": rank ", r, " ends in ", seconds[r],
                     " s (deadline 20 s) from rank 0: ", status[r].message()));
  }
}

// The stage alone: steps run once each, in order; the first failure is every later
// ready's and wait's answer, and no later step runs.
void test_in_order_thread(bool threaded) {
  const char* mode = threaded ? "threaded" : "inline";
  std::vector<int> ran;
  {
    InOrderThread stage(
        5, threaded,
        [&](int k) {
          ran.push_back(k);
          return Status::Ok();
        },
        Deadline::after_seconds(10), "stage");
    Status s = Status::Ok();
    for (int k = 0; k < 5 && s.ok(); ++k) s = stage.ready(k);
    if (s.ok()) s = stage.wait(4);
    g.expect(s.ok() && ran == std::vector<int>({0, 1, 2, 3, 4}),
             str_cat("in-order stage (", mode, "): every step once, in order: ", s.message()));
  }
  ran.clear();
  {
    InOrderThread stage(
        5, threaded,
        [&](int k) {
          ran.push_back(k);
          return k == 2 ? Status(Code::kMismatch, "step 2 says no") : Status::Ok();
        },
        Deadline::after_seconds(10), "stage");
    Status first = Status::Ok();
    for (int k = 0; k < 5 && first.ok(); ++k) first = stage.ready(k);
    const Status waited = stage.wait(4);
    const Status later = stage.ready(4);
    g.expect(
        waited.code() == Code::kMismatch && waited.message() == "step 2 says no" &&
            later.code() == Code::kMismatch && ran == std::vector<int>({0, 1, 2}),
        str_cat("in-order stage (", mode, "): a failed step ends it: wait says '", waited.message(),
                "', a later ready '", later.message(), "', ", ran.size(), " steps ran"));
  }
  {
    InOrderThread stage(
        3, threaded,
        [](int k) -> Status {
          if (k == 1) throw std::runtime_error("out of luck");
          return Status::Ok();
        },
        Deadline::after_seconds(10), "stage");
    stage.ready(2);
    const Status s = stage.wait(2);
    g.expect(s.code() == Code::kInternal && s.message().find("stage: chunk 2: out of luck") == 0,
             str_cat("in-order stage (", mode,
                     "): a step that throws is an error naming the chunk: ", s.message()));
  }
  if (!threaded) return;
  {
    // The step outlives the wait's deadline and ends by its own, with its own error.
    InOrderThread stage(
        2, true,
        [](int) {
          std::this_thread::sleep_for(std::chrono::milliseconds(400));
          return Status(Code::kTimeout, "link: timed out waiting for peer 3");
        },
        Deadline::after_seconds(0.1), "stage");
    stage.ready(1);
    const Status s = stage.wait(1);
    g.expect(
        s.code() == Code::kTimeout && s.message() == "link: timed out waiting for peer 3",
        "in-order stage: a wait past the deadline returns the step's own error: " + s.message());
  }
  {
    // A step that succeeds late: the wait's own timeout, naming the stage.
    InOrderThread stage(
        2, true,
        [](int) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          return Status::Ok();
        },
        Deadline::after_seconds(0.1), "stage");
    stage.ready(1);
    const Status s = stage.wait(1);
    g.expect(s.code() == Code::kTimeout && s.message().find("stage: timed out") == 0,
             "in-order stage: a step late past the deadline times the wait out: " + s.message());
  }
  {
    // Nothing handed over: the stage's thread times out waiting, and says so.
    InOrderThread stage(
        2, true, [](int) { return Status::Ok(); }, Deadline::after_seconds(0.1), "stage");
    const Status s = stage.wait(0);
    g.expect(s.code() == Code::kTimeout && s.message().find("to be handed") != std::string::npos,
             "in-order stage: a chunk never handed over times out: " + s.message());
  }
}

}  // namespace

void run_by_host_selftest(int* checks, int* failures) {
  for (bool threaded : {true, false}) test_in_order_thread(threaded);
  for (int hosts : {2, 3}) {
    for (size_t block : {size_t(0), size_t(1), size_t(333), size_t(20001)}) {
      for (int chunks : {1, 3, 400}) test_scatter_gather(hosts, 2, {block}, {chunks, 0});
    }
  }
  // Segments cut by size: 8 chunks at most, of 4 KiB or more (2000 int32: 1 chunk; 5000: 4).
  test_scatter_gather(2, 2, {2000, 0, 5000, 1, 9000}, {8, 4096});
  test_scatter_gather(3, 2, {5000, 7}, {2, 4096});
  for (int hosts : {2, 3}) {
    for (int per_host : {2, 3}) {
      for (size_t block : {size_t(0), size_t(1), size_t(333), size_t(20001)}) {
        for (int chunks : {1, 3, 400}) {
          for (bool in_place : {false, true}) {
            test_all_to_all(hosts, per_host, {block}, {chunks, 0}, in_place);
          }
        }
      }
    }
  }
  test_all_to_all(2, 2, {2000, 0, 5000, 1, 9000}, {8, 4096}, false);
  test_all_to_all(3, 2, {5000, 7}, {2, 4096}, true);
  for (Tiered kind : kTiered) {
    for (int chunks : {1, 3}) test_absent_rank(kind, {chunks, 0});
  }
  for (Tiered kind : kTiered) {
    for (bool between_hosts : {false, true}) {
      for (bool throws : {false, true}) {
        for (int chunks : {1, 4}) test_by_host_local_failure(kind, between_hosts, throws, chunks);
      }
    }
  }
  *checks += g.checks;
  *failures += g.failures;
}

}  // namespace accl
