// The MPIwrapper ABI that jaxlib's MPItrampoline loads (MPI ABI 2.10, MPItrampoline's
// mpiabi.h): its types as jax_accl's MPI library (libjax_accl_mpi.so) exports them.
// MPItrampoline dlopens the library named by MPITRAMPOLINE_LIB, checks the version
// ints below, calls mpiwrapper_export_fortran_constants_ and looks every name of
// abi_names.inc up: functions, and constants as data it reads once (ints, handles as
// uintptr_t, pointers as sentinels, function pointers, one offset).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef uintptr_t MPIABI_Comm;
typedef uintptr_t MPIABI_Datatype;
typedef uintptr_t MPIABI_Op;
typedef uintptr_t MPIABI_Request;

// 40 bytes: an implementation's own fields, then the three the user reads.
struct MPIABI_Status {
  unsigned char implementation[24];
  int MPI_SOURCE;
  int MPI_TAG;
  int MPI_ERROR;
  int padding;
};
static_assert(sizeof(MPIABI_Status) == 40, "MPIABI_Status is 10 Fortran integers");

// The constants the calls compare against (all are defined in constants.cc).
#define ACCL_MPI_FUNCTION(name)
#define ACCL_MPI_INT(name) extern const int name;
#define ACCL_MPI_HANDLE(name) extern const uintptr_t name;
#define ACCL_MPI_POINTER(name) extern void* const name;
#define ACCL_MPI_FUNCTION_POINTER(name) extern void (*const name)();
#define ACCL_MPI_OFFSET(name) extern const int64_t name;
#include "mpiabi/abi_names.inc"
#undef ACCL_MPI_FUNCTION
#undef ACCL_MPI_INT
#undef ACCL_MPI_HANDLE
#undef ACCL_MPI_POINTER
#undef ACCL_MPI_FUNCTION_POINTER
#undef ACCL_MPI_OFFSET

}  // extern "C"

namespace accl::mpiabi {

// Handles jax_accl makes at run time (communicators, requests) start above every
// constant's value.
inline constexpr uintptr_t kFirstDynamicHandle = uintptr_t{1} << 20;
// The longest message Error_string writes (MPIABI_MAX_ERROR_STRING), with its NUL.
inline constexpr int kMaxErrorString = 1024;

}  // namespace accl::mpiabi
