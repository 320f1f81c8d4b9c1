// All-to-all between hosts in two tiers, so that each rank exchanges one message with each
// of H - 1 ranks of other hosts (one per host: its position's) where the direct schedule
// has it exchange one with every rank of every other host, d·(H-1). Rank at position q of
// host g; block hosts[h][p] of its output is what rank (h, p) sent it:
//   1. in the host: rank q sends each rank p of its host the H blocks bound for position
//      p of every host (input blocks hosts[h][p], h = 0..H-1), and receives from each the
//      blocks it holds for position q: a staging buffer's piece h gathers, at place p,
//      what rank (g, p) sends rank (h, q);
//   2. between hosts: rank q sends piece h to rank (h, q) as one message, and receives
//      from each rank (h', q) the d blocks ranks (h', p) sent it, one message, which it
//      copies to output blocks hosts[h'][p].
// In the host each block travels as a frame of its own, sent from the input (H frames
// to each peer, back to back, no packing copy); between hosts one message per peer and
// chunk. Copies beside the transports': this rank's own blocks, and the unpacking.
// Each rank sends (d-1)/d of its buffer in the host and (H-1)/H between hosts (the
// bytes the direct schedule sends between hosts).
//
// Pipelined as the reduce-scatter by host (scatter_gather_by_host.cc): every block is cut
// into the same ranges of elements (chunks); this thread runs step 1 of chunk k while a
// second thread (InOrderThread) runs step 2 of the chunks before it. In place (in ==
// out) is safe: a chunk's range is written (step 2) only after its step 1 has read and
// sent all of it, and chunks are disjoint ranges.
#include <cstring>
#include <vector>

#include "algorithms/all_to_all.h"
#include "algorithms/by_host_chunks.h"
#include "algorithms/in_order_thread.h"

namespace accl {
namespace {

// Rank `me` of `link` sends peer r the frames at send(r, 0..frames-1), keeps its own
// (copy(0..frames-1)), and receives from each peer r its frames into recv(r, i); peers
// in the pairwise order of run_all_to_all.
template <typename Send, typename Keep, typename Receive>
Status exchange_frames(Link& link, int frames, size_t bytes, Send send, Keep keep,
                       Receive receive) {
  const int n = link.size(), me = link.rank();
  for (int s = 1; s < n; ++s) {
    const int to = (me + s) % n;
    for (int i = 0; i < frames; ++i) ACCL_RETURN_IF_ERROR(link.post_send(to, send(to, i), bytes));
  }
  for (int i = 0; i < frames; ++i) keep(i);
  for (int s = 1; s < n; ++s) {
    const int from = (me - s + n) % n;
    for (int i = 0; i < frames; ++i) ACCL_RETURN_IF_ERROR(link.recv(from, receive(from, i), bytes));
  }
  return link.wait_sends();
}

}  // namespace

Status all_to_all_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          const std::vector<BlockBuffers>& segments, const ByHostPipeline& pipeline,
                          const Deadline& deadline) {
  const int hosts = static_cast<int>(grid.hosts.size());
  const int per_host = static_cast<int>(grid.hosts[0].size());
  const int g = grid.host, q = grid.position;
  if (!in_host.queues_sends() || !between_hosts.queues_sends()) {
    return error(Code::kInternal, in_host.where(),
                 ": an all-to-all by host needs links that queue sends");
  }
  const std::vector<Chunk> chunks = chunks_of(segments, pipeline);
  const int count = static_cast<int>(chunks.size());
  // Thread-local (a fresh buffer costs its page faults; a send still posted when an
  // error returns reads from here until the caller's fail() fences the peers): H·d
  // blocks per chunk, piece h's block p at h·d + p.
  thread_local std::vector<char> storage, arrived_storage;
  const ChunkStaging by_host(segments, hosts * per_host, storage),
      arrived(segments, hosts * per_host, arrived_storage);
  InOrderThread between(
      count, pipeline.chunks > 1,
      [&](int k) {
        const Chunk& c = chunks[k];
        if (c.bytes() == 0) return Status::Ok();
        ACCL_RETURN_IF_ERROR(exchange_frames(
            between_hosts, 1, per_host * c.bytes(),
            [&](int h, int) { return by_host.block(c, h * per_host); }, [](int) {},
            [&](int h, int) { return arrived.block(c, h * per_host); }));
        for (int h = 0; h < hosts; ++h) {
          const ChunkStaging& from = h == g ? by_host : arrived;  // its own piece stays
          for (int p = 0; p < per_host; ++p) {
            std::memcpy(c.out(grid.hosts[h][p]), from.block(c, h * per_host + p), c.bytes());
          }
        }
        return Status::Ok();
      },
      deadline, "all-to-all by host");
  for (int k = 0; k < count; ++k) {
    const Chunk& c = chunks[k];
    if (c.bytes() > 0) {  // (an empty segment's data() is null)
      ACCL_RETURN_IF_ERROR(exchange_frames(
          in_host, hosts, c.bytes(), [&](int p, int h) { return c.in(grid.hosts[h][p]); },
          [&](int h) {
            std::memcpy(by_host.block(c, h * per_host + q), c.in(grid.hosts[h][q]), c.bytes());
          },
          [&](int p, int h) { return by_host.block(c, h * per_host + p); }));
    }
    ACCL_RETURN_IF_ERROR(between.ready(k));
  }
  ACCL_RETURN_IF_ERROR(between.wait(count - 1));
  between.finish();
  release_if_large(storage);
  release_if_large(arrived_storage);
  return Status::Ok();
}

}  // namespace accl
