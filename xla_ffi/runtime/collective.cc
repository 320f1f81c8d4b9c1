#include "runtime/collective.h"

#include <cstring>

#include "algorithms/all_to_all.h"
#include "algorithms/ragged_all_to_all.h"
#include "algorithms/rooted.h"

namespace accl {
namespace {

uint64_t same_count(uint64_t in, uint64_t) { return in; }
uint64_t one_block_of_n(uint64_t in, uint64_t n) { return in / n; }
uint64_t n_blocks(uint64_t in, uint64_t n) { return in * n; }

std::string op_only(ReduceOp op) { return reduce_op_name(op); }
std::string reduce_scatter_what(ReduceOp op) {
  return str_cat("reduce-scatter (", reduce_op_name(op), ")");
}
std::string all_gather_what(ReduceOp) { return "all-gather"; }
std::string permute_what(ReduceOp) { return "permute"; }
std::string all_to_all_what(ReduceOp) { return "all-to-all"; }
std::string ragged_all_to_all_what(ReduceOp) { return "ragged all-to-all"; }
std::string broadcast_what(ReduceOp) { return "broadcast"; }
std::string reduce_what(ReduceOp op) { return str_cat("reduce (", reduce_op_name(op), ")"); }

// The one-shot's last rank, one segment: every output from the staged inputs.
void allreduce_one_shot(const OneShotSegment& s) {
  const size_t bytes = s.count * s.reduction->elem_size;
  if (s.size == 1) {
    std::memcpy(s.outputs[0], s.staged[0], bytes);
    return;
  }
  s.reduction->fold(s.outputs[0], s.staged.data(), s.size, s.count);
  for (int r = 1; r < s.size; ++r) std::memcpy(s.outputs[r], s.outputs[0], bytes);
}

void reduce_scatter_one_shot(const OneShotSegment& s) {
  const size_t elem = s.reduction->elem_size;
  const uint64_t block = s.count / s.size;
  std::vector<const void*> sources(s.size);
  for (int r = 0; r < s.size; ++r) {
    if (s.size == 1) {
      std::memcpy(s.outputs[r], s.staged[r], block * elem);
      continue;
    }
    for (int q = 0; q < s.size; ++q) {
      sources[q] = static_cast<const char*>(s.staged[q]) + r * block * elem;
    }
    s.reduction->fold(s.outputs[r], sources.data(), s.size, block);
  }
}

void all_gather_one_shot(const OneShotSegment& s) {
  const size_t bytes = s.count * s.reduction->elem_size;
  for (int r = 0; r < s.size; ++r) {
    for (int q = 0; q < s.size; ++q) std::memcpy(s.outputs[r] + q * bytes, s.staged[q], bytes);
  }
}

void permute_one_shot(const OneShotSegment& s) {
  const size_t bytes = s.count * s.reduction->elem_size;
  for (int r = 0; r < s.size; ++r) {
    const int from = (*s.recv_from)[r];
    if (from < 0) {
      std::memset(s.outputs[r], 0, bytes);
    } else {
      std::memcpy(s.outputs[r], s.staged[from], bytes);
    }
  }
}

// Block q of rank r's output is block r of rank q's input.
void all_to_all_one_shot(const OneShotSegment& s) {
  const size_t block = s.count / s.size * s.reduction->elem_size;
  for (int r = 0; r < s.size; ++r) {
    for (int q = 0; q < s.size; ++q) {
      std::memcpy(s.outputs[r] + q * block, static_cast<const char*>(s.staged[q]) + r * block,
                  block);
    }
  }
}

// Every output is the root's staged input.
void broadcast_one_shot(const OneShotSegment& s) {
  const size_t bytes = s.count * s.reduction->elem_size;
  for (int r = 0; r < s.size; ++r) std::memcpy(s.outputs[r], s.staged[s.root], bytes);
}

// The root's output is the fold of every staged input; the others' are zeros.
void reduce_one_shot(const OneShotSegment& s) {
  const size_t bytes = s.count * s.reduction->elem_size;
  for (int r = 0; r < s.size; ++r) {
    if (r != s.root) std::memset(s.outputs[r], 0, bytes);
  }
  if (s.size == 1) {
    std::memcpy(s.outputs[s.root], s.staged[0], bytes);
  } else {
    s.reduction->fold(s.outputs[s.root], s.staged.data(), s.size, s.count);
  }
}

Status allreduce_flat(Algorithm algorithm, Link& link, const std::vector<Buffers>& segments, int,
                      const Reduction& reduction, const CollectiveArgs&) {
  return run_allreduce(algorithm, link, segments, reduction);
}

Status reduce_scatter_flat(Algorithm algorithm, Link& link, const std::vector<Buffers>& segments,
                           int size, const Reduction& reduction, const CollectiveArgs&) {
  return run_reduce_scatter(algorithm, link, blocks_of(Collective::kReduceScatter, segments, size),
                            reduction);
}

Status all_gather_flat(Algorithm algorithm, Link& link, const std::vector<Buffers>& segments,
                       int size, const Reduction&, const CollectiveArgs&) {
  return run_all_gather(algorithm, link, blocks_of(Collective::kAllGather, segments, size));
}

Status permute_flat(Algorithm, Link& link, const std::vector<Buffers>& segments, int,
                    const Reduction&, const CollectiveArgs& args) {
  return run_permute(link, segments, args);
}

Status all_to_all_flat(Algorithm, Link& link, const std::vector<Buffers>& segments, int,
                       const Reduction&, const CollectiveArgs&) {
  return run_all_to_all(link, segments);
}

Status ragged_all_to_all_flat(Algorithm, Link& link, const std::vector<Buffers>& segments, int,
                              const Reduction&, const CollectiveArgs&) {
  return run_ragged_all_to_all(link, segments);
}

Status broadcast_flat(Algorithm, Link& link, const std::vector<Buffers>& segments, int,
                      const Reduction&, const CollectiveArgs& args) {
  return run_broadcast(link, segments, args.root);
}

Status reduce_flat(Algorithm, Link& link, const std::vector<Buffers>& segments, int,
                   const Reduction& reduction, const CollectiveArgs& args) {
  return run_reduce(link, segments, reduction, args.root);
}

Status all_gather_by_host_runner(Link& in_host, Link& between_hosts, const HostGrid& grid,
                                 Algorithm in_host_algorithm, Algorithm between_algorithm,
                                 const std::vector<BlockBuffers>& segments, const Reduction&,
                                 const ByHostPipeline& pipeline, const Deadline& deadline) {
  return all_gather_by_host(in_host, between_hosts, grid, in_host_algorithm, between_algorithm,
                            segments, pipeline, deadline);
}

Status all_to_all_by_host_runner(Link& in_host, Link& between_hosts, const HostGrid& grid,
                                 Algorithm, Algorithm, const std::vector<BlockBuffers>& segments,
                                 const Reduction&, const ByHostPipeline& pipeline,
                                 const Deadline& deadline) {
  return all_to_all_by_host(in_host, between_hosts, grid, segments, pipeline, deadline);
}

// In the order of enum Collective.
const CollectiveRow kRows[kNumCollectives] = {
    {Collective::kAllReduce, "accl_allreduce ", "flat", true, false, false, same_count, same_count,
     op_only, plan_allreduce_call, predict_allreduce_seconds, allreduce_one_shot, allreduce_flat,
     ByHost::kHierarchy, nullptr},
    {Collective::kReduceScatter, "accl_reduce_scatter ", "reduce-scatter", true, false, false,
     one_block_of_n, one_block_of_n, reduce_scatter_what, plan_scatter_gather_call,
     predict_scatter_gather_seconds, reduce_scatter_one_shot, reduce_scatter_flat,
     ByHost::kTwoTiers, reduce_scatter_by_host},
    {Collective::kAllGather, "accl_all_gather ", "all-gather", false, false, false, n_blocks,
     same_count, all_gather_what, plan_scatter_gather_call, predict_scatter_gather_seconds,
     all_gather_one_shot, all_gather_flat, ByHost::kTwoTiers, all_gather_by_host_runner},
    {Collective::kPermute, "accl_ppermute ", "permute", false, true, false, same_count, same_count,
     permute_what, plan_direct_call, predict_permute_seconds, permute_one_shot, permute_flat,
     ByHost::kNever, nullptr},
    {Collective::kAllToAll, "accl_all_to_all ", "all-to-all", false, false, false, same_count,
     one_block_of_n, all_to_all_what, plan_all_to_all_call, predict_all_to_all_seconds,
     all_to_all_one_shot, all_to_all_flat, ByHost::kTwoTiers, all_to_all_by_host_runner},
    // Its segments are the data and the layout table (algorithms/ragged_all_to_all.h),
    // whose sizes the table describes.
    {Collective::kRaggedAllToAll, "accl_ragged_all_to_all ", "ragged-all-to-all", false, false,
     false, nullptr, nullptr, ragged_all_to_all_what, plan_direct_call, predict_all_to_all_seconds,
     nullptr, ragged_all_to_all_flat, ByHost::kNever, nullptr},
    // Rooted: CollectiveArgs::root, direct between the root and every rank (flat
    // between hosts too, for now).
    {Collective::kBroadcast, "accl_broadcast ", "broadcast", false, false, true, same_count,
     same_count, broadcast_what, plan_direct_call, predict_rooted_seconds, broadcast_one_shot,
     broadcast_flat, ByHost::kNever, nullptr},
    {Collective::kReduce, "accl_reduce ", "reduce", true, false, true, same_count, same_count,
     reduce_what, plan_direct_call, predict_rooted_seconds, reduce_one_shot, reduce_flat,
     ByHost::kNever, nullptr},
};

}  // namespace

const CollectiveRow& collective_row(Collective collective) {
  return kRows[static_cast<int>(collective)];
}

std::vector<BlockBuffers> blocks_of(Collective collective, const std::vector<Buffers>& segments,
                                    int size) {
  std::vector<BlockBuffers> blocks;
  for (const Buffers& b : segments) {
    blocks.push_back(BlockBuffers{b.in, b.out,
                                  collective_row(collective).block_count(b.count, size),
                                  b.elem_size, b.segment});
  }
  return blocks;
}

}  // namespace accl
