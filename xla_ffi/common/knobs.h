// Every JAX_ACCL_* environment variable is declared here once, with its default.
// jax_accl/config.py mirrors this list for Python; the README documents it.
#pragma once

#include <string>

namespace accl {

struct Knobs {
  // JAX_ACCL_TIMEOUT_S: deadline of one collective, in seconds.
  double timeout_s = 120.0;
  // JAX_ACCL_ALGORITHM: auto | direct | ring | halving_doubling | reduce_broadcast.
  std::string algorithm = "auto";
};

// Read once from the environment, on first use.
const Knobs& knobs();

}  // namespace accl
