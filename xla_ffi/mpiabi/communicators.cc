#include "mpiabi/communicators.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "common/faults.h"
#include "common/hash.h"
#include "reduce/reduce.h"
#include "runtime/call_plan.h"
#include "runtime/collective_call.h"
#include "runtime/group.h"
#include "runtime/stats.h"
#include "runtime/world.h"

namespace accl::mpiabi {
namespace {

// The lane of MPI_COMM_WORLD ("mpi"); a split's lane mixes its parent's, the split's
// index and the color, the same in every process.
constexpr uint64_t kWorldLane = 0x6d7069ull << 40;

// A compiled program's groups of devices XLA may split MPI_COMM_WORLD into, read by
// jax_accl from its collectives (jax_accl/xla_subsets.py, note_groups): each group's
// devices in rank order (devices[0] is the color XLA passes, a device's place its key),
// in the program's order; the program's devices, whether those are only some of the
// processes, whether its order is the order it runs its collectives in (not so where
// some are inside a loop or a branch), and when it was last compiled (the same program
// compiled again is kept once).
struct KnownProgram {
  std::vector<std::vector<int64_t>> groups;
  // Each group's MPI calls (Provisional's), where told (flag 8): empty otherwise.
  std::vector<std::vector<std::array<int64_t, 3>>> calls;
  std::vector<int64_t> devices;
  bool subset = false;
  bool ordered = true;
  // Its groups could not be read from its HLO (`groups` empty): any group of `devices`
  // may be one, so no split among them is taken for another program's group.
  bool unknown = false;
  uint64_t seen = 0;
  // How many loaded programs told these groups and have not been forgotten
  // (forget_groups: never run, and now never will: refused by JAX before it ran, or
  // freed). At none, the groups go: no later split is ambiguous for them.
  int loads = 1;
  // How many of those loadings told each call of each group ((group, call) -> count): a
  // call goes from `calls` with the last loading that told it.
  std::map<std::pair<size_t, std::array<int64_t, 3>>, int> call_loads;
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, std::shared_ptr<Comm>> comms;
  uintptr_t next_handle = kFirstDynamicHandle;
  std::vector<KnownProgram> known;
  uint64_t programs = 0;
  // Communicators XLA holds, by their devices and rank: a group's rank XLA made is not
  // made again while it holds it (XLA keeps one communicator per group of devices and
  // rank).
  std::map<std::pair<std::vector<int64_t>, int>, int> live;
  // The parents of splits among a group's devices, by those and this thread's rank:
  // kept, so that their split count goes on as every member's does.
  std::map<std::pair<std::vector<int64_t>, int>, std::shared_ptr<Comm>> among;
  // Where this process's ranks of one group's lane meet (runtime/group.h), shared by the
  // communicators of its ranks here (several devices per process: each device's thread
  // a rank of its own), kept while one of them is.
  std::map<std::pair<std::vector<int64_t>, uint64_t>, std::weak_ptr<Group>> meetings;
  // Groups the processes that stayed split before this process, started again, joined
  // them (jax_accl/membership.py): their devices -> the lane of their communicator. XLA
  // there keeps its communicator of each (one per group for its client's life) and
  // never splits it again, so a split of one here is made from this, without an
  // agreement nobody else would join.
  std::map<std::vector<int64_t>, uint64_t> split_before_rejoin;
  // The job all this is of (jax_accl's World; follow_job), and how many there were.
  std::weak_ptr<World> world;
  uint64_t epoch = 0;
};

// A registry that follows the job: where jax_accl's World is a new one (jax.distributed
// shut down and initialized again, after jax.extend.backend.clear_backends()),
// MPI_COMM_WORLD is made again from its table, every parent's split count starts again
// in every process, and the groups are those of the programs compiled since. The
// communicators XLA holds stay (jaxlib 0.10.2's XLA:CPU keeps them across its clients and
// runs the new job's collectives of their groups on them: their calls run on the new
// World), and so does what they say of the groups XLA will not make again (live; one it
// frees, MPI_Comm_free, it will make again).
void follow_job(Registry& r) {
  const std::shared_ptr<World> now = World::get();
  if (now == nullptr || now == r.world.lock()) return;
  if (r.epoch > 0) {
    r.comms.erase(MPIABI_COMM_WORLD);
    r.among.clear();
    r.known.clear();
  }
  r.world = now;
  ++r.epoch;
}

// The registry, r.mutex held by `lock`, following the job.
Registry& registry(std::unique_lock<std::mutex>* lock);

// The Group of lane `lane` of the group `devices` that every rank of it in this process
// shares (r.mutex held).
std::shared_ptr<Group> meeting_of(Registry& r, const std::vector<int64_t>& devices, uint64_t lane) {
  for (auto it = r.meetings.begin(); it != r.meetings.end();) {
    it = it->second.expired() ? r.meetings.erase(it) : std::next(it);
  }
  std::weak_ptr<Group>& kept = r.meetings[{devices, lane}];
  std::shared_ptr<Group> group = kept.lock();
  if (group == nullptr) kept = group = std::make_shared<Group>();
  return group;
}

Registry& registry(std::unique_lock<std::mutex>* lock) {
  static auto* r = new Registry;  // never destroyed: XLA frees communicators at exit
  *lock = std::unique_lock<std::mutex>(r->mutex);
  follow_job(*r);
  return *r;
}

std::shared_ptr<Group> meeting_of_group(const std::vector<int64_t>& devices, uint64_t lane) {
  std::unique_lock<std::mutex> lock;
  return meeting_of(registry(&lock), devices, lane);
}

std::string label_of(const std::vector<int64_t>& devices) {
  std::string ids;
  for (int64_t d : devices) ids += str_cat(ids.empty() ? "" : " ", d);
  return str_cat("MPI communicator [", ids, "]");
}

const char* not_set_up() {
  return "jax_accl's process table is not set up: jax.distributed.initialize() has not run, "
         "or jax_accl was never imported in this process (with JAX_ACCL_XLA_COLLECTIVES=1 "
         "its start-up hook, jax_accl_xla_collectives.pth in site-packages, imports it with "
         "jax; where Python runs without site, import jax_accl before jax or run the script "
         "under python -m jax_accl.run)";
}

// MPI_COMM_WORLD: every process's CPU devices, in process order. Its rank is this
// process's (its first device's place); with several devices per process a split of it
// is among the group XLA makes (parent_among), each device's thread a rank of its own.
Status make_world(std::shared_ptr<Comm>* out) {
  const std::shared_ptr<World> world = World::get();
  if (world == nullptr || !world->ready()) {
    return error(Code::kInvalidArgument, "MPI_COMM_WORLD: ", not_set_up());
  }
  auto comm = std::make_shared<Comm>();
  comm->handle = MPIABI_COMM_WORLD;
  comm->lane = kWorldLane;
  for (int p = 0; p < world->process_count(); ++p) {
    const std::vector<int64_t>& devices = world->process(p).devices;
    if (p == world->process_index()) comm->rank = static_cast<int>(comm->devices.size());
    comm->devices.insert(comm->devices.end(), devices.begin(), devices.end());
  }
  comm->label = label_of(comm->devices);
  *out = std::move(comm);
  return Status::Ok();
}

// `comm` registered under a new handle, which *out receives.
void register_comm(std::shared_ptr<Comm> comm, MPIABI_Comm* out) {
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  comm->handle = r.next_handle++;
  *out = comm->handle;
  if (comm->broken.ok()) ++r.live[{comm->devices, comm->rank}];
  r.comms[comm->handle] = std::move(comm);
}

// The process of a global device id (-1: none known).
int process_of(int64_t device) {
  const std::shared_ptr<World> world = World::get();
  for (int p = 0; world != nullptr && p < world->process_count(); ++p) {
    const std::vector<int64_t>& own = world->process(p).devices;
    if (std::find(own.begin(), own.end(), device) != own.end()) return p;
  }
  return -1;
}

std::string processes_of(const std::vector<int64_t>& devices) {
  std::string out;
  for (int64_t d : devices) out += str_cat(out.empty() ? "" : ", ", process_of(d));
  return str_cat("[", out, "]");
}

// The parent of a split among the group `devices` for its rank `rank` (this thread's
// device's place), kept by both; this process's ranks of it meet in one Group.
std::shared_ptr<Comm> parent_of(Registry& r, const std::vector<int64_t>& devices, int rank) {
  std::shared_ptr<Comm>& parent = r.among[{devices, rank}];
  if (parent == nullptr) {
    parent = std::make_shared<Comm>();
    parent->handle = MPIABI_COMM_WORLD;
    parent->devices = devices;
    parent->rank = rank;
    Fnv64 lane(kWorldLane);
    lane.mix(0x737562ull);  // "sub"
    for (int64_t d : devices) lane.mix(static_cast<uint64_t>(d));
    parent->lane = lane.value();
    parent->group = meeting_of(r, devices, parent->lane);
    parent->label = str_cat("MPI_COMM_WORLD's processes ", processes_of(devices));
  }
  return parent;
}

// Whether split (color, key) of MPI_COMM_WORLD from this process is one of several
// groups of one program that put two of this process's devices at place `key` (groups
// that start with `color`, none of which XLA holds here yet; the program the same
// device_of_split would take): then *out lists them with their calls, and the split is
// answered by a provisional communicator. Only where the loading hook admitted it
// (jax_accl/xla_split_places.py: no call two of them could both make; one size unless
// all their calls are all-reduces and all-gathers), which is checked again here but for
// the calls' overlap (bind_provisional refuses a call that fits two).
bool provisional_for(const Registry& r, int color, int key, Provisional* out) {
  const std::shared_ptr<World> w = World::get();
  if (w == nullptr || key < 0) return false;
  const std::vector<int64_t>& own = w->process(w->process_index()).devices;
  if (own.size() < 2) return false;
  const auto fits = [&](const std::vector<int64_t>& g) {
    return static_cast<size_t>(key) < g.size() && g[0] == color &&
           std::find(own.begin(), own.end(), g[key]) != own.end() && r.live.count({g, key}) == 0;
  };
  for (const KnownProgram& p : r.known) {
    Provisional found;
    std::vector<int64_t> devices;
    for (size_t i = 0; i < p.groups.size(); ++i) {
      if (!fits(p.groups[i])) continue;
      if (i >= p.calls.size() || p.calls[i].empty()) return false;
      found.groups.push_back(p.groups[i]);
      found.calls.push_back(p.calls[i]);
      if (std::find(devices.begin(), devices.end(), p.groups[i][key]) == devices.end()) {
        devices.push_back(p.groups[i][key]);
      }
    }
    if (found.groups.empty()) continue;  // the earliest program with a fitting group decides
    if (devices.size() < 2) return false;
    // Several sizes only where every call is an all-reduce's or all-gather's: XLA's
    // MpiCommunicator reads its size for a reduce-scatter, an all-to-all (and its rank
    // for a permute, the key here), never for those.
    for (size_t i = 0; i < found.groups.size(); ++i) {
      if (found.groups[i].size() == found.groups[0].size()) continue;
      for (const std::vector<std::array<int64_t, 3>>& calls : found.calls) {
        for (const std::array<int64_t, 3>& c : calls) {
          if (c[0] > 1) return false;
        }
      }
    }
    found.color = color;
    found.key = key;
    *out = std::move(found);
    return true;
  }
  return false;
}

// The device of the thread making split (color, key) of MPI_COMM_WORLD (*mine): this
// process's one device, or, with several (each device's thread makes its own split, its
// arguments the group's first device and its device's place), the device of this
// process at place `key` of the known groups that start with `color`: of the earliest
// loaded program's such group that XLA does not hold yet. Two of this process's devices
// at one place are taken so only where the loading hook found it right (the later
// program's device is in the earlier group, whose program ran first, so that group is
// made before that device asks: jax_accl/xla_split_places.py); it refuses every other
// such program. None such (a program whose groups jax_accl could not read) is an error.
Status device_of_split(const Registry& r, int color, int key, int64_t* mine) {
  const std::shared_ptr<World> w = World::get();
  if (w == nullptr) return error(Code::kInvalidArgument, "MPI_Comm_split: ", not_set_up());
  const int me = w->process_index();
  const std::vector<int64_t>& own = w->process(me).devices;
  const std::string which = str_cat(
      "MPI_Comm_split (color ", color, ", key ", key, ") of MPI_COMM_WORLD from one of process ",
      me, "'s ", own.size(),
      " CPU devices (each device's thread splits for itself, its arguments the group's first "
      "device and its device's place)");
  if (own.size() == 1) {
    *mine = own[0];
    return Status::Ok();
  }
  int64_t held = -1;  // the device of a fitting group XLA holds already
  for (const KnownProgram& p : r.known) {
    for (const std::vector<int64_t>& g : p.groups) {
      if (static_cast<size_t>(key) < g.size() && g[0] == color &&
          std::find(own.begin(), own.end(), g[key]) != own.end()) {
        if (r.live.count({g, key}) == 0) {
          *mine = g[key];
          return Status::Ok();
        }
        if (held < 0) held = g[key];
      }
    }
  }
  if (held >= 0) {  // every fitting group is held: parent_among says so
    *mine = held;
    return Status::Ok();
  }
  return error(Code::kInvalidArgument, which,
               ": no compiled program's collective group starts with device ", color,
               " and has one of this process's devices at place ", key,
               ". With several devices per process jax_accl takes the device from the "
               "groups it reads from each program's HLO; run this program with one CPU "
               "device per process, or without JAX_ACCL_XLA_COLLECTIVES (gloo)");
}

int world_processes() {
  const std::shared_ptr<World> world = World::get();
  return world == nullptr ? 0 : world->process_count();
}

// "processes [0, 1] (devices [0 2048])".
std::string group_text(const std::vector<int64_t>& devices) {
  std::string ids;
  for (int64_t d : devices) ids += str_cat(ids.empty() ? "" : " ", d);
  return str_cat("processes ", processes_of(devices), " (devices [", ids, "])");
}

// Whom a split of MPI_COMM_WORLD (color, key) is made among, and the group it makes
// where known (*expected, else empty). XLA splits MPI_COMM_WORLD once per group of
// devices (it keeps the communicator), from that group's processes only, when a
// program first runs a collective of the group; its arguments do not say which
// processes those are. The groups jax_accl read from the programs loaded in this
// process do: the group XLA is making starts with `color`, holds this process's device
// at `key`, and is not one XLA holds already. Of one program's such groups, the first in
// its order (its scheduled HLO's; XLA runs a program's collectives in that order, so
// makes their groups so: a device can be first of two groups of one program, an
// all-gather's and an all-reduce's). Where two programs' groups so chosen have
// different processes, which program runs cannot be told from the split (two programs
// compiled or loaded before either ran: ahead of time, or deserialized): the split is
// refused on every process that sees it, naming both groups, rather than made among one
// of them (the smaller one would sum over its processes only, silently, while the others
// wait). A split among its group's processes only does not depend on what other
// processes do meanwhile (a program on some processes, a group another program already
// made in some of its processes).
// Where no group is known, among MPI_COMM_WORLD. Every program jax loads is told
// (xla_subsets.py hooks its loading, deserialized ones too): one it was not told of
// could otherwise make a split take another program's smaller group (issue 59).
Status parent_among(const Comm& world, int color, int key, std::vector<int64_t>* expected,
                    std::shared_ptr<Comm>* out) {
  expected->clear();
  *out = nullptr;
  if (world.handle != MPIABI_COMM_WORLD || key < 0) return Status::Ok();
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  int64_t mine = -1;
  ACCL_RETURN_IF_ERROR(device_of_split(r, color, key, &mine));
  const std::vector<int64_t>* best = nullptr;   // the latest program's choice
  const std::vector<int64_t>* other = nullptr;  // another program's, of other devices
  const KnownProgram* unread = nullptr;         // a program of unknown groups that fits
  uint64_t best_seen = 0;
  for (const KnownProgram& p : r.known) {
    if (p.unknown) {
      const auto has = [&](int64_t d) {
        return std::find(p.devices.begin(), p.devices.end(), d) != p.devices.end();
      };
      if (has(mine) && has(color)) unread = &p;
      continue;
    }
    const std::vector<int64_t>* choice = nullptr;
    for (const std::vector<int64_t>& g : p.groups) {
      if (static_cast<size_t>(key) >= g.size() || g[0] != color || g[key] != mine ||
          r.live.count({g, key}) > 0) {
        continue;
      }
      if (choice == nullptr) {
        choice = &g;
        if (p.ordered) break;
      } else if (g != *choice) {
        // Some of this program's collectives are inside a loop or a branch: its order
        // is not the one they run in.
        return error(Code::kInvalidArgument, "this process's device ", mine,
                     " at this place fits two groups of one compiled program XLA may be "
                     "making now: ",
                     group_text(*choice), " and ", group_text(g),
                     ", and some of the program's collectives are inside a loop or a branch, "
                     "so that the order they run in is not known: jax_accl refuses the split "
                     "rather than summing over the wrong processes. Give those collectives "
                     "groups that do not start with the same device, or run the program "
                     "without JAX_ACCL_XLA_COLLECTIVES (gloo)");
      }
    }
    if (choice == nullptr) continue;
    if (best != nullptr && *choice != *best) other = p.seen > best_seen ? best : choice;
    if (best == nullptr || p.seen > best_seen) {
      best = choice;
      best_seen = p.seen;
    }
  }
  if (best == nullptr && world.devices.size() > static_cast<size_t>(world_processes())) {
    return error(Code::kInvalidArgument, "MPI_Comm_split (color ", color, ", key ", key,
                 ") of MPI_COMM_WORLD from this process's device ", mine,
                 ": every group of the compiled programs that fits it is one XLA holds "
                 "already, and with several devices per process a split of every process "
                 "is not one jax_accl can make");
  }
  if (best == nullptr) return Status::Ok();
  if (unread != nullptr) {
    return error(Code::kInvalidArgument, "this process's device ", mine,
                 " at this place fits the group ", group_text(*best),
                 " of a compiled program, and may as well belong to a compiled program whose "
                 "collective groups jax_accl could not read from its HLO (on devices ",
                 group_text(unread->devices),
                 "): the split does not say which one runs, and jax_accl refuses it rather "
                 "than summing over the wrong processes. Run each program once right after "
                 "compiling it (as jax.jit does), or run the job without "
                 "JAX_ACCL_XLA_COLLECTIVES (gloo)");
  }
  if (other != nullptr) {
    const std::vector<int64_t>& small = other->size() < best->size() ? *other : *best;
    const std::vector<int64_t>& large = other->size() < best->size() ? *best : *other;
    return error(Code::kInvalidArgument, "this process's device ", mine,
                 " at this place fits two groups XLA may be making now: ", group_text(small),
                 " and ", group_text(large),
                 ", of two programs. Two programs with these collective groups were "
                 "compiled or loaded before either ran (ahead of time, or deserialized from "
                 "an AOT or compile cache), and the split does not say which one runs: "
                 "jax_accl refuses it rather than summing over the wrong processes. Run each "
                 "program once right after compiling or loading it (as jax.jit does), or drop "
                 "the one that will not run (a program never run stops counting once it is "
                 "freed, or once JAX's thread guard refused its run)");
  }
  *expected = *best;
  *out = parent_of(r, *best, key);
  return Status::Ok();
}

// XLA ignores a split's error: the reason a communicator is broken goes to stderr too
// (once per process), for the checks XLA makes before any call on it (an all-to-all's
// rank count) and fail without it.
void tell_once(const Status& broken) {
  static std::atomic<bool> told{false};
  if (told.exchange(true)) return;
  std::fprintf(stderr,
               "jax_accl: %s (every call on that communicator fails with this reason; later "
               "ones are not printed)\n",
               broken.message().c_str());
}

void copy_block(void* out, const void* in, size_t bytes) {
  if (bytes > 0 && out != in) std::memcpy(out, in, bytes);
}

}  // namespace

double timeout_seconds() {
  World::Job job;
  return World::announced_job(&job) ? job.timeout_s : kDefaultCallTimeoutSeconds;
}

Status world_identity(int* rank, int* size) {
  World::Job job;
  if (!World::announced_job(&job)) {
    return error(Code::kInvalidArgument, "MPI_COMM_WORLD: ", not_set_up());
  }
  *rank = job.process_index;
  *size = job.process_count;
  return Status::Ok();
}

Status find_comm(MPIABI_Comm handle, const char* function, std::shared_ptr<Comm>* out) {
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  auto it = r.comms.find(handle);
  if (it != r.comms.end()) {
    *out = it->second;
    return Status::Ok();
  }
  if (handle == MPIABI_COMM_WORLD) {
    ACCL_RETURN_IF_ERROR(make_world(out));
    r.comms[handle] = *out;
    return Status::Ok();
  }
  if (handle == MPIABI_COMM_SELF) {
    auto self = std::make_shared<Comm>();
    self->handle = handle;
    self->devices = {-1};
    self->label = "MPI_COMM_SELF";
    r.comms[handle] = *out = self;
    return Status::Ok();
  }
  return error(Code::kInvalidArgument, function, ": ",
               handle == MPIABI_COMM_NULL ? "MPI_COMM_NULL" : "an unknown communicator",
               " (handle ", handle, ")");
}

namespace {

// The lane of `devices`' communicator where the processes that stayed split it before
// this process rejoined them (false: they did not).
bool split_before_rejoin(const std::vector<int64_t>& devices, uint64_t* lane) {
  std::unique_lock<std::mutex> lock;
  const Registry& r = registry(&lock);
  auto it = r.split_before_rejoin.find(devices);
  if (it == r.split_before_rejoin.end()) return false;
  *lane = it->second;
  return true;
}

}  // namespace

namespace {

// The communicator split (color, key) makes among `among` (MPI_COMM_WORLD where null),
// `expected` the group it should make (empty: not known): *made (null for
// MPI_UNDEFINED), broken where the agreement failed.
Status make_split(Comm& world, const std::vector<int64_t>& expected, std::shared_ptr<Comm> among,
                  int color, int key, std::shared_ptr<Comm>* made) {
  *made = nullptr;
  uint64_t lane_before = 0;
  if (!expected.empty() && split_before_rejoin(expected, &lane_before)) {
    auto comm = std::make_shared<Comm>();
    comm->lane = lane_before;
    comm->devices = expected;
    comm->rank = key;
    comm->label = label_of(comm->devices);
    comm->group = meeting_of_group(comm->devices, comm->lane);
    *made = std::move(comm);
    return Status::Ok();
  }
  Comm& parent = among != nullptr ? *among : world;
  const uint64_t index = parent.splits.fetch_add(1);
  const int n = static_cast<int>(parent.devices.size());
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * n);
  Status agreed = run_collective_on(parent, "MPI_Comm_split", Collective::kAllGather, DType::kI64,
                                    ReduceOp::kSum, mine, all.data(), 2);
  if (agreed.ok() && color == MPIABI_UNDEFINED) return Status::Ok();
  auto comm = std::make_shared<Comm>();
  comm->lane = Fnv64(parent.lane).mix(index).mix(static_cast<uint64_t>(color)).value();
  if (agreed.ok()) {
    std::vector<int> members;  // parent ranks of this color, by (key, parent rank)
    for (int r = 0; r < n; ++r) {
      if (all[2 * r] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == parent.rank) comm->rank = static_cast<int>(i);
      comm->devices.push_back(parent.devices[members[i]]);
    }
    comm->label = label_of(comm->devices);
    comm->group = meeting_of_group(comm->devices, comm->lane);
    if (!expected.empty() && (comm->devices != expected || comm->rank != key)) {
      std::string said;
      for (int r = 0; r < n; ++r) {
        said += str_cat(r == 0 ? "" : ", ", "process ", process_of(parent.devices[r]), " (color ",
                        all[2 * r], ", key ", all[2 * r + 1], ")");
      }
      agreed = error(Code::kInvalidArgument, "MPI_Comm_split (color ", color, ", key ", key,
                     ") among ", parent.label, " made ", comm->label, " (rank ", comm->rank,
                     ") where this process's compiled programs make ", label_of(expected),
                     " (rank ", key, "): the processes disagree on the group: ", said);
      comm->devices.clear();
    }
  }
  if (!agreed.ok()) {
    comm->devices = parent.devices;
    comm->label = str_cat("MPI communicator of color ", color, " split from ", parent.label);
    comm->broken =
        error(agreed.code(), "splitting ", parent.label, " (color ", color, ", key ", key,
              ") failed, and XLA keeps the communicator it got: restart the "
              "job. The split: ",
              agreed.message());
    tell_once(comm->broken);
  }
  *made = std::move(comm);
  return agreed;
}

// "[0 1 2 3] (all-gather s32 x4, ...)" for a provisional communicator's errors.
std::string calls_text(const std::vector<int64_t>& group,
                       const std::vector<std::array<int64_t, 3>>& calls) {
  static const char* const kinds[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                      "collective-permute"};
  std::string text;
  for (const std::array<int64_t, 3>& c : calls) {
    const char* kind = c[0] >= 0 && c[0] < 5 ? kinds[c[0]] : "?";
    text += str_cat(text.empty() ? "" : ", ", kind);
    if (c[1] >= 0 && c[1] < kNumDTypes) text += str_cat(" ", dtype_name(static_cast<DType>(c[1])));
    if (c[2] >= 0) text += str_cat(" x", c[2]);
  }
  return str_cat(label_of(group).substr(std::string("MPI communicator ").size()), " (", text, ")");
}

}  // namespace

