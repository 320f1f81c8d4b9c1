// MPI error codes that carry jax_accl's message: each failed call gets a code of its
// own (above MPI_ERR_LASTCODE), under which Error_string finds what went wrong, which
// rank and which call. XLA formats its error from that.
#pragma once

#include <string>
#include <utility>

#include "common/status.h"

namespace accl::mpiabi {

// Records `why` (prefixed "jax_accl: ") and returns its error code. Never 0.
int fail(const Status& why);
// The message of `code`: a recorded failure, an MPI constant's name, or "unknown".
std::string message_of(int code);
// A function XLA never calls: prints once that jax_accl's MPI library lacks it, and
// returns that error. `name` is the ABI's (MPIABI_Send).
Status unsupported(const char* name);

// The error of the exception being handled (call it in a catch block only), naming
// `function`: an allocation that failed (std::bad_alloc), a thread that could not start
// (std::system_error), any other std::exception by its text. Never throws (without
// memory for the text: an error with an empty message).
Status exception_error(const char* function) noexcept;
// Records the exception being handled (exception_error) and returns its code; never
// throws: MPI_ERR_NO_MEM where not even the message could be recorded.
int fail_exception(const char* function) noexcept;

// Runs `body` (returning a Status): an exception it throws becomes its error, naming
// `function`. For code that may not let one out (a thread's body, a cleanup).
template <typename Body>
Status guarded(const char* function, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    return exception_error(function);
  }
}

// A C entry point of the ABI: runs `body` (returning a Status) and returns its MPI
// code, 0 or a recorded error's (fail). Nothing escapes into XLA: an exception becomes
// the call's error (fail_exception), never a std::terminate.
template <typename Body>
int entry(const char* function, Body&& body) noexcept {
  try {
    const Status s = std::forward<Body>(body)();
    return s.ok() ? 0 : fail(s);
  } catch (...) {
    return fail_exception(function);
  }
}

// The start of a call that communicates or posts: Ok, or the error naming `function`
// that refuses it on a process marked unusable (common/health.h).
Status usable_for(const char* function);

// Counts a call in flight for its lifetime, in the counter jax_accl.recover() and
// stats()["calls_in_flight"] read (runtime/stats.h), as the FFI calls are counted.
class InFlight {
 public:
  InFlight();
  ~InFlight();
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

// A C entry point that communicates or posts (entry, and more): refused on an unusable
// process, counted in flight while it runs, and where it fails (an error or an
// exception) `on_failure` releases what it leaves behind (it must not throw).
template <typename Body, typename Cleanup>
int communicating(const char* function, Body&& body, Cleanup&& on_failure) noexcept {
  const int code = entry(function, [&]() -> Status {
    ACCL_RETURN_IF_ERROR(usable_for(function));
    InFlight counted;
    return std::forward<Body>(body)();
  });
  if (code != 0) on_failure();
  return code;
}

template <typename Body>
int communicating(const char* function, Body&& body) noexcept {
  return communicating(function, std::forward<Body>(body), [] {});
}

}  // namespace accl::mpiabi
