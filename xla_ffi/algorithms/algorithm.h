// All-reduce algorithms over a Link. Each runs on every rank of a group with the
// same arguments and leaves the reduction of all ranks' `in` in every rank's `out`.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/link.h"

namespace accl {

enum class Algorithm : int {
  kAuto = 0,
  kDirect = 1,
  kRing = 2,
  kHalvingDoubling = 3,
  // Every rank reduces its block from every rank's buffer in place and writes it back to
  // every rank: needs peer memory (the device threads of one process, or cross-memory
  // attach between the processes of one host).
  kReduceBroadcast = 4,
  // By host, across processes: the all-reduce's hierarchy (reduce-scatter up the tiers,
  // between hosts, all-gather down), and the two-tier schedule by host of a
  // reduce-scatter, all-gather or all-to-all (runtime/collective.h's by_host runners).
  kHierarchical = 5,
};
inline constexpr int kNumAlgorithms = 6;

// What a call computes: an all-reduce, one of its halves (algorithms/scatter_gather.h),
// a permutation (each rank sends its buffer to at most one rank, algorithms/permute.h),
// an all-to-all, or a rooted collective (a root's buffer to all, all reduced to a root:
// algorithms/rooted.h).
// A new collective is one enumerator and its name here (the runtime's table,
// runtime/collective.cc, has a row for each, in this order).
enum class Collective : int {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kPermute = 3,
  kAllToAll = 4,
  kRaggedAllToAll = 5,
  kBroadcast = 6,
  kReduce = 7,
};
// Their names in errors and stats, in the enum's order.
inline constexpr const char* kCollectiveNames[] = {
    "all-reduce", "reduce-scatter",    "all-gather", "permute",
    "all-to-all", "ragged-all-to-all", "broadcast",  "reduce"};
inline constexpr int kNumCollectives = sizeof(kCollectiveNames) / sizeof(kCollectiveNames[0]);
static_assert(static_cast<int>(Collective::kReduce) == kNumCollectives - 1,
              "one name per collective, the last enumerator last");
inline const char* collective_name(Collective collective) {
  return kCollectiveNames[static_cast<int>(collective)];
}

const char* algorithm_name(Algorithm algorithm);
bool parse_algorithm(std::string_view name, Algorithm* out);

// What a collective takes besides its buffers, as ranks of its group, the same for
// every collective's call (each reads its own): a permutation's peers, where this rank
// sends and where it receives from (-1: nowhere); a rooted collective's root.
struct CollectiveArgs {
  int send_to = -1;
  int recv_from = -1;
  int root = -1;
  // An all-reduce's float32 sum sent as bfloat16 (the MPI library's calls under
  // JAX_ACCL_WIRE_DTYPE=bfloat16: runtime/call.h's Signature::wire_bf16).
  bool wire_bf16 = false;
};

// `count` elements cut into `parts` contiguous blocks whose sizes differ by at most one.
struct Blocks {
  size_t count;
  int parts;
  size_t begin(int i) const {
    size_t base = count / parts, extra = count % parts;
    return base * i + (static_cast<size_t>(i) < extra ? i : extra);
  }
  size_t length(int i) const { return begin(i + 1) - begin(i); }
  // Elements of blocks [first, last).
  size_t span(int first, int last) const { return begin(last) - begin(first); }
};

Status allreduce_direct(Link& link, const Buffers& buf, const Reduction& reduction);
// After a call that succeeded (no send of it still posted), a buffer a thread keeps from
// call to call is given back above 64 MiB: it would otherwise keep its largest size for
// the thread's life.
inline void release_if_large(std::vector<char>& kept) {
  if (kept.capacity() > (size_t{64} << 20)) std::vector<char>().swap(kept);
}
// Two ranks over a link that queues sends, at least 2 MiB (pair_streams): halves
// exchanged chunk by chunk, the results of a chunk travelling beside the next chunk's
// halves (algorithms/pair_exchange.cc). Ring and halving-doubling run it there.
bool pair_streams(const Link& link, size_t bytes);
Status allreduce_pair_streamed(Link& link, const Buffers& buf, const Reduction& reduction);
// Direct over messages in two halves, for a caller that streams several buffers: post
// `buf.in` to every peer; later, receive every peer's and fold them into `buf.out` in rank
// order, as allreduce_direct does. buf.in must differ from buf.out and stay intact until
// the caller's wait_sends.
Status direct_post(Link& link, const Buffers& buf);
Status direct_receive(Link& link, const Buffers& buf, const Reduction& reduction);
Status allreduce_ring(Link& link, const Buffers& buf, const Reduction& reduction);
// More than two ranks over a link that queues sends, blocks of at least two pieces
// (ring_stream_pieces > 1): the ring with every block cut into pieces, each forwarded as
// soon as it arrives, so the link never drains between steps (algorithms/ring_streamed.cc).
// The ring runs it there.
int ring_stream_pieces(size_t bytes, int n);
bool ring_streams(const Link& link, size_t bytes);
Status allreduce_ring_streamed(Link& link, const Buffers& buf, const Reduction& reduction);
Status allreduce_halving_doubling(Link& link, const Buffers& buf, const Reduction& reduction);
Status allreduce_reduce_broadcast(Link& link, const Buffers& buf, const Reduction& reduction);

// Reduce-broadcast between processes of one host through `memory` (cross-memory
// attach), over all segments at once; `link` carries only addresses and the closing
// barrier. With `probe`,
// the ranks first check that each can read every peer's memory and all set *usable to
// the same answer (false: nothing was done, use another algorithm).
Status allreduce_cma(Link& link, ProcessMemory& memory, const std::vector<Buffers>& segments,
                     const Reduction& reduction, bool probe, bool* usable);

// Runs `algorithm` (not kAuto) on this rank over every segment, in order. Algorithms
// that read peers' memory in place leave the closing barrier to this function, so a
// fused call of many segments pays for one barrier, not one per segment.
// The closing barrier of a call whose ranks read (or write) each other's buffers in
// place: no rank returns, letting its caller reuse its buffers, while a peer may still
// touch them. Nothing to wait for without peer memory, alone, or where the inputs were
// staged (copied out) before anyone read them, unless `always` (an output written by
// peers).
Status close_in_place_reads(Link& link, bool always = false);

Status run_allreduce(Algorithm algorithm, Link& link, const std::vector<Buffers>& segments,
                     const Reduction& reduction);

// The segments run_allreduce ran streamed in this process (one per rank and segment), by
// schedule: what shows that a call streamed (jax_accl.stats()["streamed_segments"]).
struct StreamedSegments {
  std::atomic<uint64_t> pair{0};  // allreduce_pair_streamed
  std::atomic<uint64_t> ring{0};  // allreduce_ring_streamed
};
StreamedSegments& streamed_segments();

}  // namespace accl
