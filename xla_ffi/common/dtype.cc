#include "common/dtype.h"

namespace accl {
namespace {
struct DTypeInfo {
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[kNumDTypes] = {
    {"bool", 1},     {"int8", 1},    {"int16", 2},   {"int32", 4},     {"int64", 8},
    {"uint8", 1},    {"uint16", 2},  {"uint32", 4},  {"uint64", 8},    {"float16", 2},
    {"bfloat16", 2}, {"float32", 4}, {"float64", 8}, {"complex64", 8}, {"complex128", 16},
};
constexpr const char* kOps[kNumReduceOps] = {"sum", "prod", "min", "max"};
}  // namespace

size_t dtype_size(DType dtype) { return kDTypes[static_cast<int>(dtype)].size; }
const char* dtype_name(DType dtype) { return kDTypes[static_cast<int>(dtype)].name; }
const char* reduce_op_name(ReduceOp op) { return kOps[static_cast<int>(op)]; }

bool parse_dtype(std::string_view name, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (name == kDTypes[i].name) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

bool parse_reduce_op(std::string_view name, ReduceOp* out) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (name == kOps[i]) {
      *out = static_cast<ReduceOp>(i);
      return true;
    }
  }
  return false;
}

}  // namespace accl
