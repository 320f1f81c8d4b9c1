// The exception a cancelled thread (pthread_cancel, pthread_exit) unwinds with, for the
// catch clauses that must let it pass: libstdc++ names it abi::__forced_unwind. libc++abi
// (the C++ runtime of the manylinux wheel: clang and libc++ from scripts/zig_toolchain.sh)
// has no such type; there ForcedUnwind is a type nothing throws, and a catch-all would take
// a forced unwind. Nothing in jax_accl, JAX or XLA cancels a thread running jax_accl's code.
#pragma once

#include <cxxabi.h>

namespace accl {

#if defined(_LIBCPP_VERSION)
struct ForcedUnwind {};
#else
using ForcedUnwind = abi::__forced_unwind;
#endif

}  // namespace accl
