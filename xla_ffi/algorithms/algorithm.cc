#include "algorithms/algorithm.h"

#include <cstring>

namespace accl {
namespace {
constexpr const char* kNames[kNumAlgorithms] = {"auto", "direct", "ring", "halving_doubling",
                                                   "reduce_broadcast"};
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

Status run_allreduce(Algorithm algorithm, Link& link, const Buffers& buf,
                     const Reduction& reduction) {
  if (link.size() == 1) {
    if (buf.count > 0 && buf.in != buf.out) std::memcpy(buf.out, buf.in, buf.count * buf.elem_size);
    return Status::Ok();
  }
  switch (algorithm) {
    case Algorithm::kDirect: return allreduce_direct(link, buf, reduction);
    case Algorithm::kRing: return allreduce_ring(link, buf, reduction);
    case Algorithm::kHalvingDoubling: return allreduce_halving_doubling(link, buf, reduction);
    case Algorithm::kReduceBroadcast: return allreduce_reduce_broadcast(link, buf, reduction);
    case Algorithm::kAuto: break;
  }
  return error(Code::kInternal, link.where(), ": no algorithm chosen");
}

}  // namespace accl
