#define ACCL_KERNEL_NS kernels_generic
#include "reduce/kernels.inc"
