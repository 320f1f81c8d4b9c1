#include "reduce/wire.h"

#include <cstring>

namespace accl {

bool& xla_wire_bf16_setting() {
  static bool on = false;
  return on;
}

// Branch-free per element, so the compiler vectorises both loops; compiled for AVX2 and
// the baseline, the best picked at load time (gcc's target_clones), on x86-64.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCL_WIRE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ACCL_WIRE_CLONES
#endif

ACCL_WIRE_CLONES void narrow_f32_to_bf16(uint16_t* __restrict dst, const float* __restrict src,
                                         size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], 4);
    const uint32_t nearest_even = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (bits >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest_even);
  }
}

ACCL_WIRE_CLONES void widen_bf16_to_f32(float* __restrict dst, const uint16_t* __restrict src,
                                        size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &bits, 4);
  }
}

namespace {
constexpr size_t kBlock = 4096;  // elements per block: 16 KiB of float32, in L1
}  // namespace

// Block b's bfloat16 values land on bytes [2·b·B, 2·(b+1)·B), below its float32 source
// from block 1 on and within block 0's own, read before it is written.
void narrow_in_place(void* data, size_t count) {
  uint16_t block[kBlock];
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = count - start < kBlock ? count - start : kBlock;
    narrow_f32_to_bf16(block, static_cast<const float*>(data) + start, n);
    std::memcpy(static_cast<uint16_t*>(data) + start, block, n * 2);
  }
}

// Last block first: block b's float32 values cover the bfloat16 of blocks 2b and 2b + 1,
// already widened; block 0 reads its own before writing.
void widen_in_place(void* data, size_t count) {
  float block[kBlock];
  for (size_t end = count; end > 0;) {
    const size_t start = end > kBlock ? end - kBlock : 0;
    widen_bf16_to_f32(block, static_cast<const uint16_t*>(data) + start, end - start);
    std::memcpy(static_cast<float*>(data) + start, block, (end - start) * 4);
    end = start;
  }
}

}  // namespace accl
