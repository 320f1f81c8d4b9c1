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
    s.reduction->copy_alone(s.outputs[0], s.staged[0], s.count, s.reduction->elem_size);
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

// In the order of enum Collective (each row names the fields it sets; the rest keep
// CollectiveRow's defaults: no reduction, no peers, no root, no one-shot, never by host).
const CollectiveRow kRows[kNumCollectives] = {
    {.id = Collective::kAllReduce,
     .target = "accl_allreduce",
     .flat_phase = "flat",
     .reduces = true,
     .output_count = same_count,
     .block_count = same_count,
     .what = op_only,
     .plan = plan_allreduce_call,
     .predict = predict_allreduce_seconds,
     .one_shot = allreduce_one_shot,
     .run_flat = allreduce_flat,
     .by_host = ByHost::kHierarchy},
    {.id = Collective::kReduceScatter,
     .target = "accl_reduce_scatter",
     .flat_phase = "reduce-scatter",
     .reduces = true,
     .output_count = one_block_of_n,
     .block_count = one_block_of_n,
     .what = reduce_scatter_what,
     .plan = plan_scatter_gather_call,
     .predict = predict_scatter_gather_seconds,
     .one_shot = reduce_scatter_one_shot,
     .run_flat = reduce_scatter_flat,
     .by_host = ByHost::kTwoTiers,
     .by_host_runner = reduce_scatter_by_host},
    {.id = Collective::kAllGather,
     .target = "accl_all_gather",
     .flat_phase = "all-gather",
     .output_count = n_blocks,
     .block_count = same_count,
     .what = all_gather_what,
     .plan = plan_scatter_gather_call,
     .predict = predict_scatter_gather_seconds,
     .one_shot = all_gather_one_shot,
     .run_flat = all_gather_flat,
     .by_host = ByHost::kTwoTiers,
     .by_host_runner = all_gather_by_host_runner},
    {.id = Collective::kPermute,
     .target = "accl_ppermute",
     .flat_phase = "permute",
     .permutes = true,
     .output_count = same_count,
     .block_count = same_count,
     .what = permute_what,
     .plan = plan_direct_call,
     .predict = predict_permute_seconds,
     .one_shot = permute_one_shot,
     .run_flat = permute_flat},
    {.id = Collective::kAllToAll,
     .target = "accl_all_to_all",
     .flat_phase = "all-to-all",
     .output_count = same_count,
     .block_count = one_block_of_n,
     .what = all_to_all_what,
     .plan = plan_all_to_all_call,
     .predict = predict_all_to_all_seconds,
     .one_shot = all_to_all_one_shot,
     .run_flat = all_to_all_flat,
     .by_host = ByHost::kTwoTiers,
     .by_host_runner = all_to_all_by_host_runner},
    // Its segments are the data and the layout table (algorithms/ragged_all_to_all.h),
    // whose sizes the table describes (no count functions); never one-shot.
    {.id = Collective::kRaggedAllToAll,
     .target = "accl_ragged_all_to_all",
     .flat_phase = "ragged-all-to-all",
     .layout_table = true,
     .what = ragged_all_to_all_what,
     .plan = plan_direct_call,
     .predict = predict_all_to_all_seconds,
     .run_flat = ragged_all_to_all_flat},
    // Rooted: CollectiveArgs::root, direct between the root and every rank (flat
    // between hosts too, for now).
    {.id = Collective::kBroadcast,
     .target = "accl_broadcast",
     .flat_phase = "broadcast",
     .rooted = true,
     .output_count = same_count,
     .block_count = same_count,
     .what = broadcast_what,
     .plan = plan_direct_call,
     .predict = predict_rooted_seconds,
     .one_shot = broadcast_one_shot,
     .run_flat = broadcast_flat},
    {.id = Collective::kReduce,
     .target = "accl_reduce",
     .flat_phase = "reduce",
     .reduces = true,
     .rooted = true,
     .output_count = same_count,
     .block_count = same_count,
     .what = reduce_what,
     .plan = plan_direct_call,
     .predict = predict_rooted_seconds,
     .one_shot = reduce_one_shot,
     .run_flat = reduce_flat},
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
