// The MPI functions XLA:CPU's MPI collectives call (xla/backends/cpu/collectives/
// mpi_collectives.cc and mpi_communicator.cc), on jax_accl's runtime:
//   Init_thread, Finalize, Is_thread_main  process state (jax_accl's World is started
//                                          by jax_accl/xla_collectives.py, not here)
//   Comm_rank, Comm_size, Comm_split, Comm_free  communicators (communicators.h)
//   Allreduce, Allgather, Reduce_scatter   jax_accl's collectives of the group
//   Sendrecv                               one step of a permutation (all-to-all)
//   Isend, Irecv, Wait                     a permutation (collective-permute)
//   Error_string                           the message of a failed call (errors.h)
// Every other function of the ABI fails naming itself (unsupported.cc).
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/huge_pages.h"
#include "mpiabi/abi.h"
#include "mpiabi/communicators.h"
#include "mpiabi/errors.h"
#include "mpiabi/point_to_point.h"
#include "reduce/wire.h"

namespace accl::mpiabi {
namespace {

// The element type of an MPI datatype XLA passes, or false.
bool dtype_of(MPIABI_Datatype type, DType* out) {
  struct Entry {
    const uintptr_t* handle;
    DType dtype;
  };
  static const Entry table[] = {
      {&MPIABI_BYTE, DType::kU8},
      {&MPIABI_UINT8_T, DType::kU8},
      {&MPIABI_UNSIGNED_CHAR, DType::kU8},
      {&MPIABI_INT8_T, DType::kI8},
      {&MPIABI_SIGNED_CHAR, DType::kI8},
      {&MPIABI_CHAR, DType::kI8},
      {&MPIABI_C_BOOL, DType::kBool},
      {&MPIABI_INT16_T, DType::kI16},
      {&MPIABI_SHORT, DType::kI16},
      {&MPIABI_UINT16_T, DType::kU16},
      {&MPIABI_UNSIGNED_SHORT, DType::kU16},
      {&MPIABI_INT32_T, DType::kI32},
      {&MPIABI_INT, DType::kI32},
      {&MPIABI_UINT32_T, DType::kU32},
      {&MPIABI_UNSIGNED, DType::kU32},
      {&MPIABI_INT64_T, DType::kI64},
      {&MPIABI_LONG, DType::kI64},
      {&MPIABI_LONG_LONG, DType::kI64},
      {&MPIABI_UINT64_T, DType::kU64},
      {&MPIABI_UNSIGNED_LONG, DType::kU64},
      {&MPIABI_UNSIGNED_LONG_LONG, DType::kU64},
      {&MPIABI_FLOAT, DType::kF32},
      {&MPIABI_DOUBLE, DType::kF64},
      {&MPIABI_C_COMPLEX, DType::kC64},
      {&MPIABI_C_FLOAT_COMPLEX, DType::kC64},
      {&MPIABI_C_DOUBLE_COMPLEX, DType::kC128},
  };
  for (const Entry& e : table) {
    if (*e.handle == type) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

bool op_of(MPIABI_Op op, ReduceOp* out) {
  if (op == MPIABI_SUM)
    *out = ReduceOp::kSum;
  else if (op == MPIABI_PROD)
    *out = ReduceOp::kProd;
  else if (op == MPIABI_MIN)
    *out = ReduceOp::kMin;
  else if (op == MPIABI_MAX)
    *out = ReduceOp::kMax;
  else
    return false;
  return true;
}

Status bad_type(const char* function, MPIABI_Datatype type) {
  return error(Code::kInvalidArgument, function, ": datatype handle ", type,
               " is not one jax_accl reduces (integers of 8 to 64 bits, float, double, "
               "complex)");
}

// The bytes of `count` elements of `dtype`, `blocks` times, or an error naming
// `function` and the count: a negative one (XLA passes counts as C ints, so a count of
// 2^31 or more, such as a collective-permute's byte count of 2 GiB or more, arrives
// negative) or one whose byte size overflows.
Status byte_size(const char* function, int count, DType dtype, uint64_t blocks, uint64_t* bytes) {
  if (count < 0) {
    return error(Code::kInvalidArgument, function, ": count ", count,
                 " is negative (XLA passes counts as C ints: a buffer of 2^31 elements or more, "
                 "or a collective-permute of 2 GiB or more, whose bytes it counts, arrives "
                 "negative; split it into smaller ones)");
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), dtype_size(dtype) * blocks, bytes)) {
    return error(Code::kInvalidArgument, function, ": count ", count, " of ", dtype_size(dtype),
                 "-byte elements, ", blocks, " blocks, overflows a 64-bit byte size");
  }
  return Status::Ok();
}

// The communicator, datatype and count of a call, checked: `count` elements once per
// rank fit a byte size (an all-gather's output, a reduce-scatter's input).
Status begin(const char* function, MPIABI_Comm handle, MPIABI_Datatype type, int count,
             std::shared_ptr<Comm>* comm, DType* dtype) {
  ACCL_RETURN_IF_ERROR(find_comm(handle, function, comm));
  if (!dtype_of(type, dtype)) return bad_type(function, type);
  uint64_t bytes = 0;
  return byte_size(function, count, *dtype, (*comm)->devices.size(), &bytes);
}

// A float32 sum whose bytes travel as bfloat16 (JAX_ACCL_WIRE_DTYPE=bfloat16): run on
// the float32 buffers, the algorithms' own passes rounding the operand where they first
// read it, sending bfloat16 and widening what they receive (transport/wire_link.h);
// every rank ends with the same float32 bits, each a bfloat16 value (a group of one: its
// input rounded, run_collective_on).
Status allreduce_as_bf16(Comm& comm, const void* in, void* out, int count) {
  CollectiveArgs args;
  args.wire_bf16 = true;
  ACCL_RETURN_IF_ERROR(run_collective_on(comm, "MPI_Allreduce", Collective::kAllReduce, DType::kF32,
                                         ReduceOp::kSum, in, out, static_cast<uint64_t>(count),
                                         args));
  return Status::Ok();
}

Status allreduce(const void* in, void* out, int count, MPIABI_Datatype type, MPIABI_Op op,
                 MPIABI_Comm handle) {
  std::shared_ptr<Comm> comm;
  DType dtype;
  ReduceOp reduce;
  ACCL_RETURN_IF_ERROR(begin("MPI_Allreduce", handle, type, count, &comm, &dtype));
  ACCL_RETURN_IF_ERROR(bind_provisional(&comm, "MPI_Allreduce", 0, static_cast<int>(dtype), count));
  if (!op_of(op, &reduce)) {
    return error(Code::kInvalidArgument, "MPI_Allreduce on ", comm->label,
                 ": only MPI_SUM, MPI_PROD, MPI_MIN and MPI_MAX are supported");
  }
  if (in == MPIABI_IN_PLACE) in = out;
  // XLA's result, fresh at every launch (common/huge_pages.h), faulted in huge pages.
  if (out != in) advise_huge_pages(out, static_cast<size_t>(count) * dtype_size(dtype));
  if (dtype == DType::kF32 && reduce == ReduceOp::kSum && xla_wire_bf16_setting()) {
    return allreduce_as_bf16(*comm, in, out, count);
  }
  return run_collective_on(*comm, "MPI_Allreduce", Collective::kAllReduce, dtype, reduce, in, out,
                           count);
}

Status allgather(const void* in, int count, MPIABI_Datatype type, void* out, int out_count,
                 MPIABI_Datatype out_type, MPIABI_Comm handle) {
  std::shared_ptr<Comm> comm;
  DType dtype;
  ACCL_RETURN_IF_ERROR(begin("MPI_Allgather", handle, type, count, &comm, &dtype));
  ACCL_RETURN_IF_ERROR(bind_provisional(&comm, "MPI_Allgather", 1, static_cast<int>(dtype), count));
  if (in == MPIABI_IN_PLACE || out_type != type || out_count != count) {
    return error(Code::kInvalidArgument, "MPI_Allgather on ", comm->label,
                 ": jax_accl gathers blocks of one type and count, not in place");
  }
  advise_huge_pages(out, static_cast<size_t>(count) * dtype_size(dtype) * comm->devices.size());
  return run_collective_on(*comm, "MPI_Allgather", Collective::kAllGather, dtype, ReduceOp::kSum,
                           in, out, count);
}

Status reduce_scatter(const void* in, void* out, const int* counts, MPIABI_Datatype type,
                      MPIABI_Op op, MPIABI_Comm handle) {
  std::shared_ptr<Comm> comm;
  DType dtype;
  ReduceOp reduce;
  ACCL_RETURN_IF_ERROR(begin("MPI_Reduce_scatter", handle, type, counts[0], &comm, &dtype));
  ACCL_RETURN_IF_ERROR(
      bind_provisional(&comm, "MPI_Reduce_scatter", 2, static_cast<int>(dtype),
                       static_cast<int64_t>(counts[0]) * static_cast<int>(comm->devices.size())));
  const int n = static_cast<int>(comm->devices.size());
  if (!op_of(op, &reduce) || in == MPIABI_IN_PLACE ||
      !std::all_of(counts, counts + n, [&](int c) { return c == counts[0]; })) {
    return error(Code::kInvalidArgument, "MPI_Reduce_scatter on ", comm->label,
                 ": jax_accl scatters equal blocks, not in place, by MPI_SUM, MPI_PROD, "
                 "MPI_MIN or MPI_MAX");
  }
  return run_collective_on(*comm, "MPI_Reduce_scatter", Collective::kReduceScatter, dtype, reduce,
                           in, out, static_cast<uint64_t>(counts[0]) * n);
}

Status sendrecv(const void* in, int count, MPIABI_Datatype type, int dest, void* out, int out_count,
                MPIABI_Datatype out_type, int source, MPIABI_Comm handle, MPIABI_Status* status) {
  std::shared_ptr<Comm> comm;
  DType dtype, out_dtype;
  ACCL_RETURN_IF_ERROR(begin("MPI_Sendrecv", handle, type, count, &comm, &dtype));
  ACCL_RETURN_IF_ERROR(bind_provisional(&comm, "MPI_Sendrecv", 3, -1, -1));
  if (!dtype_of(out_type, &out_dtype)) return bad_type("MPI_Sendrecv", out_type);
  uint64_t bytes = 0, out_bytes = 0;
  ACCL_RETURN_IF_ERROR(byte_size("MPI_Sendrecv", count, dtype, 1, &bytes));
  ACCL_RETURN_IF_ERROR(byte_size("MPI_Sendrecv", out_count, out_dtype, 1, &out_bytes));
  const int n = static_cast<int>(comm->devices.size());
  if (bytes != out_bytes || dest < 0 || dest >= n || source < 0 || source >= n) {
    return error(Code::kInvalidArgument, "MPI_Sendrecv on ", comm->label, ": rank ", comm->rank,
                 " sends ", bytes, " bytes to ", dest, " and receives ", out_bytes, " from ",
                 source, "; jax_accl exchanges equal blocks with ranks of the communicator");
  }
  if (status != nullptr && static_cast<void*>(status) != MPIABI_STATUS_IGNORE) {
    status->MPI_SOURCE = source;
    status->MPI_TAG = 0;
    status->MPI_ERROR = MPIABI_SUCCESS;
  }
  return run_collective_on(*comm, "MPI_Sendrecv", Collective::kPermute, DType::kU8, ReduceOp::kSum,
                           in, out, bytes, CollectiveArgs{dest, source});
}

Status post_point_to_point(bool send, const void* in, void* out, int count, MPIABI_Datatype type,
                           int peer, MPIABI_Comm handle, MPIABI_Request* request) {
  const char* function = send ? "MPI_Isend" : "MPI_Irecv";
  DType dtype;
  if (!dtype_of(type, &dtype)) return bad_type(function, type);
  uint64_t bytes = 0;
  ACCL_RETURN_IF_ERROR(byte_size(function, count, dtype, 1, &bytes));
  std::shared_ptr<Comm> comm;  // bound first where provisional: post finds what it made
  if (find_comm(handle, function, &comm).ok()) {
    ACCL_RETURN_IF_ERROR(bind_provisional(&comm, function, 4, -1, -1));
  }
  return post(handle, send, in, out, bytes, peer, request);
}

}  // namespace
}  // namespace accl::mpiabi

