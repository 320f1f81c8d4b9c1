#include "common/knobs.h"

#include <cstdlib>

namespace accl {
namespace {
Knobs read_knobs() {
  Knobs k;
  if (const char* v = std::getenv("JAX_ACCL_TIMEOUT_S"); v != nullptr && *v != '\0') {
    double seconds = std::strtod(v, nullptr);
    if (seconds > 0) k.timeout_s = seconds;
  }
  if (const char* v = std::getenv("JAX_ACCL_ALGORITHM"); v != nullptr && *v != '\0') {
    k.algorithm = v;
  }
  return k;
}
}  // namespace

const Knobs& knobs() {
  static const Knobs k = read_knobs();
  return k;
}

}  // namespace accl
