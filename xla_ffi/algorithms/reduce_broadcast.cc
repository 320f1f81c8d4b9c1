// Reduce-broadcast all-reduce in shared memory, for large messages on one host.
//   The buffer is cut into n blocks; rank r owns block r. For each tile of its block
//   (small enough to stay in L1/L2) it folds the n inputs in rank order into a scratch
//   tile (in one pass where there is a k-input kernel), then stores the tile into block
//   r of every rank's output with non-temporal stores, which skip the
//   read-for-ownership an ordinary store pays. The caller's
//   closing barrier then tells everybody that all outputs are complete (and that inputs are no
//   longer read). Memory traffic of the whole group: n·S bytes read and n·S written, the least any
//   all-reduce of n buffers can do; two sync points (the join and the barrier).
#include <algorithm>
#include <vector>

#include "algorithms/algorithm.h"

namespace accl {
namespace {
constexpr size_t kTileBytes = 16 << 10;
}

Status allreduce_reduce_broadcast(Link& link, const Buffers& buf, const Reduction& reduction) {
  PeerMemory* peers = link.peer_memory();
  if (peers == nullptr) {
    return error(Code::kInvalidArgument, link.where(),
                 ": reduce_broadcast needs ranks that share memory");
  }
  const int n = link.size(), me = link.rank(), seg = buf.segment;
  const Blocks blocks{buf.count, n};
  const size_t first = blocks.begin(me), length = blocks.length(me);
  const size_t tile = std::max<size_t>(1, kTileBytes / buf.elem_size);
  thread_local std::vector<char> scratch_storage;
  scratch_storage.resize(kTileBytes + 64);
  char* scratch =
      scratch_storage.data() + (64 - reinterpret_cast<uintptr_t>(scratch_storage.data()) % 64);
  auto at = [&](const void* base, size_t elem) {
    return static_cast<const char*>(base) + elem * buf.elem_size;
  };
  std::vector<const void*> sources(n);
  for (size_t done = 0; done < length; done += tile) {
    const size_t m = std::min(tile, length - done), e = first + done;
    for (int r = 0; r < n; ++r) sources[r] = at(peers->input(r, seg), e);
    reduction.fold(scratch, sources.data(), n, m);
    for (int k = 0; k < n; ++k) {  // start with our own output, then the next ranks'
      const int r = (me + k) % n;
      stream_copy(const_cast<char*>(at(peers->output(r, seg), e)), scratch, m * buf.elem_size);
    }
  }
  stream_fence();
  return Status::Ok();
}

}  // namespace accl
