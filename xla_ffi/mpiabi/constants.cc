// The MPIwrapper ABI's constants and version, as data (MPItrampoline reads each once,
// after dlopen). Every int and handle differs from every other of its kind, so a call
// can tell them apart; MPI_SUCCESS is 0, the error classes are 1 up to MPI_ERR_LASTCODE
// and the thread levels are ordered, as MPI requires.
#include <string_view>

#include "mpiabi/abi.h"

namespace {

constexpr bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// `index` counts the constants of abi_names.inc (unique, increasing).
constexpr int int_value(std::string_view name, int index) {
  if (name == "MPIABI_SUCCESS") return 0;
  if (name == "MPIABI_ERR_LASTCODE") return 999;
  if (starts_with(name, "MPIABI_ERR_"))
    return 1 + index;  // below 999: the table has fewer constants
  if (name == "MPIABI_THREAD_SINGLE") return 0;
  if (name == "MPIABI_THREAD_FUNNELED") return 1;
  if (name == "MPIABI_THREAD_SERIALIZED") return 2;
  if (name == "MPIABI_THREAD_MULTIPLE") return 3;
  if (name == "MPIABI_PROC_NULL") return -1;
  if (name == "MPIABI_ANY_SOURCE") return -2;
  if (name == "MPIABI_ROOT") return -3;
  if (name == "MPIABI_ANY_TAG") return -4;
  if (name == "MPIABI_UNDEFINED") return -32766;
  return 100000 + index;
}

// Distinct addresses for the pointer constants (MPI_IN_PLACE, MPI_STATUS_IGNORE, ...).
char g_sentinels[1024];  // indexed by __COUNTER__, below 700

}  // namespace

extern "C" {

// The ABI's version (MPItrampoline requires major 2, minor >= 9) and this wrapper's.
extern const int mpiabi_version_major, mpiabi_version_minor, mpiabi_version_patch;
extern const int mpiwrapper_version_major, mpiwrapper_version_minor, mpiwrapper_version_patch;
const int mpiabi_version_major = 2, mpiabi_version_minor = 10, mpiabi_version_patch = 0;
const int mpiwrapper_version_major = 2, mpiwrapper_version_minor = 10, mpiwrapper_version_patch = 0;

// Fortran has no constants here to export.
void mpiwrapper_export_fortran_constants_(void) {}

#define ACCL_MPI_FUNCTION(name)
#define ACCL_MPI_INT(name) const int name = int_value(#name, __COUNTER__);
#define ACCL_MPI_HANDLE(name) const uintptr_t name = 0x1000 + __COUNTER__;
#define ACCL_MPI_POINTER(name) void* const name = &g_sentinels[__COUNTER__];
#define ACCL_MPI_FUNCTION_POINTER(name) void (*const name)() = nullptr;
#define ACCL_MPI_OFFSET(name) const int64_t name = -54278278;
#include "mpiabi/abi_names.inc"

}  // extern "C"
