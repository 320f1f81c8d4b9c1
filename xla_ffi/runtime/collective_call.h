// One rank's collective call (any row of runtime/collective.h): among the device threads
// of this process (validate, meet the other ranks in the rendezvous, plan, run over the
// in-process transport, record), or across processes (runtime/multiprocess.cc). Shared
// by the XLA FFI handler, the MPI library and the native test entry points.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/permute.h"
#include "runtime/rendezvous.h"

namespace accl {

struct CallSpec {
  CallKey key;
  int rank = 0;
  int64_t device = -1;  // the global device id
  int size = 1;
  uint64_t lane = 0;  // the op within its program, the same in every process (a group's
                      // calls of one lane run in order; lanes run concurrently)
  std::string label;  // e.g. "group [0 1 2 3] op 5 seq 0"
  // Where this process's ranks of the call meet (every rank of the call the same one).
  std::shared_ptr<Rendezvous> rendezvous;
  PermutePeers peers;  // a permutation's: where this rank sends and receives from
  Signature signature;
  double timeout_s = kDefaultCallTimeoutSeconds;
  // The hierarchy's pipeline chunks between hosts: 0 the cost model's, 1 off, n forced
  // (JAX_ACCL_PIPELINE_CHUNKS, carried like the deadline).
  int pipeline_chunks = 0;
  // When XLA issued the call (the FFI handler ran): the call's trace event and time
  // start there, waiting for a call thread included. Unset (the native tests): when the
  // call starts running.
  Clock::time_point issued{};
  Clock::time_point start() const { return issued == Clock::time_point{} ? Clock::now() : issued; }
};

// The reduce kernel of spec.signature, or an error naming the rank and the call.
Status reduction_for(const CallSpec& spec, Reduction* reduction);

// Runs `collective` by `algorithm` over `link`: an all-reduce of each segment, a
// reduce-scatter (a segment's `count` is its n blocks of input, n = `size`), an
// all-gather (`count` is its input, one block) or a permutation among `peers`.
Status run_collective(Collective collective, Algorithm algorithm, Link& link,
                      const std::vector<Buffers>& segments, int size, const Reduction& reduction,
                      const PermutePeers& peers);

// One rank's call over its segments: `in[k]` -> `out[k]`, counts[k] elements of input
// each (an all-reduce's output is as large; a reduce-scatter's 1/size of it, an
// all-gather's size times). spec.signature's count/segments/layout are filled from
// `counts`.
Status run_in_process(CallSpec spec, const std::vector<const void*>& in,
                      const std::vector<void*>& out, const std::vector<uint64_t>& counts);

// The same call for a group whose devices live in several processes. `devices` are the
// group's global device ids in rank order (spec.rank indexes it). Groups that stay
// inside this process go to run_in_process.
Status run_across_processes(CallSpec spec, const std::vector<int64_t>& devices,
                            const std::vector<const void*>& in, const std::vector<void*>& out,
                            const std::vector<uint64_t>& counts);

}  // namespace accl
