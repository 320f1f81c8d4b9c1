#include "reduce/reduce.h"

namespace accl {
namespace {
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("fma");
}
const bool kHasAvx2 = cpu_has_avx2();
}  // namespace

ReduceFn reduce_kernel(DType dtype, ReduceOp op) {
  return kHasAvx2 ? kernels_avx2::lookup(dtype, op) : kernels_generic::lookup(dtype, op);
}

ReduceManyFn reduce_many_kernel(DType dtype, ReduceOp op) {
  return kHasAvx2 ? kernels_avx2::lookup_many(dtype, op) : kernels_generic::lookup_many(dtype, op);
}

void stream_copy(void* dst, const void* src, size_t bytes) {
  if (kHasAvx2) {
    kernels_avx2::stream_copy(dst, src, bytes);
  } else {
    kernels_generic::stream_copy(dst, src, bytes);
  }
}

void stream_fence() { __builtin_ia32_sfence(); }

const char* reduce_isa() { return kHasAvx2 ? "avx2" : "generic"; }

}  // namespace accl
