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
// Each tier runs direct or ring, as the caller chose. Ranks fold in another order than
// the flat schedules (by host, then between hosts): float sums may differ in rounding.
#include <cstring>
#include <vector>

#include "algorithms/scatter_gather.h"

namespace accl {
namespace {

// Where piece p, block h of the staging buffer lives.
char* piece_block(std::vector<char>& staging, const HostGrid& grid, int p, int h, size_t bytes) {
  const size_t hosts = grid.hosts.size();
  return staging.data() + (p * hosts + h) * bytes;
}

// After a call that succeeded (no send of it still posted), staging above 64 MiB is
// given back: a thread-local buffer otherwise keeps its largest size for the thread's life.
void release_if_large(std::vector<char>& staging) {
  if (staging.capacity() > (size_t{64} << 20)) std::vector<char>().swap(staging);
}

}  // namespace

Status reduce_scatter_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                              Algorithm in_host_algorithm, Algorithm between_algorithm,
                              const std::vector<BlockBuffers>& segments,
                              const Reduction& reduction) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  // Thread-local: a send still posted when an error returns reads from here until the
  // caller's fail() fences the peers.
  thread_local std::vector<char> packed, host_sum;
  for (const BlockBuffers& buf : segments) {
    const size_t bytes = buf.block_bytes();
    packed.resize(bytes * hosts * per_host);
    host_sum.resize(bytes * hosts);
    for (int p = 0; p < per_host && bytes > 0; ++p) {  // (an empty segment's data() is null)
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(piece_block(packed, grid, p, h, bytes), buf.in_block(grid.hosts[h][p]), bytes);
      }
    }
    const BlockBuffers in_host_buf{packed.data(), host_sum.data(), buf.block * hosts, buf.elem_size,
                                   buf.segment};
    ACCL_RETURN_IF_ERROR(run_reduce_scatter(in_host_algorithm, in_host, {in_host_buf}, reduction));
    const BlockBuffers between_buf{host_sum.data(), buf.out, buf.block, buf.elem_size, buf.segment};
    ACCL_RETURN_IF_ERROR(
        run_reduce_scatter(between_algorithm, between_hosts, {between_buf}, reduction));
  }
  release_if_large(packed);
  release_if_large(host_sum);
  return Status::Ok();
}

Status all_gather_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          Algorithm in_host_algorithm, Algorithm between_algorithm,
                          const std::vector<BlockBuffers>& segments) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  thread_local std::vector<char> position_blocks, packed;
  for (const BlockBuffers& buf : segments) {
    const size_t bytes = buf.block_bytes();
    position_blocks.resize(bytes * hosts);
    packed.resize(bytes * hosts * per_host);
    const BlockBuffers between_buf{buf.in, position_blocks.data(), buf.block, buf.elem_size,
                                   buf.segment};
    ACCL_RETURN_IF_ERROR(run_all_gather(between_algorithm, between_hosts, {between_buf}));
    const BlockBuffers in_host_buf{position_blocks.data(), packed.data(), buf.block * hosts,
                                   buf.elem_size, buf.segment};
    ACCL_RETURN_IF_ERROR(run_all_gather(in_host_algorithm, in_host, {in_host_buf}));
    for (int p = 0; p < per_host && bytes > 0; ++p) {
      for (int h = 0; h < hosts; ++h) {
        std::memcpy(buf.out_block(grid.hosts[h][p]), piece_block(packed, grid, p, h, bytes), bytes);
      }
    }
  }
  release_if_large(position_blocks);
  release_if_large(packed);
  return Status::Ok();
}

}  // namespace accl
