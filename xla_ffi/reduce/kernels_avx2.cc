#define ACCL_KERNEL_NS kernels_avx2
#include "reduce/kernels.inc"
