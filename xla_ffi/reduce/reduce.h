// Typed element-wise reduce kernels behind one dispatch table: dst[i] = a[i] op b[i].
// dst may alias a or b. Integers wrap around (two's complement) exactly like XLA;
// float16/bfloat16 are computed in float32 and rounded to nearest-even per step;
// min/max propagate NaN as XLA's max/min do. On x86-64 the kernels are compiled twice,
// for AVX2+F16C and for the baseline, and the best one is picked at start-up; elsewhere
// once, for the target's baseline.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace accl {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[k-1][i], folded left to right (k >= 2).
using ReduceManyFn = void (*)(void* dst, const void* const* srcs, int k, size_t count);

// The kernel for (dtype, op), or nullptr where jax.lax has no such reduction
// (min/max of complex numbers).
ReduceFn reduce_kernel(DType dtype, ReduceOp op);
// A one-pass kernel over k inputs, bit-identical to folding with reduce_kernel, where
// there is one (sums of integers, float32 and float64); nullptr otherwise.
ReduceManyFn reduce_many_kernel(DType dtype, ReduceOp op);

// bfloat16 on the wire (reduce/wire.h): kernels over float32 buffers whose values the call
// keeps rounded to bfloat16 (to nearest even, NaN made quiet), and over its bfloat16
// messages. Each rounds every float32 input first (a no-op on a value rounded before), so
// an operand is rounded where it is first read: no pass over the buffer of its own.
struct WireKernels {
  void (*narrow)(uint16_t* dst, const float* src, size_t count);  // float32 -> bfloat16
  void (*widen)(float* dst, const uint16_t* src, size_t count);   // exact
  void (*round)(void* dst, const void* src, size_t count);        // float32 -> float32
  // The bfloat16 sum: dst = round(round(a) + round(b)), a, b and dst float32.
  ReduceFn sum;
  ReduceManyFn sum_many;  // folded left to right, as folding `sum`
  // A received message: dst = round(round(a) + b), b bfloat16; and dst = b widened.
  ReduceFn sum_message;
  ReduceFn widen_message;
};
const WireKernels& wire_kernels();

// memcpy with non-temporal stores where the CPU has them (for data nobody reads soon);
// call stream_fence() before publishing that the copies are complete.
void stream_copy(void* dst, const void* src, size_t bytes);
void stream_fence();

// Which instruction set the dispatch table uses ("avx2" or "generic").
const char* reduce_isa();

// The kernels of one build; reduce.cc picks between these two tables.
namespace kernels_avx2 {
ReduceFn lookup(DType dtype, ReduceOp op);
ReduceManyFn lookup_many(DType dtype, ReduceOp op);
void stream_copy(void* dst, const void* src, size_t bytes);
const WireKernels& wire();
}  // namespace kernels_avx2
namespace kernels_generic {
ReduceFn lookup(DType dtype, ReduceOp op);
ReduceManyFn lookup_many(DType dtype, ReduceOp op);
void stream_copy(void* dst, const void* src, size_t bytes);
const WireKernels& wire();
}  // namespace kernels_generic

}  // namespace accl
