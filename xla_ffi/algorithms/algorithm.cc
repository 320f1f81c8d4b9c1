#include "algorithms/algorithm.h"

#include <cstring>

namespace accl {
namespace {
constexpr const char* kNames[kNumAlgorithms] = {
    "auto", "direct", "ring", "halving_doubling", "reduce_broadcast", "hierarchical"};
}

const char* algorithm_name(Algorithm algorithm) { return kNames[static_cast<int>(algorithm)]; }

bool parse_algorithm(std::string_view name, Algorithm* out) {
  for (int i = 0; i < kNumAlgorithms; ++i) {
    if (name == kNames[i]) {
      *out = static_cast<Algorithm>(i);
      return true;
    }
  }
  return false;
}

StreamedSegments& streamed_segments() {
  static StreamedSegments counts;
  return counts;
}

namespace {
Status run_segment(Algorithm algorithm, Link& link, const Buffers& buf,
                   const Reduction& reduction) {
  switch (algorithm) {
    case Algorithm::kDirect: return allreduce_direct(link, buf, reduction);
    case Algorithm::kRing:
    case Algorithm::kHalvingDoubling:
      // For two ranks both are one exchange of halves: streamed where the link allows.
      if (pair_streams(link, link.wire_bytes(buf.count * buf.elem_size))) {
        streamed_segments().pair.fetch_add(1, std::memory_order_relaxed);
        return allreduce_pair_streamed(link, buf, reduction);
      }
      if (algorithm == Algorithm::kHalvingDoubling) {
        return allreduce_halving_doubling(link, buf, reduction);
      }
      if (ring_streams(link, link.wire_bytes(buf.count * buf.elem_size))) {
        streamed_segments().ring.fetch_add(1, std::memory_order_relaxed);
        return allreduce_ring_streamed(link, buf, reduction);
      }
      return allreduce_ring(link, buf, reduction);
    case Algorithm::kReduceBroadcast: return allreduce_reduce_broadcast(link, buf, reduction);
    case Algorithm::kHierarchical:  // composed by runtime/multiprocess.cc, not a Link algorithm
    case Algorithm::kAuto: break;
  }
  return error(Code::kInternal, link.where(), ": no algorithm chosen");
}
}  // namespace

Status run_allreduce(Algorithm algorithm, Link& link, const std::vector<Buffers>& segments,
                     const Reduction& reduction) {
  if (link.size() == 1) {
    for (const Buffers& buf : segments) {
      reduction.copy_alone(buf.out, buf.in, buf.count, buf.elem_size);
    }
    return Status::Ok();
  }
  for (const Buffers& buf : segments) {
    ACCL_RETURN_IF_ERROR(run_segment(algorithm, link, buf, reduction));
  }
  // Peers may still read our input (or, reduce-broadcast, write our output).
  if (algorithm == Algorithm::kDirect || algorithm == Algorithm::kReduceBroadcast) {
    return close_in_place_reads(link, algorithm == Algorithm::kReduceBroadcast);
  }
  return Status::Ok();
}

Status close_in_place_reads(Link& link, bool always) {
  PeerMemory* peers = link.peer_memory();
  if (peers == nullptr || link.size() == 1 || (!always && peers->inputs_staged())) {
    return Status::Ok();
  }
  return peers->barrier();
}

}  // namespace accl