using accl::Status;
using namespace accl::mpiabi;  // NOLINT: the ABI's entry points below

extern "C" {

int MPIABI_Init_thread(int*, char***, int required, int* provided) {
  if (provided != nullptr) *provided = std::min(required, MPIABI_THREAD_MULTIPLE);
  return MPIABI_SUCCESS;
}

int MPIABI_Init(int*, char***) { return MPIABI_SUCCESS; }

int MPIABI_Query_thread(int* provided) {
  *provided = MPIABI_THREAD_MULTIPLE;
  return MPIABI_SUCCESS;
}

int MPIABI_Initialized(int* flag) {
  *flag = 1;
  return MPIABI_SUCCESS;
}

// jax_accl's side stops with jax.distributed (or at exit), not here: XLA finalizes at
// exit, while other atexit handlers may still run collectives.
int MPIABI_Finalize(void) { return MPIABI_SUCCESS; }

int MPIABI_Finalized(int* flag) {
  *flag = 0;
  return MPIABI_SUCCESS;
}

// XLA calls from its thread pool, and jax_accl runs from any thread.
int MPIABI_Is_thread_main(int* flag) {
  *flag = 1;
  return MPIABI_SUCCESS;
}

// Every entry point below that can fail runs inside entry() (errors.h): an exception
// becomes the call's MPI error; those that communicate or post inside communicating():
// refused on an unusable process, counted in flight.

int MPIABI_Comm_rank(MPIABI_Comm handle, int* rank) {
  return entry("MPI_Comm_rank", [&] {
    int size = 0;
    if (handle == MPIABI_COMM_WORLD) return world_identity(rank, &size);
    std::shared_ptr<Comm> comm;
    ACCL_RETURN_IF_ERROR(find_comm(handle, "MPI_Comm_rank", &comm));
    *rank = comm->rank;
    return Status::Ok();
  });
}

int MPIABI_Comm_size(MPIABI_Comm handle, int* size) {
  return entry("MPI_Comm_size", [&] {
    int rank = 0;
    if (handle == MPIABI_COMM_WORLD) return world_identity(&rank, size);
    std::shared_ptr<Comm> comm;
    ACCL_RETURN_IF_ERROR(find_comm(handle, "MPI_Comm_size", &comm));
    *size = static_cast<int>(comm->devices.size());
    return Status::Ok();
  });
}

// XLA ignores the split's error and runs its collectives on what it got: a split that
// is refused (no parent: jax_accl's side not started, a process with several devices;
// a process marked unusable) still gives a communicator, one whose every call fails
// with the reason, never MPI_COMM_NULL.
int MPIABI_Comm_split(MPIABI_Comm handle, int color, int key, MPIABI_Comm* newcomm) {
  *newcomm = MPIABI_COMM_NULL;
  const int code = communicating("MPI_Comm_split", [&] {
    std::shared_ptr<Comm> parent;
    ACCL_RETURN_IF_ERROR(find_comm(handle, "MPI_Comm_split", &parent));
    return split(*parent, color, key, newcomm);
  });
  if (code != 0 && *newcomm == MPIABI_COMM_NULL && color != MPIABI_UNDEFINED) {
    entry("MPI_Comm_split", [&] { return refused_split(message_of(code), color, key, newcomm); });
  }
  return code;
}

int MPIABI_Comm_free(MPIABI_Comm* handle) {
  return entry("MPI_Comm_free", [&] {
    free_comm(*handle);
    *handle = MPIABI_COMM_NULL;
    return Status::Ok();
  });
}

int MPIABI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPIABI_Datatype type,
                     MPIABI_Op op, MPIABI_Comm comm) {
  return communicating("MPI_Allreduce",
                       [&] { return allreduce(sendbuf, recvbuf, count, type, op, comm); });
}

