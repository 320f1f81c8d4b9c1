// MPI error codes that carry jax_accl's message: each failed call gets a code of its
// own (above MPI_ERR_LASTCODE), under which Error_string finds what went wrong, which
// rank and which call. XLA formats its error from that.
#pragma once

#include <string>

#include "common/status.h"

namespace accl::mpiabi {

// Records `why` (prefixed "jax_accl: ") and returns its error code. Never 0.
int fail(const Status& why);
// The message of `code`: a recorded failure, an MPI constant's name, or "unknown".
std::string message_of(int code);
// A function XLA never calls: prints once that jax_accl's MPI library lacks it, and
// fails with that message. `name` is the ABI's (MPIABI_Send).
int unsupported(const char* name);

}  // namespace accl::mpiabi
