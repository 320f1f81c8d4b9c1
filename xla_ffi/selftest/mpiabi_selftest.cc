// The MPI ABI layer (xla_ffi/mpiabi/) in the native self-test, called as XLA calls it,
// since the Python tests reach it only through jaxlib's dlopen (RTLD_DEEPBIND, which
// ASan refuses). Two forked processes, each with its World on loopback (different
// hosts: TCP), run XLA's sequence: Init_thread, Comm_rank/size on MPI_COMM_WORLD,
// Comm_split (keys reversed, and a color MPI_UNDEFINED), Allreduce, Allgather,
// Reduce_scatter, Sendrecv, Isend/Irecv/Wait, the errors of bad arguments and of a
// function XLA never calls, Comm_free, then splits that fail (failed_splits), splits of
// the groups read from compiled programs (known_groups; then, in a World of one process
// of 4 devices, a provisional communicator bound by its first call: provisional_binding), and what
// must be an error rather than an abort (calls_that_must_not_abort): a negative count, a
// failed allocation, a thread that cannot start, a process marked unusable. In-process:
// MPI_COMM_SELF. Process 1 sets its process table late, so process 0 connects to a peer
// that does not know it yet.
#include "selftest/mpiabi_selftest.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/faults.h"
#include "common/health.h"
#include "mpiabi/abi.h"
#include "mpiabi/communicators.h"
#include "reduce/wire.h"
#include "runtime/stats.h"
#include "runtime/world.h"
#include "selftest/checks.h"

// selftest.cc's allocation failures on demand: this thread's k+1-th allocation throws.
extern thread_local int64_t t_allocations_left;

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
  // bfloat16 on the wire (JAX_ACCL_WIRE_DTYPE=bfloat16): a group of one returns its
  // float32 sum operand rounded to bfloat16 (1 + 2^-9 is a tie, to even: 1; 1 + 3 * 2^-9
  // rounds up to 1 + 2^-7), as every rank of a larger group would.
  std::vector<float> f = {1.0f + 0x1p-9f, 1.0f + 3 * 0x1p-9f, 2.0f}, g(3);
  xla_wire_bf16_setting() = true;
  const int rounded =
      MPIABI_Allreduce(f.data(), g.data(), 3, MPIABI_FLOAT, MPIABI_SUM, MPIABI_COMM_SELF);
  xla_wire_bf16_setting() = false;
  c.expect(rounded == 0 && g == std::vector<float>{1.0f, 1.0f + 0x1p-7f, 2.0f},
           "MPI_COMM_SELF float32 sum as bfloat16 on the wire: its operand rounded");
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

void calls_that_must_not_abort(Checks& c, MPIABI_Comm comm, int r);

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
  calls_that_must_not_abort(c, comm, r);
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
  auto expect_broken = [&](MPIABI_Comm parent, const char* how, const char* reason, bool waits) {
    MPIABI_Comm broken = MPIABI_COMM_NULL;
    const auto start = std::chrono::steady_clock::now();
    // The split is counted in flight while it waits (jax_accl.recover() waits for it).
    int64_t in_flight = 0;
    std::thread sampler([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      in_flight = calls_in_flight();
    });
    const int rc = MPIABI_Comm_split(parent, 7, 0, &broken);
    sampler.join();
    c.expect((!waits || in_flight == 1) && calls_in_flight() == 0,
             str_cat(how, ": the split counted in flight while it ran (", in_flight,
                     "), not after (", calls_in_flight(), ")"));
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
                "MPI_Comm_split on MPI communicator [0 2048]", /*waits=*/false);
  World::announce_job(World::Job{0, 2, 1.0});  // the collective timeout: 1 s
  expect_broken(unattended, "a peer that never comes", "timed out", /*waits=*/true);
  World::announce_job(World::Job{0, 2, 20.0});
  const char byte = 1;
  c.expect(write(done_write, &byte, 1) == 1, "tell process 1");
}

