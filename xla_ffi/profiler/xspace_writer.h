// A serialized tensorflow.profiler.XSpace (tsl/profiler/protobuf/xplane.proto) with one
// plane, written field by field in the protobuf wire format: jax_accl needs no protobuf
// library for the few messages a plane of timed events takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accl {

struct XStatValue {
  std::string name;
  bool is_text = false;
  uint64_t number = 0;  // when !is_text
  std::string text;     // when is_text
};

struct XEventSpec {
  std::string name;
  int64_t start_ns = 0;  // on the profiler's clock (epoch ns, before XLA normalises it)
  int64_t end_ns = 0;
  std::vector<XStatValue> stats;
};

struct XLineSpec {
  int64_t id = 0;
  std::string name;
  std::vector<XEventSpec> events;  // any order
};

// The XSpace of one plane `plane_name` (id `plane_id`) holding `lines`; event and stat
// metadata are numbered in order of first use.
std::string serialize_xspace(int64_t plane_id, const std::string& plane_name,
                             const std::vector<XLineSpec>& lines);

}  // namespace accl
