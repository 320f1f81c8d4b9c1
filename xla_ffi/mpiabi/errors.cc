#include "mpiabi/errors.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <vector>

#include "mpiabi/abi.h"

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
  if (code >= kFirstCode && code < kFirstCode + kKept) {
    Recorded& r = recorded();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.messages[code - kFirstCode].empty()) return r.messages[code - kFirstCode];
  }
  return str_cat("jax_accl: MPI error code ", code, " (not one jax_accl returned)");
}

int unsupported(const char* name) {
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
  return fail(why);
}

}  // namespace accl::mpiabi