// Splits of the groups jax_accl read from compiled programs (mpiabi::note_groups, as
// jax_accl/xla_subsets.py gives them): each among its group's processes only. A group
// of one process's device (a program whose group is {0}): process 0 makes it alone, at
// once, where an agreement of MPI_COMM_WORLD would wait for process 1 until its
// deadline. Then a group of both, in the order XLA ranks it ([2048 0]: process 0 is
// rank 1; its program compiled twice), and an all-reduce on it; then two groups of one
// program that both fit process 1's split, made in the program's order, the first also
// an earlier program's (the same devices: no ambiguity). Then, each process's split
// fitting two programs' groups of different processes, neither made (programs compiled
// before either ran): refused at once in each, naming both groups, never made among one.
void known_groups(Checks& c, int me) {
  const int64_t mine = int64_t{me} * 2048;
  const std::vector<int64_t> alone = {0, 2, 0, 2048, 1, 1, 0};
  const std::vector<int64_t> both = {0, 2, 2048, 0, 1, 2, 2048, 0};
  c.expect(mpiabi::note_groups(alone.data(), alone.size()).ok() &&
               mpiabi::note_groups(both.data(), both.size()).ok() &&
               mpiabi::note_groups(both.data(), both.size()).ok() &&
               !mpiabi::note_groups(both.data(), 5).ok(),
           "note_groups takes the programs' groups and refuses a short one");
  MPIABI_Comm comm = MPIABI_COMM_NULL;
  int rank = -1, size = -1;
  MPIABI_Comm by_itself = MPIABI_COMM_NULL;
  if (me == 0) {
    const auto start = std::chrono::steady_clock::now();
    const int rc = MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, 0, &by_itself);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    c.expect(
        rc == 0 && MPIABI_Comm_size(by_itself, &size) == 0 && size == 1 && took < 5,
        str_cat("a group of process 0 alone, split by it alone (", took, " s): " + message(rc)));
  }
  const int rc = MPIABI_Comm_split(MPIABI_COMM_WORLD, 2048, 1 - me, &comm);
  c.expect(rc == 0 && MPIABI_Comm_rank(comm, &rank) == 0 && rank == 1 - me &&
               MPIABI_Comm_size(comm, &size) == 0 && size == 2,
           "the group [2048 0], among its processes: " + message(rc));
  std::vector<int64_t> x = {mine, 1}, y(2);
  const int sum = MPIABI_Allreduce(x.data(), y.data(), 2, MPIABI_INT64_T, MPIABI_SUM, comm);
  c.expect(sum == 0 && y == std::vector<int64_t>{2048, 2}, "an all-reduce on it: " + message(sum));
  // Two groups of one program that both start with process 1's device at its key 0
  // ([2048 0], then [2048]): made in the program's order (once XLA freed the [2048 0] it
  // held).
  MPIABI_Comm_free(&comm);
  const std::vector<int64_t> ordered = {0, 2, 0, 2048, 2, 2, 2048, 0, 1, 2048};
  c.expect(mpiabi::note_groups(ordered.data(), ordered.size()).ok(), "a program's two groups");
  MPIABI_Comm first = MPIABI_COMM_NULL, second = MPIABI_COMM_NULL;
  const int rc1 = MPIABI_Comm_split(MPIABI_COMM_WORLD, 2048, 1 - me, &first);
  c.expect(rc1 == 0 && MPIABI_Comm_size(first, &size) == 0 && size == 2,
           "the program's first group first: " + message(rc1));
  if (me == 1) {
    const int rc2 = MPIABI_Comm_split(MPIABI_COMM_WORLD, 2048, 0, &second);
    c.expect(rc2 == 0 && MPIABI_Comm_size(second, &size) == 0 && size == 1,
             "then its second, by process 1 alone: " + message(rc2));
    MPIABI_Comm_free(&second);
  }
  // XLA freed them all: process 1's split (2048, 0) fits [2048 0] (the programs above)
  // and [2048] (a program on process 1 alone, compiled last); process 0's (0, 0) fits [0]
  // and [0 4096] (a program compiled last; 4096 no process's device: process 0 holds a
  // [0 2048] from the scenarios before). Neither process waits for the other.
  MPIABI_Comm_free(&first);
  if (me == 0) MPIABI_Comm_free(&by_itself);
  const std::vector<int64_t> one = {1, 1, 2048, 1, 1, 2048};
  const std::vector<int64_t> pair = {0, 2, 0, 2048, 1, 2, 0, 4096};
  c.expect(mpiabi::note_groups(one.data(), one.size()).ok() &&
               mpiabi::note_groups(pair.data(), pair.size()).ok(),
           "two more programs' groups");
  MPIABI_Comm ambiguous = MPIABI_COMM_NULL;
  const auto start = std::chrono::steady_clock::now();
  const int rc3 = MPIABI_Comm_split(MPIABI_COMM_WORLD, me == 0 ? 0 : 2048, 0, &ambiguous);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string said = message(rc3);
  const std::string groups =
      me == 0 ? "processes [0] (devices [0]) and processes [0, -1] (devices [0 4096])"
              : "processes [1] (devices [2048]) and processes [1, 0] (devices [2048 0])";
  c.expect(rc3 != 0 && ambiguous != MPIABI_COMM_NULL && took < 5 &&
               said.find(groups) != std::string::npos &&
               said.find("compiled or loaded before either ran") != std::string::npos &&
               said.find("right after compiling or loading it") != std::string::npos,
           str_cat("a split two programs' groups fit is refused at once (", took,
                   " s), naming both: ", said));
  std::vector<int64_t> z = {1}, w(1);
  const int call = MPIABI_Allreduce(z.data(), w.data(), 1, MPIABI_INT64_T, MPIABI_SUM, ambiguous);
  c.expect(call != 0 && message(call).find(groups) != std::string::npos,
           "and every call on what XLA got fails with the reason: " + message(call));
  // A program loaded that will never run (JAX refused its run, or it was freed) is
  // forgotten, once per loading (forget_groups): process 0's split (0, 0) is then [0]'s,
  // made by it alone. [0 4096]'s program is loaded once more first: one forgetting
  // leaves the other loading, and the split still refused.
  if (me == 0) {
    MPIABI_Comm still = MPIABI_COMM_NULL, made = MPIABI_COMM_NULL;
    c.expect(mpiabi::note_groups(pair.data(), pair.size()).ok() &&
                 mpiabi::forget_groups(pair.data(), pair.size()).ok() &&
                 !mpiabi::forget_groups(pair.data(), 5).ok(),
             "forget_groups takes a loading's groups and refuses a short one");
    const int kept = MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, 0, &still);
    c.expect(kept != 0 && message(kept).find(groups) != std::string::npos,
             "one loading of the two forgotten: the split is still refused: " + message(kept));
    c.expect(mpiabi::forget_groups(pair.data(), pair.size()).ok() &&
                 mpiabi::forget_groups(pair.data(), pair.size()).ok(),
             "the other forgotten (once more: nothing left to forget)");
    const int rc6 = MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, 0, &made);
    c.expect(rc6 == 0 && MPIABI_Comm_size(made, &size) == 0 && size == 1,
             "both forgotten: the split is [0]'s, by process 0 alone: " + message(rc6));
    MPIABI_Comm_free(&made);
  }
  // A program some of whose collectives are inside a loop or a branch (flag 2), two of
  // whose groups fit each process's split: its order is not the one they run in.
  const std::vector<int64_t> unordered = {2, 2, 0, 2048, 4, 1, 0, 2, 0, 4096, 1, 2048, 2, 2048, 0};
  c.expect(mpiabi::note_groups(unordered.data(), unordered.size()).ok(), "a loop's groups");
  MPIABI_Comm looped = MPIABI_COMM_NULL;
  const int rc4 = MPIABI_Comm_split(MPIABI_COMM_WORLD, mine, 0, &looped);
  c.expect(rc4 != 0 && looped != MPIABI_COMM_NULL &&
               message(rc4).find("inside a loop or a branch") != std::string::npos,
           "two groups of one program out of order, fitting one split: refused: " + message(rc4));
  // A program whose groups could not be read (flag 4) on devices that hold a known
  // group's: the split (color 6144, key 1: [6144 mine], 6144 no process's device) may be
  // either's, and is refused naming both; before that program was noted it was made.
  const std::vector<int64_t> known = {1, 2, 6144, mine, 1, 2, 6144, mine};
  const std::vector<int64_t> unread = {4, 3, mine, 6144, 8192, 0};
  c.expect(mpiabi::note_groups(known.data(), known.size()).ok() &&
               mpiabi::note_groups(unread.data(), unread.size()).ok(),
           "a program of unknown groups");
  MPIABI_Comm unsure = MPIABI_COMM_NULL;
  const int rc5 = MPIABI_Comm_split(MPIABI_COMM_WORLD, 6144, 1, &unsure);
  c.expect(
      rc5 != 0 && unsure != MPIABI_COMM_NULL &&
          message(rc5).find("could not read") != std::string::npos &&
          message(rc5).find("6144") != std::string::npos,
      "a split a known group and a program of unknown groups both fit: refused: " + message(rc5));
}