Status split(Comm& world, int color, int key, MPIABI_Comm* out) {
  *out = MPIABI_COMM_NULL;
  if (world.handle == MPIABI_COMM_WORLD && color != MPIABI_UNDEFINED) {
    std::unique_lock<std::mutex> lock;
    Registry& r = registry(&lock);
    Provisional pending;
    if (provisional_for(r, color, key, &pending)) {
      auto comm = std::make_shared<Comm>();
      comm->devices.assign(pending.groups[0].size(), -1);
      comm->rank = key;
      comm->label = str_cat("MPI communicator of color ", color, " and key ", key,
                            " (not yet bound to one group)");
      comm->provisional = std::make_shared<const Provisional>(std::move(pending));
      comm->handle = r.next_handle++;
      *out = comm->handle;
      r.comms[comm->handle] = std::move(comm);  // not live: no group made yet
      return Status::Ok();
    }
  }
  std::vector<int64_t> expected;
  std::shared_ptr<Comm> among;
  ACCL_RETURN_IF_ERROR(parent_among(world, color, key, &expected, &among));
  std::shared_ptr<Comm> comm;
  Status agreed = make_split(world, expected, among, color, key, &comm);
  if (comm != nullptr) register_comm(std::move(comm), out);
  return agreed;
}

Status bind_provisional(std::shared_ptr<Comm>* comm, const char* function, int kind, int dtype,
                        int64_t elements) {
  const std::shared_ptr<const Provisional> p = (*comm)->provisional;
  if (p == nullptr) return Status::Ok();
  const uintptr_t handle = (*comm)->handle;
  std::vector<size_t> matching;
  std::string groups;
  for (size_t i = 0; i < p->groups.size(); ++i) {
    groups += str_cat(groups.empty() ? "" : "; ", calls_text(p->groups[i], p->calls[i]));
    for (const std::array<int64_t, 3>& c : p->calls[i]) {
      if (c[0] == kind && (c[1] < 0 || dtype < 0 || c[1] == dtype) &&
          (c[2] < 0 || elements < 0 || c[2] == elements)) {
        matching.push_back(i);
        break;
      }
    }
  }
  const std::string call =
      str_cat(function, " (", dtype >= 0 ? dtype_name(static_cast<DType>(dtype)) : "bytes",
              elements >= 0 ? str_cat(" x", elements) : std::string(), ")");
  const std::string which =
      str_cat(" on the MPI communicator of MPI_Comm_split (color ", p->color, ", key ", p->key,
              ") from one of this process's CPU devices, which may be one of the groups ", groups,
              " of one program (two of this process's devices at that place: the split does not "
              "say which device asks, and jax_accl binds it to the group whose collectives its "
              "first call makes)");
  if (matching.size() != 1) {
    return error(Code::kInvalidArgument, call, which, ": the call fits ",
                 matching.empty() ? "none of them" : "more than one of them",
                 "; jax_accl refuses it rather than guess. Run the program without "
                 "JAX_ACCL_XLA_COLLECTIVES (gloo), or with one CPU device per process");
  }
  const std::vector<int64_t>& group = p->groups[matching[0]];
  std::shared_ptr<Comm> among;
  {
    std::unique_lock<std::mutex> lock;
    Registry& r = registry(&lock);
    auto it = r.comms.find(handle);
    if (it != r.comms.end() && it->second->provisional == nullptr) {  // bound meanwhile
      *comm = it->second;
      return Status::Ok();
    }
    if (r.live.count({group, p->key}) > 0) {
      return error(Code::kInvalidArgument, call, which, ": it fits ", label_of(group),
                   ", whose rank ", p->key,
                   " another of this process's devices holds already; jax_accl refuses it "
                   "rather than guess");
    }
    ++r.live[{group, p->key}];  // taken now: another provisional one fitting it fails
    among = parent_of(r, group, p->key);
  }
  std::shared_ptr<Comm> world;
  ACCL_RETURN_IF_ERROR(find_comm(MPIABI_COMM_WORLD, function, &world));
  std::shared_ptr<Comm> made;
  Status agreed = make_split(*world, group, among, p->color, p->key, &made);
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  if (!made->broken.ok() && --r.live[{group, p->key}] <= 0) r.live.erase({group, p->key});
  made->handle = handle;
  r.comms[handle] = made;
  *comm = std::move(made);
  return agreed.ok() ? Status::Ok() : (*comm)->broken;
}

