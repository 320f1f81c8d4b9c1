#include "reduce/wire.h"

namespace accl {

bool& xla_wire_bf16_setting() {
  static bool on = false;
  return on;
}

}  // namespace accl
