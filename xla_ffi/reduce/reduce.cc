#include "reduce/reduce.h"

#include <atomic>

#ifdef ACCL_AVX2_KERNELS
#include <cpuid.h>
#endif

// ACCL_AVX2_KERNELS: the build compiled kernels_avx2.cc (x86-64 targets; CMakeLists.txt),
// picked at start-up where the CPU has AVX2, FMA and F16C. Elsewhere only the generic
// kernels exist (vectorised by the compiler for the target's baseline).
namespace accl {
namespace {

struct Kernels {
  ReduceFn (*lookup)(DType, ReduceOp);
  ReduceManyFn (*lookup_many)(DType, ReduceOp);
  void (*stream_copy)(void*, const void*, size_t);
  const WireKernels& (*wire)();
  const char* isa;
};

#ifdef ACCL_AVX2_KERNELS
// Whether the CPU has AVX2, FMA and F16C (CPUID) and the kernel saves the YMM registers
// (XGETBV: XMM and YMM state enabled), asked directly: __builtin_cpu_supports relies on
// the compiler's runtime filling __cpu_model, which the wheel's (zig's compiler_rt) leaves
// empty, so there it said no on every CPU.
bool cpu_runs_avx2_kernels() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned leaf1 = bit_FMA | bit_F16C | bit_AVX | bit_OSXSAVE;
  if ((ecx & leaf1) != leaf1) return false;
  unsigned xcr0_low, xcr0_high;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 0x6) != 0x6) return false;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (ebx & bit_AVX2) != 0;
}
#endif

Kernels pick() {
#ifdef ACCL_AVX2_KERNELS
  if (cpu_runs_avx2_kernels()) {
    return {kernels_avx2::lookup, kernels_avx2::lookup_many, kernels_avx2::stream_copy,
            kernels_avx2::wire, "avx2"};
  }
#endif
  return {kernels_generic::lookup, kernels_generic::lookup_many, kernels_generic::stream_copy,
          kernels_generic::wire, "generic"};
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

const WireKernels& wire_kernels() { return kKernels.wire(); }

const char* reduce_isa() { return kKernels.isa; }

}  // namespace accl