Status refused_split(std::string why, int color, int key, MPIABI_Comm* out) {
  const std::string prefix = "jax_accl: ";
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  auto comm = std::make_shared<Comm>();
  int rank = 0, size = 1;
  if (!world_identity(&rank, &size).ok()) size = 1;
  comm->devices.assign(static_cast<size_t>(std::max(size, 1)), -1);
  comm->rank = std::clamp(key, 0, static_cast<int>(comm->devices.size()) - 1);
  comm->label = str_cat("MPI communicator of color ", color);
  comm->broken = error(Code::kInvalidArgument, "MPI_Comm_split (color ", color, ", key ", key,
                       ") was refused, and XLA keeps the communicator it got: ", why);
  tell_once(comm->broken);
  register_comm(std::move(comm), out);
  return Status::Ok();
}

void free_comm(MPIABI_Comm handle) {
  if (handle == MPIABI_COMM_WORLD || handle == MPIABI_COMM_SELF) return;
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  auto it = r.comms.find(handle);
  if (it == r.comms.end()) return;
  const std::pair<std::vector<int64_t>, int> held{it->second->devices, it->second->rank};
  if (it->second->broken.ok() && it->second->provisional == nullptr && --r.live[held] <= 0)
    r.live.erase(held);
  r.comms.erase(it);
}

