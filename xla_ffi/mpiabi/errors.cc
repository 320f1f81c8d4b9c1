#include "mpiabi/errors.h"

#include <cstdio>
#include <exception>
#include <mutex>
#include <new>
#include <set>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/health.h"
#include "mpiabi/abi.h"
#include "runtime/stats.h"

namespace accl::mpiabi {
namespace {

constexpr int kFirstCode = 1000;  // above MPI_ERR_LASTCODE (constants.cc)
constexpr int kKept = 4096;       // the newest failures' messages

struct Recorded {
  std::mutex mutex;
  std::vector<std::string> messages = std::vector<std::string>(kKept);
  int next = 0;
  std::set<std::string> reported_unsupported;
};

Recorded& recorded() {
  static auto* r = new Recorded;  // never destroyed: XLA may format an error at exit
  return *r;
}

}  // namespace

int fail(const Status& why) {
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int slot = r.next;
  r.next = (r.next + 1) % kKept;
  r.messages[slot] = "jax_accl: " + why.message();
  return kFirstCode + slot;
}

std::string message_of(int code) {
  if (code == MPIABI_SUCCESS) return "MPI_SUCCESS: no error";
  if (code == MPIABI_ERR_NO_MEM) {
    return "jax_accl: MPI_ERR_NO_MEM: a call failed out of memory, with none left to record "
           "which call";
  }
  if (code >= kFirstCode && code < kFirstCode + kKept) {
    Recorded& r = recorded();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.messages[code - kFirstCode].empty()) return r.messages[code - kFirstCode];
  }
  return str_cat("jax_accl: MPI error code ", code, " (not one jax_accl returned)");
}

Status unsupported(const char* name) {
  const std::string abi(name);  // MPIABI_Send -> MPI_Send, MPIXABI_... -> MPIX_...
  const size_t cut = abi.find("ABI_");
  const std::string function = abi.substr(0, cut) + "_" + abi.substr(cut + 4);
  const Status why = error(Code::kInvalidArgument, function,
                           " is not implemented by jax_accl's MPI library, which carries the "
                           "collectives XLA:CPU makes (JAX_ACCL_XLA_COLLECTIVES=1); unset "
                           "MPITRAMPOLINE_LIB to use another MPI");
  {
    Recorded& r = recorded();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.reported_unsupported.insert(function).second) {
      std::fprintf(stderr, "jax_accl: %s\n", why.message().c_str());
    }
  }
  return why;
}

namespace {

// The message of the exception being handled (rethrown here); may itself throw
// std::bad_alloc.
Status describe_exception(const char* function) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return error(Code::kInternal, function,
                 ": out of memory (an allocation failed: ", "std::bad_alloc)");
  } catch (const std::system_error& e) {
    return error(Code::kInternal, function, ": could not start a thread or take a lock (",
                 "std::system_error: ", e.what(), ")");
  } catch (const std::exception& e) {
    return error(Code::kInternal, function, ": an exception: ", e.what());
  } catch (...) {
    return error(Code::kInternal, function, ": an exception of unknown type");
  }
}

}  // namespace

Status exception_error(const char* function) noexcept {
  try {
    return describe_exception(function);
  } catch (...) {  // no memory for the message: an error all the same
    return Status(Code::kInternal, std::string());
  }
}

int fail_exception(const char* function) noexcept {
  try {
    return fail(exception_error(function));
  } catch (...) {  // no memory left for the message
    return MPIABI_ERR_NO_MEM;
  }
}

Status usable_for(const char* function) {
  Status usable = process_usable();
  if (usable.ok()) return usable;
  std::string_view why = usable.message();
  if (why.rfind("jax_accl: ", 0) == 0) why.remove_prefix(10);  // fail() adds it back
  return error(usable.code(), function, " refused: ", why);
}

InFlight::InFlight() { call_began(); }
InFlight::~InFlight() { call_ended(); }

}  // namespace accl::mpiabi
