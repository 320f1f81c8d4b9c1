// Reduce-scatter and all-gather between hosts in two tiers, so that a host sends its
// share over the network once: (H-1)/H of one device's buffer per host, where a flat
// ring over all n = H·d ranks (numbered host by host) sends (n-1)/n of it across each
// host boundary (1.5x for H = d = 2).
//
// Reduce-scatter, rank at position q of host g (its output is block hosts[g][q]):
//   1. pack: piece p of a staging buffer holds, host by host, the blocks of the ranks
//      at position p (block hosts[h][p] for h = 0..H-1): H blocks per piece;
//   2. in the host: reduce-scatter of the pieces among its d ranks: rank q ends with
//      piece q summed over the host;
//   3. between hosts: reduce-scatter of that piece among the H ranks at position q, one
//      per host (each message striped over every rail): block h goes to host h's, and
//      this rank keeps its own, summed over every host.
// All-gather, the mirror image: between hosts (gather the H blocks of position q), in
// the host (gather the d pieces), unpack (piece p's block h is rank hosts[h][p]'s).
//
// Pipelined: every block of a segment is cut into the same ranges of elements (chunks),
// and chunk c of every block runs the schedule on its own (its staging laid out as
// above, at the chunk's place). The step between hosts runs on a second thread (InOrderThread),
// chunk after chunk, while this thread packs and reduces the next chunks in the host (for the
// all-gather: gathers in the host and unpacks the chunks already received), so the
// rails never wait for the host's memory work but for its first (last) chunk.
// Each tier runs direct or ring, as the caller chose. Ranks fold in another order than
// the flat schedules (by host, then between hosts): float sums may differ in rounding.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/by_host_chunks.h"
#include "algorithms/in_order_thread.h"
#include "algorithms/scatter_gather.h"

namespace accl {

Status reduce_scatter_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                              Algorithm in_host_algorithm, Algorithm between_algorithm,
                              const std::vector<BlockBuffers>& segments, const Reduction& reduction,
                              const ByHostPipeline& pipeline, const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  // Thread-local: a send still posted when an error returns reads from here until the
  // caller's fail() fences the peers.
  thread_local std::vector<char> packed, host_sum;
  const std::vector<Chunk> chunks = chunks_of(segments, pipeline);
  const int count = static_cast<int>(chunks.size());
  // Per chunk: H·d blocks packed (piece p, block h at p·H + h), then H (the host's sum).
  const ChunkStaging wide(segments, hosts * per_host, packed), narrow(segments, hosts, host_sum);
  InOrderThread between(
      count, pipeline.chunks > 1,
      [&](int k) {
        const Chunk& c = chunks[k];
        const BlockBuffers& buf = *c.segment;
        const BlockBuffers slice{narrow.at(c), c.out(0), c.length, buf.elem_size, buf.segment};
        return run_reduce_scatter(between_algorithm, between_hosts, {slice}, reduction);
      },
      deadline, "reduce-scatter by host");
  for (int k = 0; k < count; ++k) {
    const Chunk& c = chunks[k];
    const BlockBuffers& buf = *c.segment;
    for (int p = 0; p < per_host && c.bytes() > 0; ++p) {  // (an empty segment's data() is null)
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(wide.block(c, p * hosts + h), c.in(grid.hosts[h][p]), c.bytes());
      }
    }
    const BlockBuffers in_host_buf{wide.at(c), narrow.at(c), c.length * hosts, buf.elem_size,
                                   buf.segment};
    ACCL_RETURN_IF_ERROR(run_reduce_scatter(in_host_algorithm, in_host, {in_host_buf}, reduction));
    ACCL_RETURN_IF_ERROR(between.ready(k));
  }
  ACCL_RETURN_IF_ERROR(between.wait(count - 1));
  between.finish();
  release_if_large(packed);
  release_if_large(host_sum);
  return Status::Ok();
}

Status all_gather_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          Algorithm in_host_algorithm, Algorithm between_algorithm,
                          const std::vector<BlockBuffers>& segments, const ByHostPipeline& pipeline,
                          const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  thread_local std::vector<char> packed, position_blocks;
  const std::vector<Chunk> chunks = chunks_of(segments, pipeline);
  const int count = static_cast<int>(chunks.size());
  // Per chunk: H blocks (this position's, from every host), then H·d (every piece).
  const ChunkStaging narrow(segments, hosts, position_blocks),
      wide(segments, hosts * per_host, packed);
  InOrderThread between(
      count, pipeline.chunks > 1,
      [&](int k) {
        const Chunk& c = chunks[k];
        const BlockBuffers& buf = *c.segment;
        const BlockBuffers slice{c.in(0), narrow.at(c), c.length, buf.elem_size, buf.segment};
        return run_all_gather(between_algorithm, between_hosts, {slice});
      },
      deadline, "all-gather by host");
  ACCL_RETURN_IF_ERROR(between.ready(count - 1));  // the inputs are all there
  for (int k = 0; k < count; ++k) {
    ACCL_RETURN_IF_ERROR(between.wait(k));
    const Chunk& c = chunks[k];
    const BlockBuffers& buf = *c.segment;
    const BlockBuffers in_host_buf{narrow.at(c), wide.at(c), c.length * hosts, buf.elem_size,
                                   buf.segment};
    ACCL_RETURN_IF_ERROR(run_all_gather(in_host_algorithm, in_host, {in_host_buf}));
    for (int p = 0; p < per_host && c.bytes() > 0; ++p) {
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(c.out(grid.hosts[h][p]), wide.block(c, p * hosts + h), c.bytes());
      }
    }
  }
  between.finish();
  release_if_large(packed);
  release_if_large(position_blocks);
  return Status::Ok();
}

}  // namespace accl