namespace {

// A program's groups as note_groups is given them:
// [flags (1: subset, 2: not in order, 4: groups unknown, 8: each group's calls follow
// it), program size, program devices..., group count,
//  (group size, devices..., [call count, (kind, dtype, elements)...])...]
Status parse_program(const int64_t* data, int64_t size, KnownProgram* out) {
  int64_t at = 0;
  auto next = [&](int64_t* v) {
    if (at >= size) return false;
    *v = data[at++];
    return true;
  };
  KnownProgram& proto = *out;
  int64_t subset = 0, count = 0, groups = 0;
  if (!next(&subset) || !next(&count) || count < 0 || count > size) {
    return error(Code::kInvalidArgument, "note_groups: malformed header");
  }
  proto.subset = (subset & 1) != 0;
  proto.ordered = (subset & 2) == 0;
  proto.unknown = (subset & 4) != 0;
  for (int64_t i = 0, d = 0; i < count; ++i) {
    if (!next(&d)) return error(Code::kInvalidArgument, "note_groups: short program");
    proto.devices.push_back(d);
  }
  if (!next(&groups)) return error(Code::kInvalidArgument, "note_groups: no group count");
  for (int64_t g = 0; g < groups; ++g) {
    int64_t n = 0;
    if (!next(&n) || n <= 0 || n > size) {
      return error(Code::kInvalidArgument, "note_groups: malformed group");
    }
    proto.groups.emplace_back();
    for (int64_t i = 0, d = 0; i < n; ++i) {
      if (!next(&d)) return error(Code::kInvalidArgument, "note_groups: short group");
      proto.groups.back().push_back(d);
    }
    proto.calls.emplace_back();
    int64_t calls = 0;
    if ((subset & 8) != 0 && (!next(&calls) || calls < 0 || calls > size)) {
      return error(Code::kInvalidArgument, "note_groups: malformed calls");
    }
    for (int64_t c = 0; c < calls; ++c) {
      std::array<int64_t, 3> call{};
      if (!next(&call[0]) || !next(&call[1]) || !next(&call[2])) {
        return error(Code::kInvalidArgument, "note_groups: short calls");
      }
      proto.calls.back().push_back(call);
    }
  }
  return Status::Ok();
}

// The known program of the same groups, devices and kind as `proto` (r.known's end: none).
std::vector<KnownProgram>::iterator same_program(Registry& r, const KnownProgram& proto) {
  return std::find_if(r.known.begin(), r.known.end(), [&](const KnownProgram& k) {
    return k.groups == proto.groups && k.devices == proto.devices && k.subset == proto.subset &&
           k.unknown == proto.unknown;
  });
}

// Adds a loading's calls (`told`'s) to `kept`'s, each counted once per loading.
void join_calls(KnownProgram& kept, const KnownProgram& told) {
  kept.calls.resize(std::max(kept.calls.size(), told.calls.size()));
  for (size_t i = 0; i < told.calls.size(); ++i) {
    for (const std::array<int64_t, 3>& c : told.calls[i]) {
      if (kept.call_loads[{i, c}]++ == 0) kept.calls[i].push_back(c);
    }
  }
}

// Takes a forgotten loading's calls (`told`'s) from `kept`'s: those no other loading told go.
void drop_calls(KnownProgram& kept, const KnownProgram& told) {
  for (size_t i = 0; i < told.calls.size() && i < kept.calls.size(); ++i) {
    for (const std::array<int64_t, 3>& c : told.calls[i]) {
      auto count = kept.call_loads.find({i, c});
      if (count == kept.call_loads.end() || --count->second > 0) continue;
      kept.call_loads.erase(count);
      std::vector<std::array<int64_t, 3>>& calls = kept.calls[i];
      calls.erase(std::remove(calls.begin(), calls.end(), c), calls.end());
    }
  }
}

}  // namespace