// A provisional communicator (several devices per process: each device's thread splits
// for itself, XLA's arguments the group's first device and the device's place), in a
// World of one process of 4 devices. A program's groups [0 1] (an all-reduce of 8 int32)
// and [0 2] (an all-gather of 4 int32) put devices 1 and 2 at place 1 of color 0: device
// 1's split (0, 1) cannot say which it is, and gets a provisional communicator, rank 1,
// size 2. Its first call, an all-reduce of 3 int32, fits neither group's calls: refused,
// naming both. Its next, an all-reduce of 8 int32, binds it to [0 1], made with device
// 0's thread (whose split (0, 0) is [0 1]'s, the program's first), and sums exactly.
// Then device 2's split (0, 1) is [0 2]'s at once ([0 1]'s place 1 is held), and its
// all-gather with device 0 is exact.
void provisional_binding(Checks& c) {
  std::vector<Rail> rails = {Rail{"lo", "127.0.0.1", 0, 1.0}};
  if (!World::start(0, 1, std::string(32, 'p'), "h0", &rails, 1, false).ok()) {
    c.expect(false, "a World of one process starts");
    return;
  }
  std::vector<ProcessEntry> table(1);
  table[0].index = 0;
  table[0].host = "h0";
  table[0].rails = rails;
  table[0].devices = {0, 1, 2, 3};
  World::announce_job(World::Job{0, 1, 20.0});
  c.expect(World::get()->set_processes(std::move(table)).ok(), "its table of 4 devices");
  const int64_t i32 = static_cast<int64_t>(DType::kI32);
  const std::vector<int64_t> program = {8, 4,   0, 1, 2, 3, 2, 2, 0,   1, 1,
                                        0, i32, 8, 2, 0, 2, 1, 1, i32, 4};
  c.expect(mpiabi::note_groups(program.data(), program.size()).ok(), "the program's groups");
  // A second program of the same groups whose [0 1] makes the call refused below (int32
  // x3), loaded and then forgotten (it never runs): its calls go with it.
  const std::vector<int64_t> ghost = {8, 4,   0, 1, 2, 3, 2, 2, 0,   1, 1,
                                      0, i32, 3, 2, 0, 2, 1, 1, i32, 4};
  c.expect(mpiabi::note_groups(ghost.data(), ghost.size()).ok() &&
               mpiabi::forget_groups(ghost.data(), ghost.size()).ok(),
           "a program of the same groups loaded and forgotten");
  auto split = [](int key, MPIABI_Comm* comm, int* rank, int* size) {
    const int rc = MPIABI_Comm_split(MPIABI_COMM_WORLD, 0, key, comm);
    MPIABI_Comm_rank(*comm, rank);
    MPIABI_Comm_size(*comm, size);
    return rc;
  };
  std::vector<int32_t> sum0(8), sum1(8);
  std::string refused;
  int rank1 = -1, size1 = -1, rc0 = -1, rc1 = -1, bad = 0;
  MPIABI_Comm zero = MPIABI_COMM_NULL, one = MPIABI_COMM_NULL;
  std::thread device1([&] {
    int split_rc = split(1, &one, &rank1, &size1);
    std::vector<int32_t> in(8);
    std::iota(in.begin(), in.end(), 100);
    bad = MPIABI_Allreduce(in.data(), sum1.data(), 3, MPIABI_INT32_T, MPIABI_SUM, one);
    refused = message(bad);
    rc1 = split_rc != 0
              ? split_rc
              : MPIABI_Allreduce(in.data(), sum1.data(), 8, MPIABI_INT32_T, MPIABI_SUM, one);
  });
  std::thread device0([&] {
    int rank = -1, size = -1;
    std::vector<int32_t> in(8);
    std::iota(in.begin(), in.end(), 0);
    rc0 = split(0, &zero, &rank, &size);
    if (rc0 == 0)
      rc0 = MPIABI_Allreduce(in.data(), sum0.data(), 8, MPIABI_INT32_T, MPIABI_SUM, zero);
  });
  device1.join();
  device0.join();
  c.expect(rank1 == 1 && size1 == 2,
           str_cat("a provisional communicator: rank 1, size 2 (", rank1, ", ", size1, ")"));
  c.expect(bad != 0 && refused.find("MPI_Allreduce (int32 x3)") != std::string::npos &&
               refused.find("fits none of them") != std::string::npos &&
               refused.find("[0 1] (all-reduce int32 x8)") != std::string::npos &&
               refused.find("[0 2] (all-gather int32 x4)") != std::string::npos,
           "a first call that fits no group's calls (the forgotten program's among them) is "
           "refused, naming both: " +
               refused);
  std::vector<int32_t> expected(8);
  for (int i = 0; i < 8; ++i) expected[i] = 2 * i + 100;
  c.expect(rc0 == 0 && rc1 == 0 && sum0 == expected && sum1 == expected,
           "the next call binds it to [0 1]: its sum with device 0 exact: " + message(rc1) + " / " +
               message(rc0));
  std::vector<int32_t> gathered0(8), gathered2(8);
  int rank2 = -1, size2 = -1, rc2 = -1, rc3 = -1;
  MPIABI_Comm two = MPIABI_COMM_NULL, zero_two = MPIABI_COMM_NULL;
  std::thread device2([&] {
    const std::vector<int32_t> block = {20, 21, 22, 23};
    rc2 = split(1, &two, &rank2, &size2);
    if (rc2 == 0) {
      rc2 = MPIABI_Allgather(block.data(), 4, MPIABI_INT32_T, gathered2.data(), 4, MPIABI_INT32_T,
                             two);
    }
  });
  std::thread device0_again([&] {
    const std::vector<int32_t> block = {0, 1, 2, 3};
    int rank = -1, size = -1;
    rc3 = split(0, &zero_two, &rank, &size);
    if (rc3 == 0) {
      rc3 = MPIABI_Allgather(block.data(), 4, MPIABI_INT32_T, gathered0.data(), 4, MPIABI_INT32_T,
                             zero_two);
    }
  });
  device2.join();
  device0_again.join();
  const std::vector<int32_t> both = {0, 1, 2, 3, 20, 21, 22, 23};
  c.expect(
      rc2 == 0 && rc3 == 0 && rank2 == 1 && size2 == 2 && gathered2 == both && gathered0 == both,
      "device 2's split is then [0 2]'s, its all-gather exact: " + message(rc2) + " / " +
          message(rc3));
  for (MPIABI_Comm* comm : {&zero, &one, &two, &zero_two}) {
    if (*comm != MPIABI_COMM_NULL) MPIABI_Comm_free(comm);
  }
  World::stop(5.0);
}

