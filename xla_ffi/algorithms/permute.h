// A collective permutation over a Link (jax.lax.ppermute): every rank sends its buffer
// to at most one rank and receives at most one rank's; a rank that receives none gets
// zeros.
#pragma once

#include "algorithms/algorithm.h"

namespace accl {

// Where this rank's buffer goes and where its result comes from (ranks of the link;
// -1: none; this rank itself: a copy).
struct PermutePeers {
  int send_to = -1;
  int recv_from = -1;
};

// One step. With peer memory (threads of one process) the receiver copies the
// sender's buffer, read in place, and every rank meets the others at a barrier before
// it returns (a peer may still be reading its input); otherwise one message each way.
Status run_permute(Link& link, const std::vector<Buffers>& segments, const PermutePeers& peers);

}  // namespace accl
