/// \file
/// Element types: float32 (the default), float64 (gradchecks), int64 (indices,
/// labels), bool (masks), and the 16-bit floats bfloat16 and float16
/// (core/half.h, docs/PRECISION.md); their sizes, names and promotion rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include <ember/core/half.h>

namespace ember {

/// The first four are ordered by promotion rank; the 16-bit floats came later
/// and are ranked by promote_types().
enum class DType : uint8_t { Bool = 0, Int64 = 1, Float32 = 2, Float64 = 3, BFloat16 = 4, Float16 = 5 };

/// Short names of the dtypes, as PyTorch's torch.float32 etc.
///@{
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat16 = DType::Float16;
///@}

/// Bytes per element.
constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::Int64:
      return 8;
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
    case DType::BFloat16:
      return 2;
    case DType::Float16:
      return 2;
  }
  return 0;
}

/// "float32", "float64", "int64", "bool", "bfloat16" or "float16", as PyTorch
/// prints them (torch.bfloat16, torch.float16).
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::Int64:
      return "int64";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float16:
      return "float16";
  }
  return "?";
}

/// The floating dtypes: the ones that can carry gradients.
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16 || t == DType::Float16;
}

/// bfloat16 or float16: stored in 16 bits, computed in float32.
constexpr bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

/// PyTorch's promotion (torch.promote_types) for two tensors of the same
/// "dimensionality class": bool < int64 < {bfloat16, float16} < float32 <
/// float64, and bfloat16 with float16 gives float32 (neither holds the
/// other: bfloat16 has the range, float16 the precision).
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_half(a) && is_half(b)) return DType::Float32;
  constexpr auto rank = [](DType t) {
    switch (t) {
      case DType::Bool:
        return 0;
      case DType::Int64:
        return 1;
      case DType::BFloat16:
      case DType::Float16:
        return 2;
      case DType::Float32:
        return 3;
      case DType::Float64:
        return 4;
    }
    return 0;
  };
  return rank(a) > rank(b) ? a : b;
}

/// Prints dtype_name().
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

/// The DType of a C++ element type T (bool, int64_t, float or double):
/// dtype_of<T>::value, or dtype_of_v<T>.
template <class T>
struct dtype_of;
/// \cond specialisations
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::Float16;
};
/// \endcond
/// dtype_of<T>::value.
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace ember
