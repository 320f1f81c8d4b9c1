#include "mpiabi/point_to_point.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "mpiabi/communicators.h"

namespace accl::mpiabi {
namespace {

struct Request {
  MPIABI_Comm comm = 0;
  bool send = false;
  const void* in = nullptr;
  void* out = nullptr;
  uint64_t bytes = 0;
  int peer = -1;
  bool claimed = false;  // a wait runs its step
  bool done = false;
  Status status;
};

struct Requests {
  std::mutex mutex;
  std::condition_variable finished;
  std::map<MPIABI_Request, std::shared_ptr<Request>> posted;
  MPIABI_Request next_handle = kFirstDynamicHandle;
};

Requests& requests() {
  static auto* r = new Requests;  // never destroyed
  return *r;
}

// One permutation step of the requests `step` (at most one send and one receive of one
// size, all on `comm`).
Status run_step(Comm& comm, const std::vector<std::shared_ptr<Request>>& step) {
  const Request *send = nullptr, *recv = nullptr;
  for (const auto& r : step) {
    const Request*& slot = r->send ? send : recv;
    if (slot != nullptr) {
      return error(Code::kInvalidArgument, comm.label, ": rank ", comm.rank, " posted two ",
                   r->send ? "sends" : "receives",
                   " before waiting; jax_accl runs one send and one receive per step "
                   "(a collective-permute)");
    }
    slot = r.get();
  }
  if (send != nullptr && recv != nullptr && send->bytes != recv->bytes) {
    return error(Code::kInvalidArgument, comm.label, ": rank ", comm.rank, " sends ", send->bytes,
                 " bytes and receives ", recv->bytes,
                 "; jax_accl's permutation moves blocks of one size");
  }
  const uint64_t bytes = send ? send->bytes : recv->bytes;
  std::vector<unsigned char> scratch(recv ? 0 : bytes);  // a send's unused result
  const PermutePeers peers{send ? send->peer : -1, recv ? recv->peer : -1};
  void* out = recv ? recv->out : scratch.data();
  const void* in = send ? send->in : out;
  return run_collective_on(comm, "MPI_Isend/MPI_Irecv", Collective::kPermute, DType::kU8,
                           ReduceOp::kSum, in, out, bytes, peers);
}

}  // namespace

Status post(MPIABI_Comm comm, bool send, const void* in, void* out, uint64_t bytes, int peer,
            MPIABI_Request* request) {
  std::shared_ptr<Comm> c;
  ACCL_RETURN_IF_ERROR(find_comm(comm, send ? "MPI_Isend" : "MPI_Irecv", &c));
  if (peer != MPIABI_PROC_NULL && (peer < 0 || peer >= static_cast<int>(c->devices.size()))) {
    return error(Code::kInvalidArgument, send ? "MPI_Isend" : "MPI_Irecv", " on ", c->label,
                 ": rank ", peer, " is outside the communicator");
  }
  auto r = std::make_shared<Request>();
  r->comm = comm;
  r->send = send;
  r->in = in;
  r->out = out;
  r->bytes = bytes;
  r->peer = peer == MPIABI_PROC_NULL ? -1 : peer;
  Requests& all = requests();
  std::lock_guard<std::mutex> lock(all.mutex);
  *request = all.next_handle++;
  all.posted[*request] = std::move(r);
  return Status::Ok();
}

Status wait(MPIABI_Request* request, MPIABI_Status* status) {
  if (*request == MPIABI_REQUEST_NULL) return Status::Ok();
  Requests& all = requests();
  std::shared_ptr<Request> mine;
  std::vector<std::shared_ptr<Request>> step;
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    auto it = all.posted.find(*request);
    if (it == all.posted.end()) {
      return error(Code::kInvalidArgument, "MPI_Wait: an unknown request (handle ", *request, ")");
    }
    mine = it->second;
    if (!mine->claimed) {  // this wait runs the step of every request posted on the comm
      for (auto& [handle, r] : all.posted) {
        if (r->comm == mine->comm && !r->claimed) {
          r->claimed = true;
          step.push_back(r);
        }
      }
    }
  }
  if (!step.empty()) {
    std::shared_ptr<Comm> comm;
    Status s = find_comm(mine->comm, "MPI_Wait", &comm);
    if (s.ok()) s = run_step(*comm, step);
    std::lock_guard<std::mutex> lock(all.mutex);
    for (auto& r : step) {
      r->status = s;
      r->done = true;
    }
    all.finished.notify_all();
  }
  std::unique_lock<std::mutex> lock(all.mutex);
  // Another wait runs this request's step, within the collective timeout.
  const auto limit = std::chrono::duration<double>(timeout_seconds() + 10.0);
  if (!all.finished.wait_for(lock, limit, [&] { return mine->done; })) {
    return error(Code::kTimeout, "MPI_Wait: the step of this request did not end within ",
                 timeout_seconds() + 10.0, " s");
  }
  all.posted.erase(*request);
  *request = MPIABI_REQUEST_NULL;
  if (status != nullptr && static_cast<void*>(status) != MPIABI_STATUS_IGNORE) {
    status->MPI_SOURCE = mine->send ? MPIABI_PROC_NULL : mine->peer;
    status->MPI_TAG = 0;
    status->MPI_ERROR = MPIABI_SUCCESS;
  }
  return mine->status;
}

}  // namespace accl::mpiabi
