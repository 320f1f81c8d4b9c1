// The MPI ABI layer (xla_ffi/mpiabi/) in the native self-test, called as XLA calls it,
// since the Python tests reach it only through jaxlib's dlopen (RTLD_DEEPBIND, which
// ASan refuses). Two forked processes, each with its World on loopback (different
// hosts: TCP), run XLA's sequence: Init_thread, Comm_rank/size on MPI_COMM_WORLD,
// Comm_split (keys reversed, and a color MPI_UNDEFINED), Allreduce, Allgather,
// Reduce_scatter, Sendrecv, Isend/Irecv/Wait, the errors of bad arguments and of a
// function XLA never calls, Comm_free, then splits that fail (failed_splits). In-process:
// MPI_COMM_SELF. Process 1 sets its process table late, so process 0 connects to a peer
// that does not know it yet.
#include "selftest/mpiabi_selftest.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "mpiabi/abi.h"
#include "runtime/world.h"
#include "selftest/checks.h"

extern "C" {
int MPIABI_Init_thread(int*, char***, int, int*);
int MPIABI_Comm_rank(MPIABI_Comm, int*);
int MPIABI_Comm_size(MPIABI_Comm, int*);
int MPIABI_Comm_split(MPIABI_Comm, int, int, MPIABI_Comm*);
int MPIABI_Comm_free(MPIABI_Comm*);
int MPIABI_Allreduce(const void*, void*, int, MPIABI_Datatype, MPIABI_Op, MPIABI_Comm);
int MPIABI_Allgather(const void*, int, MPIABI_Datatype, void*, int, MPIABI_Datatype, MPIABI_Comm);
int MPIABI_Reduce_scatter(const void*, void*, const int*, MPIABI_Datatype, MPIABI_Op, MPIABI_Comm);
int MPIABI_Sendrecv(const void*, int, MPIABI_Datatype, int, int, void*, int, MPIABI_Datatype, int,
                    int, MPIABI_Comm, MPIABI_Status*);
int MPIABI_Isend(const void*, int, MPIABI_Datatype, int, int, MPIABI_Comm, MPIABI_Request*);
int MPIABI_Irecv(void*, int, MPIABI_Datatype, int, int, MPIABI_Comm, MPIABI_Request*);
int MPIABI_Wait(MPIABI_Request*, MPIABI_Status*);
int MPIABI_Error_string(int, char*, int*);
int MPIABI_Barrier(MPIABI_Comm);
}

