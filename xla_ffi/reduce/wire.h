// bfloat16 on the wire (jax_accl/wire_dtype.py): a float32 sum whose messages carry
// bfloat16. Its kernels are reduce/reduce.h's WireKernels, the link that narrows and
// widens messages transport/wire_link.h; this holds the job's setting for XLA's own
// all-reduces (JAX_ACCL_XLA_COLLECTIVES=1, mpiabi/calls.cc).
#pragma once

#include "reduce/reduce.h"

namespace accl {

// Whether XLA's float32 sum all-reduces travel as bfloat16: the job's, set at its start.
bool& xla_wire_bf16_setting();

}  // namespace accl
