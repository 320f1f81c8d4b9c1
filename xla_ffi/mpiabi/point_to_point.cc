#include "mpiabi/point_to_point.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/faults.h"
#include "mpiabi/communicators.h"
#include "mpiabi/errors.h"

namespace accl::mpiabi {
namespace {

struct Request {
  MPIABI_Comm comm = 0;
  std::thread::id poster;  // a wait runs the requests its own thread posted
  bool send = false;
  const void* in = nullptr;
  void* out = nullptr;
  uint64_t bytes = 0;
  int peer = -1;
  bool claimed = false;  // a wait runs it
  uint64_t step = 0;     // which wait's step (claimed ones)
  bool done = false;
  Status status;
};

struct Requests {
  std::mutex mutex;
  std::condition_variable finished;
  std::map<MPIABI_Request, std::shared_ptr<Request>> posted;
  MPIABI_Request next_handle = kFirstDynamicHandle;
  uint64_t next_step = 1;
};

Requests& requests() {
  static auto* r = new Requests;  // never destroyed
  return *r;
}

// One message of `r` over its pair's communicator (pair_of): the sender is rank 0, the
// receiver rank 1, and both count the pair's calls alike, whatever else either does.
Status run_message(Comm& comm, const Request& r) {
  if (r.peer < 0) return Status::Ok();  // MPI_PROC_NULL
  const int sender = r.send ? comm.rank : r.peer, receiver = r.send ? r.peer : comm.rank;
  std::shared_ptr<Comm> pair;
  ACCL_RETURN_IF_ERROR(pair_of(comm, sender, receiver, &pair));
  std::vector<unsigned char> scratch(r.send ? r.bytes : 0);  // a sender's unused result
  void* out = r.send ? scratch.data() : r.out;
  const void* in = r.send ? r.in : r.out;
  return run_collective_on(*pair, r.send ? "MPI_Isend" : "MPI_Irecv", Collective::kPermute,
                           DType::kU8, ReduceOp::kSum, in, out, r.bytes,
                           r.send ? CollectiveArgs{1, -1} : CollectiveArgs{-1, 0});
}

// The messages of `step` at once (one thread each but the last): a rank that sends to
// one peer and receives from another waits for neither first, so a ring of ranks
// cannot deadlock.
// A message a rank sends itself is a copy, matched with a receive of its own.
std::vector<Status> run_step(Comm& comm, const std::vector<std::shared_ptr<Request>>& step) {
  std::vector<Status> status(step.size());
  std::vector<bool> copied(step.size(), false);
  std::vector<size_t> messages;
  for (size_t i = 0; i < step.size(); ++i) {
    const Request& r = *step[i];
    if (r.peer != comm.rank) {
      messages.push_back(i);
      continue;
    }
    for (size_t j = i + 1; j < step.size() && !copied[i]; ++j) {
      const Request& other = *step[j];
      if (!copied[j] && other.peer == comm.rank && other.send != r.send && other.bytes == r.bytes) {
        const Request& send = r.send ? r : other;
        const Request& recv = r.send ? other : r;
        if (recv.bytes > 0) std::memmove(recv.out, send.in, recv.bytes);
        copied[i] = copied[j] = true;
      }
    }
    if (!copied[i]) {
      status[i] = error(Code::kInvalidArgument, comm.label, ": rank ", comm.rank,
                        " posted a message to itself with no matching one from itself");
    }
  }
  // Nothing escapes a message's thread (std::terminate): an exception is its error.
  auto message = [&](size_t i) {
    status[i] = guarded("MPI_Wait", [&] { return run_message(comm, *step[i]); });
  };
  // A thread that cannot start fails its message and those not yet begun (running them
  // one after the other here instead could deadlock a ring of ranks); the started ones
  // end and are joined.
  Status started;
  std::vector<std::thread> threads;
  for (size_t k = 0; k < messages.size(); ++k) {
    const size_t i = messages[k];
    if (!started.ok()) {
      status[i] = started;
    } else if (k + 1 == messages.size()) {
      message(i);  // the last on this thread
    } else {
      started = guarded("MPI_Wait", [&] {
        fault_point();  // a thread start, injected by tests (common/faults.h)
        threads.emplace_back(message, i);
        return Status::Ok();
      });
      if (!started.ok()) status[i] = started;
    }
  }
  for (std::thread& t : threads) t.join();
  return status;
}

// Erases the posted requests `drop` selects (under the lock, which it takes).
template <typename Select>
void erase_posted(Select drop) noexcept {
  Requests& all = requests();
  guarded("MPI request cleanup", [&] {
    std::lock_guard<std::mutex> lock(all.mutex);
    for (auto it = all.posted.begin(); it != all.posted.end();) {
      it = drop(*it->second) ? all.posted.erase(it) : std::next(it);
    }
    return Status::Ok();
  });
}

}  // namespace

void drop_unclaimed() noexcept {
  const std::thread::id me = std::this_thread::get_id();
  erase_posted([&](const Request& r) { return r.poster == me && !r.claimed; });
}

void release_step(MPIABI_Request* request) noexcept {
  if (*request == MPIABI_REQUEST_NULL) return;
  std::shared_ptr<Request> mine;
  guarded("MPI_Wait", [&] {
    Requests& all = requests();
    std::lock_guard<std::mutex> lock(all.mutex);
    if (auto it = all.posted.find(*request); it != all.posted.end()) mine = it->second;
    return Status::Ok();
  });
  if (mine == nullptr) return;  // unknown, or already released
  // Its step's requests, or (a wait that failed before claiming) those it would claim.
  erase_posted([&](const Request& r) {
    return r.comm == mine->comm && r.poster == mine->poster &&
           (mine->claimed ? r.claimed && r.step == mine->step : !r.claimed);
  });
  *request = MPIABI_REQUEST_NULL;
}

Status post(MPIABI_Comm comm, bool send, const void* in, void* out, uint64_t bytes, int peer,
            MPIABI_Request* request) {
  Requests& all = requests();
  std::shared_ptr<Comm> c;
  Status found = find_comm(comm, send ? "MPI_Isend" : "MPI_Irecv", &c);
  if (found.ok() && peer != MPIABI_PROC_NULL &&
      (peer < 0 || peer >= static_cast<int>(c->devices.size()))) {
    found = error(Code::kInvalidArgument, send ? "MPI_Isend" : "MPI_Irecv", " on ", c->label,
                  ": rank ", peer, " is outside the communicator");
  }
  ACCL_RETURN_IF_ERROR(found);
  fault_point();  // the request's allocation, injected by tests (common/faults.h)
  auto r = std::make_shared<Request>();
  r->comm = comm;
  r->poster = std::this_thread::get_id();
  r->send = send;
  r->in = in;
  r->out = out;
  r->bytes = bytes;
  r->peer = peer == MPIABI_PROC_NULL ? -1 : peer;
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
  fault_point();  // the step's allocation, injected by tests (common/faults.h)
  {
    std::lock_guard<std::mutex> lock(all.mutex);
    auto it = all.posted.find(*request);
    if (it == all.posted.end()) {
      return error(Code::kInvalidArgument, "MPI_Wait: an unknown request (handle ", *request, ")");
    }
    mine = it->second;
    if (!mine->claimed) {  // this wait runs what its thread posted on the communicator
      const uint64_t id = all.next_step++;
      for (auto& [handle, r] : all.posted) {
        if (r->comm == mine->comm && r->poster == mine->poster && !r->claimed) {
          r->claimed = true;
          r->step = id;
          step.push_back(r);
        }
      }
    }
  }
  if (!step.empty()) {
    std::shared_ptr<Comm> comm;
    Status found = find_comm(mine->comm, "MPI_Wait", &comm);
    const std::vector<Status> done =
        found.ok() ? run_step(*comm, step) : std::vector<Status>(step.size(), found);
    std::lock_guard<std::mutex> lock(all.mutex);
    for (size_t i = 0; i < step.size(); ++i) {
      step[i]->status = done[i];
      step[i]->done = true;
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
  if (status != nullptr && static_cast<void*>(status) != MPIABI_STATUS_IGNORE) {
    status->MPI_SOURCE = mine->send ? MPIABI_PROC_NULL : mine->peer;
    status->MPI_TAG = 0;
    status->MPI_ERROR = mine->status.ok() ? MPIABI_SUCCESS : MPIABI_ERR_OTHER;
  }
  // A failed one stays posted until MPI_Wait's cleanup releases its whole step with it.
  if (!mine->status.ok()) return mine->status;
  all.posted.erase(*request);
  *request = MPIABI_REQUEST_NULL;
  return Status::Ok();
}

}  // namespace accl::mpiabi
