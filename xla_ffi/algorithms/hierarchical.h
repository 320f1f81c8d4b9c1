// The hierarchical all-reduce (ACCL), composed of links: one per local tier (the device
// threads of a process, the processes of a host; topology/group_layout.h) and one
// between hosts. Schedule, per call:
//   1. reduce-scatter up the local tiers: at each tier the first `owners` ranks own one
//      slice each (Blocks{count, owners} of every segment of the tier below). Over peer
//      memory (threads of one process) owner i folds slice i of every rank's input in
//      one pass; over messages every rank sends its slice i to owner i, which reduces
//      each copy as it is received. Only owners climb to the next tier;
//   2. between hosts: a rank that owns a slice at every tier all-reduces it with the
//      ranks of the same position on every other host (`between_algorithm`), all such
//      ranks at once on disjoint data, so every rank's connections, and every rail,
//      carry a share;
//   3. all-gather down the tiers: every rank receives (over peer memory, copies) each
//      owner's finished slice.
// A tier where the rank is alone (nullptr link) is skipped; with one host, so is 2.
// Pipelined: the buffer is cut into `chunks` chunks (Blocks of every segment), each
// run through 1-3 in turn; the step between hosts runs on a thread of its own, chunk
// after chunk, so that chunk c's transfer overlaps the local reduce-scatter of the
// next chunks and the all-gather of the previous ones. Every rank of the group uses
// the same number of chunks (each tier's messages go chunk by chunk).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/wait.h"

namespace accl {

// One local tier as one rank sees it; its rank there is link->rank().
struct Tier {
  Link* link = nullptr;  // nullptr: the rank is alone in this tier
  int owners = 1;
};

// One phase of one rank's call, for stats and traces.
struct PhaseRecord {
  // The first three = the stats phase; kStep: one step of the schedule between hosts
  // (algorithms/step_times.h), inside its chunk's kBetweenHosts.
  enum Kind { kReduceScatter = 0, kBetweenHosts = 1, kAllGather = 2, kStep = 3 } kind;
  int tier;  // the local tier of a reduce-scatter or all-gather; a step's number
  int chunk;
  Clock::time_point start, end;
  uint64_t bytes;  // the bytes the phase works on: this rank's part entering the tier
                   // (reduce-scatter, all-gather), its slice (between hosts), a step's
                   // received message
  int peer = -1;   // a step: the rank (between hosts) it received from; -1: waiting for
                   // the step's sends
};
using HierarchicalTimes = std::vector<PhaseRecord>;

// Whether the step between hosts streams the pipeline's `chunks` chunks (each chunk's
// slice posted to the peers as soon as it is ready, without waiting for the previous
// chunk's to arrive): direct does, over two chunks or more; every other algorithm runs
// each chunk's step whole, one after another. The runtime's plan (runtime/call_plan.h)
// reports its protocol from this.
bool streams_between_hosts(Algorithm between, int chunks);

// `tiers`: the local tiers, innermost first; only tier 0 may have peer memory.
// `between`: the link among the ranks of this rank's position on every host, nullptr
// when it owns no slice or the group has one host.
Status allreduce_hierarchical(const std::vector<Tier>& tiers, Link* between,
                              Algorithm between_algorithm, const std::vector<Buffers>& segments,
                              const Reduction& reduction, int chunks, const Deadline& deadline,
                              HierarchicalTimes* times);

}  // namespace accl