Status note_groups(const int64_t* data, int64_t size) {
  KnownProgram proto;
  ACCL_RETURN_IF_ERROR(parse_program(data, size, &proto));
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  proto.seen = ++r.programs;
  auto same = same_program(r, proto);
  if (same != r.known.end()) {
    ++same->loads;
    same->seen = proto.seen;  // the same program compiled again, or one of the same groups:
    // its groups' calls join those told before (a float32 and an int32 matmul of one
    // sharding), so that a provisional communicator's first call fits either program's;
    // a call that then fits two groups is refused at binding, never guessed.
    join_calls(*same, proto);
  } else if (!proto.groups.empty() || proto.unknown) {
    KnownProgram kept = proto;
    kept.calls.clear();
    join_calls(kept, proto);
    r.known.push_back(std::move(kept));
  }
  return Status::Ok();
}

Status forget_groups(const int64_t* data, int64_t size) {
  KnownProgram proto;
  ACCL_RETURN_IF_ERROR(parse_program(data, size, &proto));
  std::unique_lock<std::mutex> lock;
  Registry& r = registry(&lock);
  auto same = same_program(r, proto);
  // None: a program of an earlier job (follow_job forgot it), or one never kept (no
  // groups): nothing to forget. Else its loading's calls go with it (those no other
  // loading of the same groups told), and the groups with the last loading.
  if (same == r.known.end()) return Status::Ok();
  if (--same->loads <= 0) {
    r.known.erase(same);
  } else {
    drop_calls(*same, proto);
  }
  return Status::Ok();
}

