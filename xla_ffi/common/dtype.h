// Element types and reduction operators understood by the native core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace accl {

enum class DType : uint8_t {
  kBool,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kC128,
};
inline constexpr int kNumDTypes = 15;

enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax };
inline constexpr int kNumReduceOps = 4;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* reduce_op_name(ReduceOp op);
// Parse the names Python uses (numpy dtype names; "sum", "prod", "min", "max").
bool parse_dtype(std::string_view name, DType* out);
bool parse_reduce_op(std::string_view name, ReduceOp* out);

}  // namespace accl
