// Rooted collectives over a Link: a broadcast (every rank gets the root's buffer) and a
// reduce (the root gets the reduction of every rank's buffer, the other ranks zeros:
// each is the other's transpose).
#pragma once

#include "algorithms/algorithm.h"

namespace accl {

// One step from the root, direct: with peer memory (threads of one process) every rank
// copies the root's input, read in place, and the ranks meet at a closing barrier (the
// root's input must outlive the reads); otherwise the root posts its buffer to every
// peer. `root` is a rank of the link.
Status run_broadcast(Link& link, const std::vector<Buffers>& segments, int root);

// One step to the root, direct: with peer memory the root folds every rank's input, read
// in place, in rank order; otherwise every rank posts its buffer to the root, which
// receives and reduces them in rank order. The other ranks then zero their outputs.
Status run_reduce(Link& link, const std::vector<Buffers>& segments, const Reduction& reduction,
                  int root);

}  // namespace accl
