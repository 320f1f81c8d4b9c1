#include "reduce/wire.h"

#include <cstring>

namespace accl {

bool& xla_wire_bf16_setting() {
  static bool on = false;
  return on;
}

// Branch-free per element, so the compiler vectorises both loops.
void narrow_f32_to_bf16(uint16_t* dst, const float* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], 4);
    const uint32_t nearest_even = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (bits >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest_even);
  }
}

void widen_bf16_to_f32(float* dst, const uint16_t* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &bits, 4);
  }
}

}  // namespace accl
