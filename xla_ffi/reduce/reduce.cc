#include "reduce/reduce.h"

namespace accl {
namespace {
bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("fma");
}
}  // namespace

ReduceFn reduce_kernel(DType dtype, ReduceOp op) {
  static const bool avx2 = cpu_has_avx2();
  return avx2 ? kernels_avx2::lookup(dtype, op) : kernels_generic::lookup(dtype, op);
}

const char* reduce_isa() { return __builtin_cpu_supports("avx2") ? "avx2" : "generic"; }

}  // namespace accl
