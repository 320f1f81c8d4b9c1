// Every function of the ABI, failing with a message naming it: weak definitions, which
// the implemented ones (calls.cc) replace at link time. MPItrampoline needs each name
// to exist; XLA calls only those calls.cc defines.
#include "mpiabi/abi.h"
#include "mpiabi/errors.h"

#define ACCL_MPI_FUNCTION(name)                                                         \
  extern "C" __attribute__((weak)) int name() {                                         \
    return accl::mpiabi::entry(#name, [] { return accl::mpiabi::unsupported(#name); }); \
  }
#define ACCL_MPI_INT(name)
#define ACCL_MPI_HANDLE(name)
#define ACCL_MPI_POINTER(name)
#define ACCL_MPI_FUNCTION_POINTER(name)
#define ACCL_MPI_OFFSET(name)
#include "mpiabi/abi_names.inc"
