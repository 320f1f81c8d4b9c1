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

#include "algorithms/in_order_thread.h"
#include "algorithms/scatter_gather.h"

namespace accl {
namespace {

// Chunk c of a segment: elements [begin, begin + length) of every block.
struct Chunk {
  const BlockBuffers* segment;
  size_t begin, length;
};

// Every segment cut as `pipeline` says (one chunk for an empty block, so that every
// rank still takes part in each tier).
std::vector<Chunk> chunks_of(const std::vector<BlockBuffers>& segments,
                             const ByHostPipeline& pipeline) {
  std::vector<Chunk> out;
  for (const BlockBuffers& buf : segments) {
    size_t count = std::min<size_t>(buf.block, std::max(1, pipeline.chunks));
    if (pipeline.min_chunk_bytes > 0) {
      count = std::min(count, buf.block_bytes() / pipeline.min_chunk_bytes);
    }
    count = std::max<size_t>(count, 1);
    for (size_t c = 0; c < count; ++c) {
      const size_t begin = buf.block * c / count, end = buf.block * (c + 1) / count;
      out.push_back(Chunk{&buf, begin, end - begin});
    }
  }
  return out;
}

// A call's chunks and their staging in two buffers, segment after segment, each
// chunk's at its place: `wide` holds H·d blocks per rank's chunk (packed: H per
// position), `narrow` H (one position's, a block per host).
class ChunkStaging {
 public:
  ChunkStaging(const std::vector<BlockBuffers>& segments, const ByHostPipeline& pipeline, int hosts,
               int per_host, std::vector<char>& wide, std::vector<char>& narrow)
      : segments_(segments),
        chunks_(chunks_of(segments, pipeline)),
        hosts_(hosts),
        per_host_(per_host),
        wide_(wide),
        narrow_(narrow) {
    size_t offset = 0;
    for (const BlockBuffers& buf : segments) {
      offsets_.push_back(offset);
      offset += buf.block_bytes();
    }
    wide_.resize(offset * hosts * per_host);
    narrow_.resize(offset * hosts);
  }
  int count() const { return static_cast<int>(chunks_.size()); }
  const Chunk& operator[](int k) const { return chunks_[k]; }
  char* wide(const Chunk& c) const { return at(wide_, c, hosts_ * per_host_); }
  char* narrow(const Chunk& c) const { return at(narrow_, c, hosts_); }
  // Piece p, block h of a chunk's wide staging.
  char* piece_block(const Chunk& c, int p, int h) const {
    const size_t bytes = c.length * c.segment->elem_size;
    return wide(c) + (static_cast<size_t>(p) * hosts_ + h) * bytes;
  }

 private:
  char* at(std::vector<char>& v, const Chunk& c, size_t per_rank) const {
    const size_t s = c.segment - segments_.data();
    return v.data() + (offsets_[s] + c.begin * c.segment->elem_size) * per_rank;
  }

  const std::vector<BlockBuffers>& segments_;
  std::vector<Chunk> chunks_;
  std::vector<size_t> offsets_;  // a segment's block offset; its staging's, times per_rank
  int hosts_, per_host_;
  std::vector<char>& wide_;
  std::vector<char>& narrow_;
};

}  // namespace

Status reduce_scatter_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                              Algorithm in_host_algorithm, Algorithm between_algorithm,
                              const std::vector<BlockBuffers>& segments, const Reduction& reduction,
                              const ByHostPipeline& pipeline, const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  // Thread-local: a send still posted when an error returns reads from here until the
  // caller's fail() fences the peers.
  thread_local std::vector<char> packed, host_sum;
  const ChunkStaging chunks(segments, pipeline, hosts, per_host, packed, host_sum);
  InOrderThread between(
      chunks.count(), pipeline.chunks > 1,
      [&](int k) {
        const Chunk& c = chunks[k];
        const BlockBuffers& buf = *c.segment;
        const BlockBuffers slice{chunks.narrow(c), buf.out_block(0) + c.begin * buf.elem_size,
                                 c.length, buf.elem_size, buf.segment};
        return run_reduce_scatter(between_algorithm, between_hosts, {slice}, reduction);
      },
      deadline, "reduce-scatter by host");
  for (int k = 0; k < chunks.count(); ++k) {
    const Chunk& c = chunks[k];
    const BlockBuffers& buf = *c.segment;
    const size_t bytes = c.length * buf.elem_size;
    for (int p = 0; p < per_host && bytes > 0; ++p) {  // (an empty segment's data() is null)
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(chunks.piece_block(c, p, h),
                    buf.in_block(grid.hosts[h][p]) + c.begin * buf.elem_size, bytes);
      }
    }
    const BlockBuffers in_host_buf{chunks.wide(c), chunks.narrow(c), c.length * hosts,
                                   buf.elem_size, buf.segment};
    ACCL_RETURN_IF_ERROR(run_reduce_scatter(in_host_algorithm, in_host, {in_host_buf}, reduction));
    ACCL_RETURN_IF_ERROR(between.ready(k));
  }
  ACCL_RETURN_IF_ERROR(between.wait(chunks.count() - 1));
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
  const ChunkStaging chunks(segments, pipeline, hosts, per_host, packed, position_blocks);
  InOrderThread between(
      chunks.count(), pipeline.chunks > 1,
      [&](int k) {
        const Chunk& c = chunks[k];
        const BlockBuffers& buf = *c.segment;
        const BlockBuffers slice{static_cast<const char*>(buf.in) + c.begin * buf.elem_size,
                                 chunks.narrow(c), c.length, buf.elem_size, buf.segment};
        return run_all_gather(between_algorithm, between_hosts, {slice});
      },
      deadline, "all-gather by host");
  ACCL_RETURN_IF_ERROR(between.ready(chunks.count() - 1));  // the inputs are all there
  for (int k = 0; k < chunks.count(); ++k) {
    ACCL_RETURN_IF_ERROR(between.wait(k));
    const Chunk& c = chunks[k];
    const BlockBuffers& buf = *c.segment;
    const size_t bytes = c.length * buf.elem_size;
    const BlockBuffers in_host_buf{chunks.narrow(c), chunks.wide(c), c.length * hosts,
                                   buf.elem_size, buf.segment};
    ACCL_RETURN_IF_ERROR(run_all_gather(in_host_algorithm, in_host, {in_host_buf}));
    for (int p = 0; p < per_host && bytes > 0; ++p) {
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(buf.out_block(grid.hosts[h][p]) + c.begin * buf.elem_size,
                    chunks.piece_block(c, p, h), bytes);
      }
    }
  }
  between.finish();
  release_if_large(packed);
  release_if_large(position_blocks);
  return Status::Ok();
}

}  // namespace accl
