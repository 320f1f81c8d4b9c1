// All-to-all between hosts in two tiers, so that what a host sends another crosses the
// network as d messages (one per position, each striped over the rails) where the direct
// schedule sends d·d (every rank of one host to every rank of the other). Rank at
// position q of host g; block hosts[h][p] of its output is what rank (h, p) sent it:
//   1. pack: piece p of a staging buffer holds the blocks bound for position p of every
//      host (input blocks hosts[h][p], h = 0..H-1);
//   2. in the host: all-to-all of the pieces among the host's d ranks: piece p now holds
//      the H blocks rank (g, p) sends to position q of every host;
//   3. regroup by host: piece h holds the d blocks bound for rank (h, q);
//   4. between hosts: all-to-all of those pieces among the H ranks at position q (one per
//      host): piece g' now holds the d blocks ranks (g', p) sent this rank;
//   5. unpack: block p of piece g' is output block hosts[g'][p].
// Each rank sends (d-1)/d of its buffer in the host and (H-1)/H between hosts (the bytes
// the direct schedule sends between hosts), in d-1 + H-1 messages instead of n-1, at the
// price of the step in the host and three copies (pack, regroup, unpack).
//
// Pipelined as the reduce-scatter by host (scatter_gather_by_host.cc): every block is cut
// into the same ranges of elements (chunks); this thread runs steps 1-3 of chunk k while
// a second thread (InOrderThread) runs steps 4-5 of the chunks before it. An in-place call
// is safe: a chunk's range of every block is packed before any of it is written back, and
// chunks are disjoint ranges.
#include <cstring>
#include <vector>

#include "algorithms/all_to_all.h"
#include "algorithms/by_host_chunks.h"
#include "algorithms/in_order_thread.h"

namespace accl {

Status all_to_all_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          const std::vector<BlockBuffers>& segments, const ByHostPipeline& pipeline,
                          const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  const int blocks = hosts * per_host;
  const std::vector<Chunk> chunks = chunks_of(segments, pipeline);
  const int count = static_cast<int>(chunks.size());
  // Thread-local (a fresh buffer costs its page faults; a send still posted when an
  // error returns reads from here until the caller's fail() fences the peers). Each
  // holds H·d blocks per chunk, at the chunk's place.
  thread_local std::vector<char> packed_storage, gathered_storage, by_host_storage, arrived_storage;
  const ChunkStaging packed(segments, blocks, packed_storage),
      gathered(segments, blocks, gathered_storage), by_host(segments, blocks, by_host_storage),
      arrived(segments, blocks, arrived_storage);
  auto whole = [&](const ChunkStaging& from, const ChunkStaging& to, const Chunk& c) {
    return Buffers{from.at(c), to.at(c), c.length * blocks, c.segment->elem_size,
                   c.segment->segment};
  };
  InOrderThread between(
      count, pipeline.chunks > 1,
      [&](int k) {
        const Chunk& c = chunks[k];
        ACCL_RETURN_IF_ERROR(run_all_to_all(between_hosts, {whole(by_host, arrived, c)}));
        for (int h = 0; h < hosts && c.bytes() > 0; ++h) {
          for (int p = 0; p < per_host; ++p) {
            std::memcpy(c.out(grid.hosts[h][p]), arrived.block(c, h * per_host + p), c.bytes());
          }
        }
        return Status::Ok();
      },
      deadline, "all-to-all by host");
  for (int k = 0; k < count; ++k) {
    const Chunk& c = chunks[k];
    for (int p = 0; p < per_host && c.bytes() > 0; ++p) {  // (an empty segment's data() is null)
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(packed.block(c, p * hosts + h), c.in(grid.hosts[h][p]), c.bytes());
      }
    }
    ACCL_RETURN_IF_ERROR(run_all_to_all(in_host, {whole(packed, gathered, c)}));
    for (int h = 0; h < hosts && c.bytes() > 0; ++h) {
      for (int p = 0; p < per_host; ++p) {
        std::memcpy(by_host.block(c, h * per_host + p), gathered.block(c, p * hosts + h),
                    c.bytes());
      }
    }
    ACCL_RETURN_IF_ERROR(between.ready(k));
  }
  ACCL_RETURN_IF_ERROR(between.wait(count - 1));
  between.finish();
  for (std::vector<char>* kept :
       {&packed_storage, &gathered_storage, &by_host_storage, &arrived_storage}) {
    release_if_large(*kept);
  }
  return Status::Ok();
}

}  // namespace accl
