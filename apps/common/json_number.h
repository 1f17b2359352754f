// Numbers in the JSON the apps store in checkpoint metadata, NaN and the
// infinities included. JSON has no spelling for them and nlohmann writes
// them as null, which reads back as no number at all: a run whose loss went
// NaN saved a checkpoint it could not resume. They are stored as the strings
// "nan", "inf" and "-inf" (Python's float() reads these back, as does
// json_number_value) and every finite number as the number it is. Header
// only, on nlohmann-json alone: vit_run_config.cpp, which the tests and a
// fuzz target build without the apps' other code, uses it too.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ember::app {

/// x as stored JSON: a number when finite, else "nan", "inf" or "-inf".
inline nlohmann::json json_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

/// A value written by json_number (or any JSON number): the double, or none
/// for anything else (a null, another string, an array), for the caller's
/// message naming the file and the field.
template <class Json>
std::optional<double> json_number_value(const Json& v) {
  if (v.is_number()) return v.template get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.template get_ref<const std::string&>();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

}  // namespace ember::app
