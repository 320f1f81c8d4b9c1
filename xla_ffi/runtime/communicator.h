// A group of devices as jax_accl runs its all-reduces on it: where its ranks live (the
// layout, derived once per group) and the one place where a call's schedule is chosen:
// which algorithm runs, and for the hierarchy the algorithm between hosts and the
// pipeline's chunks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "topology/group_layout.h"

namespace accl {

class World;

struct CallPlan {
  // A flat algorithm over all ranks, kReduceBroadcast (cross-memory attach, one host) or
  // kHierarchical.
  Algorithm schedule = Algorithm::kAuto;
  Algorithm between = Algorithm::kAuto;  // hierarchical, between hosts (kAuto: not this rank)
  int chunks = 1;                        // hierarchical: pipeline chunks
};

// JAX_ACCL_PIPELINE_CHUNKS, as jax_accl's configuration sets it: 0 lets the cost model
// choose (choose_pipeline_chunks), 1 turns pipelining off, n > 1 forces n chunks.
int& pipeline_chunks_setting();

// Whether an all-reduce among the device threads of this process runs as the one-shot
// asynchronous reduce (runtime/one_shot.h): small, and direct or the automatic choice.
bool plan_one_shot(size_t bytes, Algorithm forced);

// The schedule of an all-reduce among `n` device threads of one process: `forced`, or
// where that is kAuto (or kHierarchical, which has one level here) the cost model's.
Algorithm plan_in_process(int n, size_t bytes, Algorithm forced);

class Communicator {
 public:
  // `places[r]`: where rank r lives; `rails`: this process's rails between hosts.
  static Status make(const std::vector<RankPlace>& places, int rails,
                     std::shared_ptr<const Communicator>* out);

  const GroupLayout& layout() const { return layout_; }
  int rails() const { return rails_; }
  // The schedule of rank `rank`'s call of `bytes`: `forced` as the caller asked (kAuto:
  // the cost model's choice); `cma`: cross-memory attach is usable (one host). The same
  // on every rank of the group for the same arguments, except `between`, which is
  // kAuto on ranks that take no part between hosts.
  CallPlan plan(int rank, size_t bytes, Algorithm forced, bool cma) const;

 private:
  GroupLayout layout_;
  int rails_ = 1;
};

// The communicator of the group `devices` (global device ids in rank order) of this
// process's World, made on first use and kept for the World's lifetime.
Status communicator_for(World& world, const std::vector<int64_t>& devices, const std::string& label,
                        std::shared_ptr<const Communicator>* out);

}  // namespace accl