// What would end the process if it escaped the library, an error instead, on `comm`
// (rank r of 2, both processes at once): a negative count (a collective-permute of
// 2 GiB or more, as XLA's int narrows it), the first allocation of an all-reduce failing
// in both processes, the thread of a permutation's message that cannot start (the wait
// fails, its step's other request is released, not left posted) and each time the next
// call is exact; then (process 1, at its end) a process marked unusable refuses calls.
void calls_that_must_not_abort(Checks& c, MPIABI_Comm comm, int r) {
  std::vector<uint8_t> bytes(64, 1);
  MPIABI_Request requests[2];
  int rc = MPIABI_Isend(bytes.data(), INT32_MIN, MPIABI_BYTE, 1 - r, 0, comm, &requests[0]);
  c.expect(
      rc != 0 && message(rc).find("MPI_Isend: count -2147483648 is negative") != std::string::npos,
      "a negative count is an error naming the function and count: " + message(rc));
  std::vector<int32_t> x(100, r + 1), y(100);
  auto exact_allreduce = [&](const char* after) {
    const int code = MPIABI_Allreduce(x.data(), y.data(), 100, MPIABI_INT32_T, MPIABI_SUM, comm);
    c.expect(code == 0 && y[99] == 3,
             str_cat("after ", after, ", an all-reduce is exact: ", message(code)));
  };
  t_allocations_left = 0;  // this thread's next allocation fails, in the call
  rc = MPIABI_Allreduce(x.data(), y.data(), 100, MPIABI_INT32_T, MPIABI_SUM, comm);
  t_allocations_left = -1;
  c.expect(rc != 0 && message(rc).find("MPI_Allreduce: out of memory") != std::string::npos,
           "a failed allocation is the call's error: " + message(rc));
  exact_allreduce("a failed allocation");
  std::vector<double> send(9, 1.0 + r), recv(9);
  MPIABI_Irecv(recv.data(), 9, MPIABI_DOUBLE, 1 - r, 0, comm, &requests[0]);
  MPIABI_Isend(send.data(), 9, MPIABI_DOUBLE, 1 - r, 0, comm, &requests[1]);
  inject_fault(Fault::kThreadStart, 1);  // the receive's thread
  rc = MPIABI_Wait(&requests[0], static_cast<MPIABI_Status*>(MPIABI_STATUS_IGNORE));
  inject_fault(Fault::kNone, 0);
  c.expect(rc != 0 && message(rc).find("MPI_Wait: could not start a thread") != std::string::npos,
           "a thread that cannot start is the wait's error: " + message(rc));
  const int released = MPIABI_Wait(&requests[1], static_cast<MPIABI_Status*>(MPIABI_STATUS_IGNORE));
  c.expect(requests[0] == MPIABI_REQUEST_NULL &&
               message(released).find("an unknown request") != std::string::npos,
           "the failed wait released its step's other request: " + message(released));
  c.expect(calls_in_flight() == 0, str_cat(calls_in_flight(), " calls left in flight"));
  exact_allreduce("a thread that could not start");
}

