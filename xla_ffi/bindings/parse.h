// Names from Python (dtype, op, algorithm) to native enums for the binding files;
// an unknown name raises ValueError.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

namespace accl {

template <typename T, typename Parse>
T parse_or_throw(const std::string& name, Parse parse, const char* what) {
  T value;
  if (!parse(name, &value)) {
    throw nanobind::value_error((std::string("unknown ") + what + ": " + name).c_str());
  }
  return value;
}

}  // namespace accl
