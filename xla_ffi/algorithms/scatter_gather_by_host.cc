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
// Pipelined: every block is cut into the same `chunks` ranges of elements, and chunk c
// of every block runs the schedule on its own (its staging laid out as above, at the
// chunk's place). The step between hosts runs on a second thread (InOrderThread), chunk
// after chunk, while this thread packs and reduces the next chunks in the host (for the
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

// Every segment cut into `chunks` ranges (fewer where a block is shorter; one for an
// empty block, so that every rank still takes part in each tier).
std::vector<Chunk> chunks_of(const std::vector<BlockBuffers>& segments, int chunks) {
  std::vector<Chunk> out;
  for (const BlockBuffers& buf : segments) {
    const size_t count = std::max<size_t>(1, std::min<size_t>(buf.block, chunks));
    for (size_t c = 0; c < count; ++c) {
      const size_t begin = buf.block * c / count, end = buf.block * (c + 1) / count;
      out.push_back(Chunk{&buf, begin, end - begin});
    }
  }
  return out;
}

// A segment's staging: `per_rank` blocks' worth for each chunk, at the chunk's place.
struct Staging {
  char* base;
  size_t per_rank;  // blocks of one rank's chunk: H·d packed, H per position
  char* of(const Chunk& c) const { return base + c.begin * per_rank * c.segment->elem_size; }
};

// Piece p, block h of a packed chunk.
char* piece_block(char* chunk, int p, int h, int hosts, size_t bytes) {
  return chunk + (static_cast<size_t>(p) * hosts + h) * bytes;
}

// Staging for every segment, one after another; the offsets of each segment's.
std::vector<size_t> segment_offsets(const std::vector<BlockBuffers>& segments, size_t per_rank,
                                    size_t* total) {
  std::vector<size_t> offsets;
  *total = 0;
  for (const BlockBuffers& buf : segments) {
    offsets.push_back(*total);
    *total += buf.block_bytes() * per_rank;
  }
  return offsets;
}

// After a call that succeeded (no send of it still posted), staging above 64 MiB is
// given back: a thread-local buffer otherwise keeps its largest size for the thread's life.
void release_if_large(std::vector<char>& staging) {
  if (staging.capacity() > (size_t{64} << 20)) std::vector<char>().swap(staging);
}

}  // namespace

Status reduce_scatter_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                              Algorithm in_host_algorithm, Algorithm between_algorithm,
                              const std::vector<BlockBuffers>& segments, const Reduction& reduction,
                              int chunks, const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  // Thread-local: a send still posted when an error returns reads from here until the
  // caller's fail() fences the peers.
  thread_local std::vector<char> packed_storage, host_sum_storage;
  // (named here: a thread-local named in the lambda would be the second thread's own)
  std::vector<char>& packed = packed_storage;
  std::vector<char>& host_sum = host_sum_storage;
  size_t packed_total = 0, sum_total = 0;
  const auto packed_at = segment_offsets(segments, hosts * per_host, &packed_total);
  const auto sum_at = segment_offsets(segments, hosts, &sum_total);
  packed.resize(packed_total);
  host_sum.resize(sum_total);
  const std::vector<Chunk> work = chunks_of(segments, chunks);
  auto staging = [&](const Chunk& c, std::vector<char>& v, const std::vector<size_t>& at,
                     size_t per_rank) {
    const size_t s = c.segment - segments.data();
    return Staging{v.data() + at[s], per_rank}.of(c);
  };
  InOrderThread between(
      static_cast<int>(work.size()),
      [&](int k) {
        const Chunk& c = work[k];
        const BlockBuffers& buf = *c.segment;
        const BlockBuffers slice{staging(c, host_sum, sum_at, hosts),
                                 buf.out_block(0) + c.begin * buf.elem_size, c.length,
                                 buf.elem_size, buf.segment};
        return run_reduce_scatter(between_algorithm, between_hosts, {slice}, reduction);
      },
      deadline);
  for (size_t k = 0; k < work.size(); ++k) {
    const Chunk& c = work[k];
    const BlockBuffers& buf = *c.segment;
    const size_t bytes = c.length * buf.elem_size;
    char* chunk = staging(c, packed, packed_at, hosts * per_host);
    for (int p = 0; p < per_host && bytes > 0; ++p) {  // (an empty segment's data() is null)
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(piece_block(chunk, p, h, hosts, bytes),
                    buf.in_block(grid.hosts[h][p]) + c.begin * buf.elem_size, bytes);
      }
    }
    const BlockBuffers in_host_buf{chunk, staging(c, host_sum, sum_at, hosts), c.length * hosts,
                                   buf.elem_size, buf.segment};
    ACCL_RETURN_IF_ERROR(run_reduce_scatter(in_host_algorithm, in_host, {in_host_buf}, reduction));
    ACCL_RETURN_IF_ERROR(between.ready(static_cast<int>(k)));
  }
  ACCL_RETURN_IF_ERROR(between.wait(static_cast<int>(work.size()) - 1));
  between.finish();
  release_if_large(packed);
  release_if_large(host_sum);
  return Status::Ok();
}

Status all_gather_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          Algorithm in_host_algorithm, Algorithm between_algorithm,
                          const std::vector<BlockBuffers>& segments, int chunks,
                          const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  thread_local std::vector<char> position_storage, packed_storage;
  std::vector<char>& position_blocks = position_storage;
  std::vector<char>& packed = packed_storage;
  size_t position_total = 0, packed_total = 0;
  const auto position_at = segment_offsets(segments, hosts, &position_total);
  const auto packed_at = segment_offsets(segments, hosts * per_host, &packed_total);
  position_blocks.resize(position_total);
  packed.resize(packed_total);
  const std::vector<Chunk> work = chunks_of(segments, chunks);
  auto staging = [&](const Chunk& c, std::vector<char>& v, const std::vector<size_t>& at,
                     size_t per_rank) {
    const size_t s = c.segment - segments.data();
    return Staging{v.data() + at[s], per_rank}.of(c);
  };
  InOrderThread between(
      static_cast<int>(work.size()),
      [&](int k) {
        const Chunk& c = work[k];
        const BlockBuffers& buf = *c.segment;
        const BlockBuffers slice{static_cast<const char*>(buf.in) + c.begin * buf.elem_size,
                                 staging(c, position_blocks, position_at, hosts), c.length,
                                 buf.elem_size, buf.segment};
        return run_all_gather(between_algorithm, between_hosts, {slice});
      },
      deadline);
  ACCL_RETURN_IF_ERROR(between.ready(static_cast<int>(work.size()) - 1));  // inputs are there
  for (size_t k = 0; k < work.size(); ++k) {
    ACCL_RETURN_IF_ERROR(between.wait(static_cast<int>(k)));
    const Chunk& c = work[k];
    const BlockBuffers& buf = *c.segment;
    const size_t bytes = c.length * buf.elem_size;
    char* chunk = staging(c, packed, packed_at, hosts * per_host);
    const BlockBuffers in_host_buf{staging(c, position_blocks, position_at, hosts), chunk,
                                   c.length * hosts, buf.elem_size, buf.segment};
    ACCL_RETURN_IF_ERROR(run_all_gather(in_host_algorithm, in_host, {in_host_buf}));
    for (int p = 0; p < per_host && bytes > 0; ++p) {
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(buf.out_block(grid.hosts[h][p]) + c.begin * buf.elem_size,
                    piece_block(chunk, p, h, hosts, bytes), bytes);
      }
    }
  }
  between.finish();
  release_if_large(position_blocks);
  release_if_large(packed);
  return Status::Ok();
}

}  // namespace accl