int MPIABI_Allgather(const void* sendbuf, int sendcount, MPIABI_Datatype sendtype, void* recvbuf,
                     int recvcount, MPIABI_Datatype recvtype, MPIABI_Comm comm) {
  return communicating("MPI_Allgather", [&] {
    return allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
}

int MPIABI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                          MPIABI_Datatype type, MPIABI_Op op, MPIABI_Comm comm) {
  return communicating("MPI_Reduce_scatter", [&] {
    return reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm);
  });
}

int MPIABI_Sendrecv(const void* sendbuf, int sendcount, MPIABI_Datatype sendtype, int dest,
                    int /*sendtag*/, void* recvbuf, int recvcount, MPIABI_Datatype recvtype,
                    int source, int /*recvtag*/, MPIABI_Comm comm, MPIABI_Status* status) {
  return communicating("MPI_Sendrecv", [&] {
    return sendrecv(sendbuf, sendcount, sendtype, dest, recvbuf, recvcount, recvtype, source, comm,
                    status);
  });
}

// A post that fails drops this thread's unclaimed posts (XLA returns without waiting).
int MPIABI_Isend(const void* buf, int count, MPIABI_Datatype type, int dest, int /*tag*/,
                 MPIABI_Comm comm, MPIABI_Request* request) {
  return communicating(
      "MPI_Isend",
      [&] { return post_point_to_point(true, buf, nullptr, count, type, dest, comm, request); },
      drop_unclaimed);
}

