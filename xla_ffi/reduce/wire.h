// bfloat16 on the wire for XLA's own float32 sums (JAX_ACCL_WIRE_DTYPE=bfloat16 with
// JAX_ACCL_XLA_COLLECTIVES=1; jax_accl's own calls convert in the program, see
// jax_accl/wire_dtype.py): the operand narrowed once to bfloat16 (round to nearest even,
// NaN kept quiet, as the bfloat16 reduce kernels and XLA's conversion round), the
// bfloat16 sum run, and its result widened back exactly.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accl {

// Whether XLA's float32 sum all-reduces travel as bfloat16: the job's, set at its start.
bool& xla_wire_bf16_setting();

void narrow_f32_to_bf16(uint16_t* dst, const float* src, size_t count);
void widen_bf16_to_f32(float* dst, const uint16_t* src, size_t count);

}  // namespace accl
