#include "reduce/reduce.h"

#include <atomic>

// ACCL_AVX2_KERNELS: the build compiled kernels_avx2.cc (x86-64 targets; CMakeLists.txt),
// picked at start-up where the CPU has AVX2, FMA and F16C. Elsewhere only the generic
// kernels exist (vectorised by the compiler for the target's baseline).
namespace accl {
namespace {

struct Kernels {
  ReduceFn (*lookup)(DType, ReduceOp);
  ReduceManyFn (*lookup_many)(DType, ReduceOp);
  void (*stream_copy)(void*, const void*, size_t);
  const char* isa;
};

Kernels pick() {
#ifdef ACCL_AVX2_KERNELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
      __builtin_cpu_supports("fma")) {
    return {kernels_avx2::lookup, kernels_avx2::lookup_many, kernels_avx2::stream_copy, "avx2"};
  }
#endif
  return {kernels_generic::lookup, kernels_generic::lookup_many, kernels_generic::stream_copy,
          "generic"};
}

const Kernels kKernels = pick();

}  // namespace

ReduceFn reduce_kernel(DType dtype, ReduceOp op) { return kKernels.lookup(dtype, op); }

ReduceManyFn reduce_many_kernel(DType dtype, ReduceOp op) {
  return kKernels.lookup_many(dtype, op);
}

void stream_copy(void* dst, const void* src, size_t bytes) {
  kKernels.stream_copy(dst, src, bytes);
}

void stream_fence() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_sfence();  // orders the non-temporal stores
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

const char* reduce_isa() { return kKernels.isa; }

}  // namespace accl
