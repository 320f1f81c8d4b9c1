// Where the ranks of one group live, and the three tiers the hierarchical all-reduce
// runs on: devices of a process, processes of a host, hosts. Pure: no I/O, no transport.
//
// A group's hosts are in order of their first rank, a host's processes likewise, a
// process's ranks in rank order: rank at[h][j][t] is device t of process j of host h.
//   tier 0, threads    the ranks of one process; the first `thread_owners` (the fewest
//                      any process of the group has) each own one slice of the buffer;
//   tier 1, processes  for device position t: device t of every process of the host; the
//                      first `process_owners` (the fewest processes any host has) each
//                      own one sub-slice of slice t;
//   tier 2, hosts      for position (t, j): device t of process j of every host, in host
//                      order (halving-doubling keeps it, so hosts keep their places in
//                      the fabric): they all-reduce their sub-slice.
// Between hosts every slice is striped over every rail, by weight: the rails stay busy
// while any slice is still on its way, so one late slice does not leave a rail idle
// (measured on namespaced hosts: mapping slice q to rail q mod R alone ran 1.13-1.21x the
// network limit where striping ran 1.08-1.10x; the bytes on every link are the same).
// A rank that owns no slice of a tier only contributes to that tier's reduce-scatter
// and receives in its all-gather: every layout, even or not, runs the same schedule.
//
// jax_accl.plan reads it through the binding (bindings/plan.cc), and tests/plan checks it
// against these rules written out independently.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace accl {

struct RankPlace {
  int process = 0;
  std::string host;
};

class GroupLayout {
 public:
  // `places[r]`: where group rank r lives.
  static Status make(const std::vector<RankPlace>& places, GroupLayout* out);

  int size() const { return static_cast<int>(where_.size()); }
  int host_count() const { return static_cast<int>(at_.size()); }
  int process_count() const { return process_count_; }
  int thread_owners() const { return thread_owners_; }
  int process_owners() const { return process_owners_; }
  int host_of(int rank) const { return where_[rank].host; }
  // Every rank of `host`, in rank order.
  std::vector<int> host_ranks(int host) const;

  // Tier 0: the ranks of `rank`'s process; its index there is its device position t.
  const std::vector<int>& process_ranks(int rank) const;
  int device_position(int rank) const { return where_[rank].device; }
  // Tier 1: device t of every process of `rank`'s host (t < thread_owners); its index
  // there is its process position j.
  std::vector<int> process_peers(int rank) const;
  int process_position(int rank) const { return where_[rank].process; }
  // Tier 2: device t of process j of every host (t < thread_owners, j < process_owners);
  // its index there is its host.
  std::vector<int> host_peers(int rank) const;
  // Whether `rank` owns a slice at every local tier, and so takes part between hosts.
  bool owns_slice(int rank) const;

  // e.g. "2 hosts [(0 1) (2) | (3 4) (5)], 2 owners per process, 1 per host".
  std::string describe() const;

 private:
  struct Where {
    int host, process, device;
  };
  std::vector<std::vector<std::vector<int>>> at_;  // [host][process][device] -> rank
  std::vector<Where> where_;
  int process_count_ = 0;
  int thread_owners_ = 0;
  int process_owners_ = 0;
};

}  // namespace accl