Status pair_of(Comm& comm, int sender, int receiver, std::shared_ptr<Comm>* out) {
  std::lock_guard<std::mutex> lock(comm.pairs_mutex);
  std::shared_ptr<Comm>& pair = comm.pairs[{sender, receiver}];
  if (pair == nullptr) {
    pair = std::make_shared<Comm>();
    pair->handle = comm.handle;
    pair->devices = {comm.devices[sender], comm.devices[receiver]};
    pair->rank = comm.rank == sender ? 0 : 1;
    pair->lane = Fnv64(comm.lane).mix(0x703270ull).mix(sender).mix(receiver).value();
    pair->label = str_cat(comm.label, " ranks ", sender, " -> ", receiver);
    pair->group = meeting_of_group(pair->devices, pair->lane);
    pair->broken = comm.broken;
  }
  *out = pair;
  return Status::Ok();
}

Status run_collective_on(Comm& comm, const char* function, Collective collective, DType dtype,
                         ReduceOp op, const void* in, void* out, uint64_t count,
                         CollectiveArgs args) {
  fault_point();  // an allocation or thread start of the call, injected by tests
  const auto start = Clock::now();
  const uint64_t call = comm.calls.fetch_add(1);
  const size_t bytes = count * dtype_size(dtype);
  Status s;
  if (!comm.broken.ok()) {
    s = error(comm.broken.code(), function, " on ", comm.label, ": ", comm.broken.message());
  } else if (comm.devices.size() == 1 && args.wire_bf16) {
    wire_kernels().round(out, in, count);  // a group of one: its input rounded, in one pass
  } else if (comm.devices.size() == 1) {
    copy_block(out, in, bytes);
  } else {
    CallGroup group = comm;
    group.label = str_cat(function, " on ", comm.label);
    group.args = args;
    CallSettings settings;
    settings.signature.op = op;
    settings.signature.collective = collective;
    settings.timeout_s = timeout_seconds();
    settings.pipeline_chunks = pipeline_chunks_setting();  // the job's, set at its start
    const CallKey key{0, static_cast<int64_t>(comm.lane), 0, call};
    s = run_call(make_call(group, key, settings, dtype, start),
                 CallBuffers{dtype, {in}, {out}, {count}, {}});
  }
  AlgorithmStats& stats = xla_collective_stats(function);
  stats.calls.fetch_add(1, std::memory_order_relaxed);
  stats.bytes.fetch_add(bytes, std::memory_order_relaxed);
  stats.nanoseconds.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
      std::memory_order_relaxed);
  if (!s.ok()) stats.errors.fetch_add(1, std::memory_order_relaxed);
  return s;
}

