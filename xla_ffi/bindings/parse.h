// Names from Python (dtype, op, algorithm, cost-model constants) to native values for
// the binding files; an unknown name raises ValueError.
#pragma once

#include <nanobind/nanobind.h>

#include <cmath>
#include <map>
#include <string>

#include "algorithms/select.h"

namespace accl {

template <typename T, typename Parse>
T parse_or_throw(const std::string& name, Parse parse, const char* what) {
  T value;
  if (!parse(name, &value)) {
    throw nanobind::value_error((std::string("unknown ") + what + ": " + name).c_str());
  }
  return value;
}

// The cost model's constants as Python sees them (calibrate.py stores these names).
struct CostModelField {
  const char* name;
  double CostModel::* member;
};
inline constexpr CostModelField kCostModelFields[] = {
    {"alpha", &CostModel::alpha_s},
    {"beta", &CostModel::beta_s_per_byte},
    {"gamma", &CostModel::gamma_s_per_byte},
    {"net_alpha", &CostModel::net_alpha_s},
    {"net_beta", &CostModel::net_beta_s_per_byte},
    {"net_step_bytes", &CostModel::net_step_bytes},
    {"shm_alpha", &CostModel::shm_alpha_s},
    {"shm_process_alpha", &CostModel::shm_process_alpha_s},
    {"shm_beta", &CostModel::shm_beta_s_per_byte},
    {"cma_beta", &CostModel::cma_beta_s_per_byte},
};

// `model` with the named constants set; an unknown name, or a value that is negative or
// not finite, raises ValueError.
inline CostModel with_constants(CostModel model, const std::map<std::string, double>& values) {
  for (const auto& [name, v] : values) {
    const CostModelField* field = nullptr;
    for (const CostModelField& f : kCostModelFields) {
      if (name == f.name) field = &f;
    }
    if (field == nullptr) {
      throw nanobind::value_error(("unknown cost-model constant: " + name).c_str());
    }
    if (!(v >= 0) || std::isinf(v)) {
      throw nanobind::value_error(
          ("cost-model constant " + name + " must be finite and >= 0").c_str());
    }
    model.*field->member = v;
  }
  return model;
}

}  // namespace accl
