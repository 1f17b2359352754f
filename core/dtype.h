/// \file
/// Element types: float32 (the default), float64 (gradchecks), int64 (indices,
/// labels) and bool (masks); their sizes, names and promotion rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace ember {

/// Ordered by promotion rank: a binary op on two dtypes yields the larger.
enum class DType : uint8_t { Bool = 0, Int64 = 1, Float32 = 2, Float64 = 3 };

/// Short names of the dtypes, as PyTorch's torch.float32 etc.
///@{
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
///@}

/// Bytes per element.
constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool: return 1;
    case DType::Int64: return 8;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
  }
  return 0;
}

/// "float32", "float64", "int64" or "bool", as error messages write them.
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

/// float32 or float64: the dtypes that can carry gradients.
constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

/// PyTorch's promotion for two tensors of the same "dimensionality class":
/// bool < int64 < float32 < float64.
constexpr DType promote_types(DType a, DType b) { return a > b ? a : b; }

/// Prints dtype_name().
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

/// The DType of a C++ element type T (bool, int64_t, float or double):
/// dtype_of<T>::value, or dtype_of_v<T>.
template <class T> struct dtype_of;
/// \cond specialisations
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
/// \endcond
/// dtype_of<T>::value.
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace ember