// A process marked unusable refuses what communicates (before it would touch a peer),
// with the error's advice; other questions are answered.
void unusable_process_refuses(Checks& c) {
  mark_process_unusable("a fence did not end (self-test)");
  std::vector<double> x(3);
  const int rc =
      MPIABI_Allreduce(x.data(), x.data(), 3, MPIABI_DOUBLE, MPIABI_SUM, MPIABI_COMM_SELF);
  c.expect(
      rc != 0 && message(rc).find("MPI_Allreduce refused: this process is no longer usable "
                                  "(restart the job): a fence did not end") != std::string::npos,
      "an unusable process refuses MPI calls: " + message(rc));
  int rank = -1;
  c.expect(MPIABI_Comm_rank(MPIABI_COMM_SELF, &rank) == 0 && rank == 0,
           "and still answers MPI_Comm_rank");
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
    known_groups(c, 1);
    unusable_process_refuses(c);  // for good: the last of this process
    World::stop(5.0);
    _exit(c.failures == 0 ? 0 : 1);
  }
  parent.expect(start_world(0, to_child[1], to_parent[0]), "process 0 starts its World");
  as_xla_does(parent, 0);
  failed_splits(parent, 0, to_child[1], -1);
  known_groups(parent, 0);
  World::stop(5.0);
  provisional_binding(parent);  // a World of its own, with 4 devices
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