std::vector<int64_t> held_groups() {
  std::vector<int64_t> all{0};
  std::unique_lock<std::mutex> lock;
  const Registry& r = registry(&lock);
  for (const auto& [handle, comm] : r.comms) {
    if (!comm->broken.ok() || !comm->across_processes || comm->devices.size() < 2 ||
        handle == MPIABI_COMM_WORLD) {
      continue;
    }
    ++all[0];
    all.push_back(static_cast<int64_t>(comm->devices.size()));
    all.push_back(static_cast<int64_t>(comm->lane));
    all.insert(all.end(), comm->devices.begin(), comm->devices.end());
  }
  return all;
}

Status set_split_before_rejoin(const int64_t* data, int64_t size) {
  std::map<std::vector<int64_t>, uint64_t> groups;
  int64_t at = 1;
  for (int64_t g = 0; size > 0 && g < data[0]; ++g) {
    if (at + 2 > size || data[at] < 2 || at + 2 + data[at] > size) break;
    const int64_t n = data[at];
    groups[std::vector<int64_t>(data + at + 2, data + at + 2 + n)] =
        static_cast<uint64_t>(data[at + 1]);
    at += 2 + n;
  }
  if (size < 1 || at != size) {
    return error(Code::kInvalidArgument, "the groups split before a rejoin do not add up (", size,
                 " values)");
  }
  std::unique_lock<std::mutex> lock;
  registry(&lock).split_before_rejoin = std::move(groups);
  return Status::Ok();
}

}  // namespace accl::mpiabi

