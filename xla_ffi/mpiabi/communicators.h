// The communicators XLA:CPU's MPI collectives use, on jax_accl's World: MPI_COMM_WORLD
// (every process's CPU devices, in process order), MPI_COMM_SELF, and those
// MPI_Comm_split makes, each a group of global devices with a lane of its own (its
// channels). A call on one runs as jax_accl's collective of that group
// (run_across_processes): hierarchical between hosts, every rail, shared memory within
// a host. With several devices per process each device's thread is a rank of its own:
// its split gives it a communicator of its group's devices at its device's place, and
// the communicators of this process's ranks of one group share one Group, where they
// meet in memory (only the processes' rounds go on the wire).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/permute.h"
#include "common/dtype.h"
#include "common/status.h"
#include "mpiabi/abi.h"
#include "runtime/collective_call.h"

namespace accl::mpiabi {

// What a provisional communicator may be: the split's color and key, and the groups
// it may be made of, each with the MPI calls (kind: 0 all-reduce, 1 all-gather, 2
// reduce-scatter, 3 all-to-all, 4 collective-permute; DType code or -1; elements per
// rank or -1) its collectives make (read from the program: jax_accl/xla_subsets.py).
struct Provisional {
  int color = 0;
  int key = 0;
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::vector<std::array<int64_t, 3>>> calls;
};

// A communicator: a group as its calls name it (runtime/collective_call.h's CallGroup:
// the members' global device ids in rank order, this rank, the lane,
// the label "MPI communicator [0 2]"), and what MPI adds: its handle, its split state and
// its point-to-point pairs.
struct Comm : CallGroup {
  Comm() {
    group = std::make_shared<Group>();
    across_processes = true;
  }
  uintptr_t handle = 0;
  // Why the communicator cannot be used (a split that failed: XLA ignores the split's
  // error, so its collectives on it fail naming this instead).
  Status broken;
  std::atomic<uint64_t> calls{0};   // its collectives so far, the same count in every rank
  std::atomic<uint64_t> splits{0};  // its splits so far
  // A provisional communicator (several devices per process): the split could be one
  // of several groups of one program that put two of this process's devices at its
  // place; its rank is the place and its size the groups' common size, and its first
  // call binds it to the group whose collectives that call matches (bind_provisional).
  std::shared_ptr<const Provisional> provisional;
  // Its point-to-point pairs (pair_of), made on first use.
  std::mutex pairs_mutex;
  std::map<std::pair<int, int>, std::shared_ptr<Comm>> pairs;
};

// This process's rank and the process count of MPI_COMM_WORLD (jax.distributed's).
Status world_identity(int* rank, int* size);
// The communicator of `handle`, or an error naming `function`.
Status find_comm(MPIABI_Comm handle, const char* function, std::shared_ptr<Comm>* out);
// MPI_Comm_split: the ranks of `parent` agree on every rank's (color, key) (an
// all-gather, within the collective timeout); *out is the new communicator, or
// MPI_COMM_NULL for MPI_UNDEFINED. A failed agreement still makes a communicator, a
// broken one, so that XLA's later calls on it fail with the reason.
// A split of MPI_COMM_WORLD that XLA makes from only some processes (a program on some
// of them: the groups note_groups was given say which) is an agreement of those only;
// one whose group cannot be told (two programs' groups of different processes fit it, or
// two of one program whose order is not known) is refused: an error, *out left
// MPI_COMM_NULL (MPI_Comm_split then gives a communicator failing with the reason).
Status split(Comm& parent, int color, int key, MPIABI_Comm* out);
// The groups XLA may split MPI_COMM_WORLD into, read from one compiled program:
// `data` is [flags (1: the program runs on only some processes; 2: some of its
// collectives are inside a loop or a branch, its order not theirs), program size, its
// devices..., group count, (group size, its devices in rank order...)...].
Status note_groups(const int64_t* data, int64_t size);
// A program told by note_groups (the same `data`) that will not run: one loaded never
// ran and now never will (JAX refused its run, or its executable was freed). Once no
// loaded program of those groups is left, they are forgotten: a later split they would
// have made ambiguous is made for the program that runs.
Status forget_groups(const int64_t* data, int64_t size);
// A rejoin (jax_accl/membership.py), on the XLA path: held_groups() gives the groups of
// the communicators across processes XLA holds in this process ([count, (size, lane,
// devices...)...]); a process started again is given, by set_split_before_rejoin, those
// of the processes that stayed, which their XLA never splits again: its split of one is
// made from what they said (the same devices and lane), without an agreement.
std::vector<int64_t> held_groups();
Status set_split_before_rejoin(const int64_t* data, int64_t size);
// A split that could not be made (`why`: its error's text): *out is a communicator whose
// every call fails naming `why`, never MPI_COMM_NULL (XLA ignores the split's error and
// keeps what it got). Its size is MPI_COMM_WORLD's where known.
Status refused_split(std::string why, int color, int key, MPIABI_Comm* out);
void free_comm(MPIABI_Comm handle);
// The two-rank communicator of `comm`'s ranks `sender` (its rank 0) and `receiver`
// (rank 1), on a lane of its own: its calls are the messages between the two, which
// both count alike whatever else either does (a rank outside a permutation makes no
// call at all).
Status pair_of(Comm& comm, int sender, int receiver, std::shared_ptr<Comm>* out);

// Binds *comm, where it is provisional, to the one group whose collectives make a call
// of `kind`, `dtype` (-1: not said) and `elements` (-1: not said), then makes the split
// among that group (its agreement, within JAX_ACCL_TIMEOUT_S) and puts the communicator
// made under the same handle (*comm becomes it). A call that matches no group, or more
// than one, is an error naming the groups; so is a group another device here holds.
Status bind_provisional(std::shared_ptr<Comm>* comm, const char* function, int kind, int dtype,
                        int64_t elements);

// One collective of `comm` (its next in every rank): `count` elements of `dtype` in
// (an all-gather's block; a reduce-scatter's whole input), `args` its collective's
// arguments (a permutation's peers).
// Counted in stats under `function` (MPI_Allreduce).
Status run_collective_on(Comm& comm, const char* function, Collective collective, DType dtype,
                         ReduceOp op, const void* in, void* out, uint64_t count,
                         CollectiveArgs args = {});

// The collective timeout (JAX_ACCL_TIMEOUT_S, as jax.distributed.initialize() found it
// through jax_accl), in seconds.
double timeout_seconds();

}  // namespace accl::mpiabi
