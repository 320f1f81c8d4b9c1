#include "mpiabi/communicators.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "common/faults.h"
#include "common/hash.h"
#include "runtime/call_plan.h"
#include "runtime/collective_call.h"
#include "runtime/stats.h"
#include "runtime/world.h"

namespace accl::mpiabi {
namespace {

// The lane of MPI_COMM_WORLD ("mpi"); a split's lane mixes its parent's, the split's
// index and the color, the same in every process.
constexpr uint64_t kWorldLane = 0x6d7069ull << 40;

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, std::shared_ptr<Comm>> comms;
  uintptr_t next_handle = kFirstDynamicHandle;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: XLA frees communicators at exit
  return *r;
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

// MPI_COMM_WORLD: every process's one CPU device, in process order.
Status make_world(std::shared_ptr<Comm>* out) {
  const std::shared_ptr<World> world = World::get();
  if (world == nullptr || !world->ready()) {
    return error(Code::kInvalidArgument, "MPI_COMM_WORLD: ", not_set_up());
  }
  auto comm = std::make_shared<Comm>();
  comm->handle = MPIABI_COMM_WORLD;
  comm->lane = kWorldLane;
  comm->rank = world->process_index();
  for (int p = 0; p < world->process_count(); ++p) {
    const std::vector<int64_t>& devices = world->process(p).devices;
    if (devices.size() != 1) {
      return error(Code::kInvalidArgument, "MPI_COMM_WORLD: process ", p, " has ", devices.size(),
                   " CPU devices; XLA:CPU's MPI collectives run one device per process (drop "
                   "--xla_force_host_platform_device_count / jax_num_cpu_devices)");
    }
    comm->devices.push_back(devices[0]);
  }
  comm->label = label_of(comm->devices);
  *out = std::move(comm);
  return Status::Ok();
}

// `comm` registered under a new handle, which *out receives.
void register_comm(std::shared_ptr<Comm> comm, MPIABI_Comm* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  comm->handle = r.next_handle++;
  *out = comm->handle;
  r.comms[comm->handle] = std::move(comm);
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
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
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

Status split(Comm& parent, int color, int key, MPIABI_Comm* out) {
  *out = MPIABI_COMM_NULL;
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
  } else {
    comm->devices = parent.devices;
    comm->label = str_cat("MPI communicator of color ", color, " split from ", parent.label);
    comm->broken =
        error(agreed.code(), "splitting ", parent.label, " (color ", color, ", key ", key,
              ") failed, and XLA keeps the communicator it got: restart the "
              "job. The split: ",
              agreed.message());
    tell_once(comm->broken);
  }
  register_comm(std::move(comm), out);
  return agreed;
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
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.comms.erase(handle);
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
    pair->broken = comm.broken;
  }
  *out = pair;
  return Status::Ok();
}

Status run_collective_on(Comm& comm, const char* function, Collective collective, DType dtype,
                         ReduceOp op, const void* in, void* out, uint64_t count,
                         PermutePeers peers) {
  fault_point();  // an allocation or thread start of the call, injected by tests
  const auto start = Clock::now();
  const uint64_t call = comm.calls.fetch_add(1);
  const size_t bytes = count * dtype_size(dtype);
  Status s;
  if (!comm.broken.ok()) {
    s = error(comm.broken.code(), function, " on ", comm.label, ": ", comm.broken.message());
  } else if (comm.devices.size() == 1) {
    copy_block(out, in, bytes);
  } else {
    CallGroup group = comm;
    group.label = str_cat(function, " on ", comm.label);
    group.peers = peers;
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

}  // namespace accl::mpiabi