int MPIABI_Irecv(void* buf, int count, MPIABI_Datatype type, int source, int /*tag*/,
                 MPIABI_Comm comm, MPIABI_Request* request) {
  return communicating(
      "MPI_Irecv",
      [&] { return post_point_to_point(false, nullptr, buf, count, type, source, comm, request); },
      drop_unclaimed);
}

// A wait that fails releases its request's step (XLA waits for none of the others).
int MPIABI_Wait(MPIABI_Request* request, MPIABI_Status* status) {
  return communicating(
      "MPI_Wait", [&] { return wait(request, status); }, [&] { release_step(request); });
}

int MPIABI_Error_string(int code, char* text, int* length) {
  return entry("MPI_Error_string", [&] {
    const std::string message = message_of(code);
    const size_t n = std::min<size_t>(message.size(), kMaxErrorString - 1);
    std::memcpy(text, message.data(), n);
    text[n] = '\0';
    *length = static_cast<int>(n);
    return Status::Ok();
  });
}

// MPItrampoline asks these when MPITRAMPOLINE_VERBOSE is set. MPI 3.1's API, as the
// communicators XLA uses need; the text fits MPI_MAX_LIBRARY_VERSION_STRING (>= 256).
int MPIABI_Get_version(int* version, int* subversion) {
  *version = 3;
  *subversion = 1;
  return MPIABI_SUCCESS;
}

int MPIABI_Get_library_version(char* text, int* length) {
  static constexpr char kText[] =
      "jax_accl's MPI library: XLA:CPU's collectives on jax_accl's runtime";
  static_assert(sizeof(kText) <= 256, "MPI_MAX_LIBRARY_VERSION_STRING is at least 256");
  std::memcpy(text, kText, sizeof(kText));
  *length = static_cast<int>(sizeof(kText) - 1);
  return MPIABI_SUCCESS;
}

// No device memory here: MPIX_Query_*_support answer 0.
int MPIXABI_Query_cuda_support(void) { return 0; }
int MPIXABI_Query_hip_support(void) { return 0; }
int MPIXABI_Query_rocm_support(void) { return 0; }
int MPIXABI_Query_ze_support(void) { return 0; }

}  // extern "C"