namespace accl {
namespace {

std::string message(int code) {
  char text[mpiabi::kMaxErrorString];
  int length = 0;
  MPIABI_Error_string(code, text, &length);
  return std::string(text, length);
}

MPIABI_Status* ignore() { return static_cast<MPIABI_Status*>(MPIABI_STATUS_IGNORE); }

void on_comm_self(Checks& c) {
  std::vector<double> x = {1, 2, 3}, y(3);
  c.expect(
      MPIABI_Allreduce(x.data(), y.data(), 3, MPIABI_DOUBLE, MPIABI_SUM, MPIABI_COMM_SELF) == 0 &&
          y == x,
      "MPI_COMM_SELF all-reduce copies");
  MPIABI_Comm split = 0;
  c.expect(MPIABI_Comm_split(MPIABI_COMM_SELF, 3, 0, &split) == 0, "split MPI_COMM_SELF");
  int size = 0;
  c.expect(MPIABI_Comm_size(split, &size) == 0 && size == 1, "its split has one rank");
  const int unsupported = MPIABI_Barrier(split);
  c.expect(unsupported != 0 &&
               message(unsupported).find("MPI_Barrier is not implemented") != std::string::npos,
           "MPI_Barrier fails naming itself: " + message(unsupported));
  const int bad = MPIABI_Allreduce(x.data(), y.data(), 3, MPIABI_LONG_DOUBLE, MPIABI_SUM, split);
  c.expect(bad != 0 && message(bad).find("datatype") != std::string::npos,
           "a datatype jax_accl does not reduce: " + message(bad));
  MPIABI_Comm_free(&split);
  c.expect(split == MPIABI_COMM_NULL, "freed");
  const int gone = MPIABI_Allreduce(x.data(), y.data(), 3, MPIABI_DOUBLE, MPIABI_SUM, split);
  c.expect(gone != 0 && message(gone).find("MPI_COMM_NULL") != std::string::npos,
           "MPI_COMM_NULL is an error: " + message(gone));
}

// One process of the pair: rank `me` of 2, its World started by the caller.
void as_xla_does(Checks& c, int me) {
  int provided = -1, rank = -1, size = -1;
  MPIABI_Init_thread(nullptr, nullptr, MPIABI_THREAD_FUNNELED, &provided);
  c.expect(provided >= MPIABI_THREAD_FUNNELED, "Init_thread provides FUNNELED");
  c.expect(MPIABI_Comm_rank(MPIABI_COMM_WORLD, &rank) == 0 && rank == me, "world rank");
  c.expect(MPIABI_Comm_size(MPIABI_COMM_WORLD, &size) == 0 && size == 2, "world size");
  MPIABI_Comm comm = 0, none = 0;
  const int split = MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, 1 - me, &comm);  // keys reversed
  c.expect(split == 0, "split: " + message(split));
  c.expect(MPIABI_Comm_rank(comm, &rank) == 0 && rank == 1 - me, "the split ranks by key");
  c.expect(MPIABI_Comm_split(MPIABI_COMM_WORLD, me == 0 ? 5 : MPIABI_UNDEFINED, 0, &none) == 0 &&
               (me == 0) == (none != MPIABI_COMM_NULL),
           "MPI_UNDEFINED gets MPI_COMM_NULL");
  const int r = 1 - me;  // this process's rank in `comm`
  std::vector<int32_t> x(1001), y(1001);
  std::iota(x.begin(), x.end(), 10 * me);
  int rc = MPIABI_Allreduce(x.data(), y.data(), 1001, MPIABI_INT32_T, MPIABI_SUM, comm);
  c.expect(rc == 0 && y[0] == 10 && y[1000] == 2010, "all-reduce: " + message(rc));
  std::vector<int64_t> block = {r, -r}, all(4);
  rc = MPIABI_Allgather(block.data(), 2, MPIABI_INT64_T, all.data(), 2, MPIABI_INT64_T, comm);
  c.expect(rc == 0 && all == std::vector<int64_t>{0, 0, 1, -1}, "all-gather: " + message(rc));
  std::vector<float> in = {1.f + r, 2.f, 3.f, 4.f * r}, out(2);
  const int counts[2] = {2, 2};
  rc = MPIABI_Reduce_scatter(in.data(), out.data(), counts, MPIABI_FLOAT, MPIABI_MAX, comm);
  c.expect(rc == 0 && out == (r == 0 ? std::vector<float>{2, 2} : std::vector<float>{3, 4}),
           "reduce-scatter: " + message(rc));
  std::vector<uint8_t> mine(300, uint8_t(r + 1)), theirs(300);
  rc = MPIABI_Sendrecv(mine.data(), 300, MPIABI_BYTE, 1 - r, 0, theirs.data(), 300, MPIABI_BYTE,
                       1 - r, 0, comm, ignore());
  c.expect(rc == 0 && theirs[299] == uint8_t(2 - r), "sendrecv: " + message(rc));
  MPIABI_Request requests[2];
  std::vector<double> send(77, 1.5 + r), recv(77);
  MPIABI_Irecv(recv.data(), 77, MPIABI_DOUBLE, 1 - r, 0, comm, &requests[0]);
  MPIABI_Isend(send.data(), 77, MPIABI_DOUBLE, 1 - r, 0, comm, &requests[1]);
  MPIABI_Status status;
  rc = MPIABI_Wait(&requests[0], &status);
  const int rc2 = MPIABI_Wait(&requests[1], ignore());
  c.expect(rc == 0 && rc2 == 0 && recv[76] == 2.5 - r && status.MPI_SOURCE == 1 - r &&
               requests[0] == MPIABI_REQUEST_NULL,
           "Isend/Irecv/Wait: " + message(rc));
  // A mismatch (the ranks give different counts) fails on both, naming the call.
  rc = MPIABI_Allreduce(x.data(), y.data(), 100 + r, MPIABI_INT32_T, MPIABI_SUM, comm);
  c.expect(rc != 0 && message(rc).find("MPI_Allreduce on MPI communicator") != std::string::npos,
           "mismatched counts fail: " + message(rc));
  MPIABI_Comm_free(&comm);
  if (none != MPIABI_COMM_NULL) MPIABI_Comm_free(&none);
}

// Splits that fail (XLA ignores a split's error and keeps the communicator it got): the
// split returns an error, the communicator is not MPI_COMM_NULL, and every later call on
// it fails with a message (MPI_Error_string's, which XLA shows) that gives the split's
// reason and says to restart the job. Two ways, each on a parent of its own, made first:
//   mismatched participation: process 0 splits while process 1 makes an all-reduce as
//     the parent's next call (both fail at once);
//   a peer that never comes: process 0 alone splits, with a 1 s collective timeout.
// Process 1 stays up (it waits for process 0's byte on `done_read`) until process 0 is
// through, so process 0's split fails on its deadline, not on a peer that left.
void failed_splits(Checks& c, int me, int done_write, int done_read) {
  MPIABI_Comm mismatched = 0, unattended = 0;
  c.expect(MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, me, &mismatched) == 0 &&
               MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, me, &unattended) == 0,
           "two parents for the failing splits");
  std::vector<int64_t> x = {1, 2}, y(2);
  if (me == 1) {
    const int rc = MPIABI_Allreduce(x.data(), y.data(), 2, MPIABI_INT64_T, MPIABI_SUM, mismatched);
    c.expect(rc != 0 && message(rc).find("MPI_Allreduce on") != std::string::npos,
             "an all-reduce met by a split fails: " + message(rc));
    pollfd done{done_read, POLLIN, 0};
    char byte = 0;
    c.expect(poll(&done, 1, 30000) == 1 && read(done_read, &byte, 1) == 1,
             "process 0 got through its failing splits");
    return;
  }
  auto expect_broken = [&](MPIABI_Comm parent, const char* how, const char* reason) {
    MPIABI_Comm broken = MPIABI_COMM_NULL;
    const auto start = std::chrono::steady_clock::now();
    const int rc = MPIABI_Comm_split(parent, 7, 0, &broken);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    c.expect(rc != 0 && message(rc).find("MPI_Comm_split on") != std::string::npos &&
                 message(rc).find(reason) != std::string::npos,
             str_cat(how, ": the split fails (", took, " s): ", message(rc)));
    c.expect(took < 10, str_cat(how, ": the split fails within its deadline, not ", took, " s"));
    c.expect(broken != MPIABI_COMM_NULL, str_cat(how, ": XLA gets a communicator all the same"));
    for (int i = 0; i < 2; ++i) {  // every later call, not only the first
      const int later = MPIABI_Allreduce(x.data(), y.data(), 2, MPIABI_INT64_T, MPIABI_SUM, broken);
      const std::string text = message(later);
      c.expect(later != 0 && text.rfind("jax_accl: MPI_Allreduce on ", 0) == 0 &&
                   text.find("restart the job") != std::string::npos &&
                   text.find("The split: MPI_Comm_split on") != std::string::npos &&
                   text.find(reason) != std::string::npos,
               str_cat(how,
                       ": a later call on the broken communicator fails with the "
                       "split's reason: ",
                       text));
    }
    MPIABI_Comm_free(&broken);
  };
  expect_broken(mismatched, "mismatched participation",
                "MPI_Comm_split on MPI communicator [0 2048]");
  World::announce_job(World::Job{0, 2, 1.0});  // the collective timeout: 1 s
  expect_broken(unattended, "a peer that never comes", "timed out");
  World::announce_job(World::Job{0, 2, 20.0});
  const char byte = 1;
  c.expect(write(done_write, &byte, 1) == 1, "tell process 1");
}

