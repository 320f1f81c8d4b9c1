// Reduce-scatter and all-gather over a Link: the two halves of an all-reduce, as
// collectives of their own (jax.lax.psum_scatter and all_gather). Each runs on every
// rank of a group with the same arguments. Rank r's blocks are rank-major: block j of a
// rank's reduce-scatter input is what it contributes to rank j, and block j of every
// rank's all-gather output is rank j's input.
#pragma once

#include <vector>

#include "algorithms/algorithm.h"
#include "common/wait.h"

namespace accl {

// One rank's buffers of one segment: `block` elements of `elem_size` bytes per rank.
// Reduce-scatter: `in` holds n blocks, `out` one (the reduction of every rank's block
// r, for rank r). All-gather: `in` holds one block, `out` n (rank order). `segment`:
// the index under which the ranks published their buffers (PeerMemory). `in` and `out`
// do not overlap.
struct BlockBuffers {
  const void* in;
  void* out;
  size_t block;
  size_t elem_size;
  int segment = 0;
  const char* in_block(int j) const { return static_cast<const char*>(in) + j * block * elem_size; }
  char* out_block(int j) const { return static_cast<char*>(out) + j * block * elem_size; }
  size_t block_bytes() const { return block * elem_size; }
};

// Direct, one step: with peer memory (threads of one process) each rank reads what it
// needs from its peers' inputs in place (zero copy), and the caller's barrier ends the
// call; else every rank sends each peer its part. Reduce-scatter folds in rank order
// 0..n-1, as the direct all-reduce does. Bytes moved per rank: (n-1)·block.
Status reduce_scatter_direct(Link& link, const BlockBuffers& buf, const Reduction& reduction);
Status all_gather_direct(Link& link, const BlockBuffers& buf);
// Ring, n-1 steps of one block to the next rank: bandwidth-optimal for large blocks,
// one connection per rank busy at a time (algorithms/reduce_scatter.cc, all_gather.cc).
Status reduce_scatter_ring(Link& link, const BlockBuffers& buf, const Reduction& reduction);
Status all_gather_ring(Link& link, const BlockBuffers& buf);

// The group by host, for the two-tier schedules below: hosts[h][p] is the rank at
// position p of host h (every host has the same number of ranks), and this rank is
// hosts[host][position].
struct HostGrid {
  std::vector<std::vector<int>> hosts;
  int host = 0;
  int position = 0;
};

// How a call by host is pipelined: each segment's blocks are cut into at most `chunks`
// ranges of at least `min_chunk_bytes` (0: `chunks` of them, where a block has that
// many elements); the step between hosts runs on a second thread where chunks > 1.
struct ByHostPipeline {
  int chunks = 1;
  size_t min_chunk_bytes = 0;
};

// Between hosts: a reduce-scatter (all-gather) inside each host, then among the ranks
// of one position on every host (the other way round for the all-gather), so a host
// sends (H-1)/H of a buffer once (algorithms/scatter_gather_by_host.cc). `in_host`
// links this host's ranks (index: position), `between_hosts` this position's rank on
// every host (index: host). Pipelined as `pipeline` says (the second thread waiting
// until `deadline`); the two links are then used by one thread each.
Status reduce_scatter_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                              Algorithm in_host_algorithm, Algorithm between_algorithm,
                              const std::vector<BlockBuffers>& segments, const Reduction& reduction,
                              const ByHostPipeline& pipeline, const Deadline& deadline);
Status all_gather_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          Algorithm in_host_algorithm, Algorithm between_algorithm,
                          const std::vector<BlockBuffers>& segments, const ByHostPipeline& pipeline,
                          const Deadline& deadline);

// Runs `algorithm` (kDirect or kRing) on this rank over every segment, in order, and
// the closing barrier once where peers read each other's memory in place.
Status run_reduce_scatter(Algorithm algorithm, Link& link,
                          const std::vector<BlockBuffers>& segments, const Reduction& reduction);
Status run_all_gather(Algorithm algorithm, Link& link, const std::vector<BlockBuffers>& segments);

}  // namespace accl
