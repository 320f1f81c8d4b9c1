// A collective all-to-all over a Link (jax.lax.all_to_all): every rank's buffer is n
// blocks of equal size, block b for rank b; rank r's result is the n blocks addressed to
// it, block q the one rank q sent.
#pragma once

#include "algorithms/algorithm.h"

namespace accl {

// Pairwise direct, one step per peer. With peer memory (threads of one process) each
// rank copies its block of every peer's input, read in place, straight into its output,
// and the ranks meet at a barrier before returning; otherwise n - 1 messages each way.
Status run_all_to_all(Link& link, const std::vector<Buffers>& segments);

}  // namespace accl