// For jax_accl/xla_subsets.py (through ctypes): the groups of a compiled program
// (note_groups' layout): 0, or -1 with the reason on stderr.
extern "C" __attribute__((visibility("default"))) int jax_accl_mpi_note_groups(const int64_t* data,
                                                                               int64_t size) {
  const accl::Status s = accl::mpiabi::note_groups(data, size);
  if (s.ok()) return 0;
  std::fprintf(stderr, "jax_accl: %s\n", s.message().c_str());
  return -1;
}

// For jax_accl/xla_subsets.py (through ctypes): a program told by note_groups (the same
// layout) that will not run: 0, or -1 with the reason on stderr.
extern "C" __attribute__((visibility("default"))) int jax_accl_mpi_forget_groups(
    const int64_t* data, int64_t size) {
  const accl::Status s = accl::mpiabi::forget_groups(data, size);
  if (s.ok()) return 0;
  std::fprintf(stderr, "jax_accl: %s\n", s.message().c_str());
  return -1;
}

// For jax_accl/xla_subsets.py (through ctypes), a rejoin's two ends (held_groups' layout):
// the groups of the communicators XLA holds here, one snapshot taken under the
// registry's lock, into `out` only if it fits in `capacity` values (XLA's threads may
// split between a caller's two calls: a part of a later snapshot would not parse);
// returns how many values it takes either way. And those the processes that stayed split
// before this process joined them (0, or -1 with the reason on stderr).
extern "C" __attribute__((visibility("default"))) int64_t
jax_accl_mpi_held_groups(int64_t* out, int64_t capacity) {
  const std::vector<int64_t> all = accl::mpiabi::held_groups();
  if (out != nullptr && static_cast<int64_t>(all.size()) <= capacity) {
    std::copy(all.begin(), all.end(), out);
  }
  return static_cast<int64_t>(all.size());
}

extern "C" __attribute__((visibility("default"))) int jax_accl_mpi_split_before_rejoin(
    const int64_t* data, int64_t size) {
  const accl::Status s = accl::mpiabi::set_split_before_rejoin(data, size);
  if (s.ok()) return 0;
  std::fprintf(stderr, "jax_accl: %s\n", s.message().c_str());
  return -1;
}