// Starts this process's World as process `me` of 2 (host h<me>, loopback), the ports
// traded over the pipes.
bool start_world(int me, int write_fd, int read_fd) {
  std::vector<Rail> rails = {Rail{"lo", "127.0.0.1", 0, 1.0}};
  const std::string secret(32, 's');
  if (!World::start(me, 2, secret, str_cat("h", me), &rails, 1, false).ok()) return false;
  uint16_t port = rails[0].port, peer = 0;
  if (write(write_fd, &port, sizeof(port)) != sizeof(port)) return false;
  pollfd ready{read_fd, POLLIN, 0};  // the peer's port, or give up (it failed to start)
  if (poll(&ready, 1, 20000) != 1 || read(read_fd, &peer, sizeof(peer)) != sizeof(peer)) {
    return false;
  }
  std::vector<ProcessEntry> table(2);
  for (int p = 0; p < 2; ++p) {
    table[p].index = p;
    table[p].host = str_cat("h", p);
    table[p].rails = {Rail{"lo", "127.0.0.1", p == me ? port : peer, 1.0}};
    table[p].devices = {int64_t{p} * 2048};
  }
  World::announce_job(World::Job{me, 2, 20.0});
  // Process 1 takes its table late, as a slow peer of a real job may: process 0's first
  // connections reach it before it knows where devices live, and must be retried.
  if (me == 1) usleep(400000);
  return World::get()->set_processes(std::move(table)).ok();
}

}  // namespace

void run_mpiabi_selftest(int* checks, int* failures) {
  Checks self;
  self.who = "mpiabi, MPI_COMM_SELF";
  on_comm_self(self);
  int to_child[2], to_parent[2];
  Checks parent;
  parent.who = "mpiabi, process 0";
  parent.expect(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipes");
  const pid_t child = fork();
  if (child == 0) {
    Checks c;
    c.who = "mpiabi, process 1";
    c.expect(start_world(1, to_parent[1], to_child[0]), "process 1 starts its World");
    as_xla_does(c, 1);
    failed_splits(c, 1, -1, to_child[0]);
    World::stop(5.0);
    _exit(c.failures == 0 ? 0 : 1);
  }
  parent.expect(start_world(0, to_child[1], to_parent[0]), "process 0 starts its World");
  as_xla_does(parent, 0);
  failed_splits(parent, 0, to_child[1], -1);
  World::stop(5.0);
  int wstatus = 0;
  for (int waited_ms = 0; waitpid(child, &wstatus, WNOHANG) == 0; waited_ms += 10) {
    if (waited_ms > 60000) {  // a child stuck past every deadline of its own
      kill(child, SIGKILL);
      waitpid(child, &wstatus, 0);
      break;
    }
    usleep(10000);
  }
  parent.expect(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
                "process 1 passed its checks (its failures are printed above)");
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
  *checks += self.checks + parent.checks;
  *failures += self.failures + parent.failures;
}

}  // namespace accl
