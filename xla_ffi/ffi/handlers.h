// The XLA FFI handlers of jax_accl (CPU). Only files in ffi/ include the XLA header.
#pragma once

#include "xla/ffi/api/c_api.h"

// accl_allreduce: operands x_1..x_N, results y_k = all-reduce of x_k (aliasing x_k).
extern "C" XLA_FFI_Error* AcclAllreduceHandler(XLA_FFI_CallFrame* call_frame);
