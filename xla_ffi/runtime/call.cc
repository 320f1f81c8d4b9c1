#include "runtime/call.h"

#include "common/hash.h"
#include "runtime/collective.h"

namespace accl {

size_t CallKeyHash::operator()(const CallKey& k) const {
  return Fnv64()
      .mix(static_cast<uint64_t>(k.run_id))
      .mix(static_cast<uint64_t>(k.op_id))
      .mix(static_cast<uint64_t>(k.group))
      .mix(k.seq)
      .value();
}

std::string describe(const Signature& s) {
  return str_cat(
      collective_row(s.collective).what(s.op), " of ", s.count, " x ", dtype_name(s.dtype),
      s.segments == 1 ? "" : str_cat(" in ", s.segments, " buffers"),
      s.wire_bf16 ? " as bfloat16 on the wire" : "", " (", algorithm_name(s.algorithm), ")");
}

void describe_layout(const std::vector<uint64_t>& counts, Signature* s) {
  s->count = 0;
  s->segments = static_cast<uint32_t>(counts.size());
  Fnv64 h;
  for (uint64_t c : counts) {
    s->count += c;
    h.mix(c);
  }
  s->layout_hash = h.value();
}

}  // namespace accl
