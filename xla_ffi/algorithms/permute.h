// A collective permutation over a Link (jax.lax.ppermute): every rank sends its buffer
// to at most one rank and receives at most one rank's; a rank that receives none gets
// zeros.
#pragma once

#include "algorithms/algorithm.h"

namespace accl {

// One step, `args` saying where this rank's buffer goes and where its result comes
// from (ranks of the link; -1: none; this rank itself: a copy). With peer memory (threads of one
// process) the receiver copies the sender's buffer, read in place, and every rank meets the others
// at a barrier before it returns (a peer may still be reading its input); otherwise one message
// each way.
Status run_permute(Link& link, const std::vector<Buffers>& segments, const CollectiveArgs& args);

}  // namespace accl
