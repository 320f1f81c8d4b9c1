// A collective all-to-all over a Link (jax.lax.all_to_all): every rank's buffer is n
// blocks of equal size, block b for rank b; rank r's result is the n blocks addressed to
// it, block q the one rank q sent.
#pragma once

#include "algorithms/algorithm.h"
#include "algorithms/scatter_gather.h"
#include "common/wait.h"

namespace accl {

// Pairwise direct, one step per peer. With peer memory (threads of one process) each
// rank copies its block of every peer's input, read in place, straight into its output,
// and the ranks meet at a barrier before returning; otherwise n - 1 messages each way.
Status run_all_to_all(Link& link, const std::vector<Buffers>& segments);

// Between hosts in two tiers (algorithms/all_to_all_by_host.cc): in the host, then among
// each position's ranks on every host: a rank exchanges one message with each of H - 1
// ranks of other hosts where direct exchanges one with each of d·(H-1).
// `in_host` links this host's ranks (index: position), `between_hosts` this position's
// rank on every host (index: host); segments' blocks as BlockBuffers (n of them in and
// out, in == out allowed). Pipelined as `pipeline` says, the second stage's thread
// waiting until `deadline`.
Status all_to_all_by_host(Link& in_host, Link& between_hosts, const HostGrid& grid,
                          const std::vector<BlockBuffers>& segments, const ByHostPipeline& pipeline,
                          const Deadline& deadline);

}  // namespace accl
