// bfloat16 on the wire (jax_accl/wire_dtype.py): a float32 operand narrowed once to
// bfloat16 (round to nearest even, NaN kept quiet, as the bfloat16 reduce kernels and XLA's
// conversion round), the bfloat16 sum run, and its result widened back exactly; for
// jax_accl's calls in place in the FFI handler (ffi/collective_ffi.cc), for XLA's own
// all-reduces (JAX_ACCL_XLA_COLLECTIVES=1) in mpiabi/calls.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accl {

// Whether XLA's float32 sum all-reduces travel as bfloat16: the job's, set at its start.
bool& xla_wire_bf16_setting();

void narrow_f32_to_bf16(uint16_t* dst, const float* src, size_t count);
void widen_bf16_to_f32(float* dst, const uint16_t* src, size_t count);

// In place: `count` float32 values at `data` become `count` bfloat16 values at its start,
// and back (the other half of the buffer unused between the two). Block by block through
// a small buffer, so the loops stay vectorised where source and destination overlap.
void narrow_in_place(void* data, size_t count);
void widen_in_place(void* data, size_t count);

}  // namespace accl
