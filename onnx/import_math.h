/// \file
/// Pointwise formulas ONNX has and Ember's ops do not (internal to
/// ember_onnx): the inverse and hyperbolic trigonometric functions, erf,
/// rounding, sign, modulo, bit shifts and the wrap-around of narrow integer
/// types. Each is a functor in the form of ops/functors.h, registered for the
/// CPU in import_math.cpp; import_helpers.h runs them on any device and
/// records the differentiable ones' backward.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <ember/ops/pointwise_register.h>

namespace ember::onnx::detail::fn {

#define EMBER_ONNX_UNARY(Name, str, integral, expr) \
  struct Name {                                     \
    EMBER_FUNCTOR_MEMBERS(str, integral)            \
    template <class T>                              \
    T operator()(T x) const {                       \
      return expr;                                  \
    }                                               \
  };

EMBER_ONNX_UNARY(Tan, "onnx_tan", false, std::tan(x))
EMBER_ONNX_UNARY(Asin, "onnx_asin", false, std::asin(x))
EMBER_ONNX_UNARY(Acos, "onnx_acos", false, std::acos(x))
EMBER_ONNX_UNARY(Atan, "onnx_atan", false, std::atan(x))
EMBER_ONNX_UNARY(Sinh, "onnx_sinh", false, std::sinh(x))
EMBER_ONNX_UNARY(Cosh, "onnx_cosh", false, std::cosh(x))
EMBER_ONNX_UNARY(Asinh, "onnx_asinh", false, std::asinh(x))
EMBER_ONNX_UNARY(Acosh, "onnx_acosh", false, std::acosh(x))
EMBER_ONNX_UNARY(Atanh, "onnx_atanh", false, std::atanh(x))
EMBER_ONNX_UNARY(Erf, "onnx_erf", false, std::erf(x))
EMBER_ONNX_UNARY(Floor, "onnx_floor", false, std::floor(x))
EMBER_ONNX_UNARY(Ceil, "onnx_ceil", false, std::ceil(x))
// Halves to even, as ONNX's Round (and numpy.round): nearbyint in the default rounding mode.
EMBER_ONNX_UNARY(Round, "onnx_round", false, std::nearbyint(x))
EMBER_ONNX_UNARY(Trunc, "onnx_trunc", false, std::trunc(x))
EMBER_ONNX_UNARY(Sign, "onnx_sign", true, static_cast<T>((x > T(0)) - (x < T(0))))
#undef EMBER_ONNX_UNARY

// An integer held in int64 reduced to the a-bit type it came from (b = 1: signed), two's complement as
// ONNX's narrower integer types wrap.
struct WrapInt {
  EMBER_FUNCTOR_MEMBERS("onnx_wrap_int", true)
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      const int bits = static_cast<int>(a);
      if (bits >= 64) return x;
      const uint64_t mask = (uint64_t{1} << bits) - 1;
      uint64_t u = static_cast<uint64_t>(x) & mask;
      if (b != 0 && (u >> (bits - 1)) != 0) u |= ~mask;  // sign-extend
      return static_cast<T>(static_cast<int64_t>(u));
    } else {
      return x;
    }
  }
};

// x mod y with the divisor's sign (ONNX Mod with fmod = 0, Python's %), and C's fmod with the dividend's
// (fmod = 1). Integer division by zero, which ONNX leaves undefined, gives 0 rather than a trap.
struct ModFloor {
  EMBER_FUNCTOR_MEMBERS("onnx_mod", true)
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == 0 || y == -1) return 0;
      T r = x % y;
      return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
    } else {
      T r = std::fmod(x, y);
      return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? r + y : r;
    }
  }
};
struct ModTrunc {
  EMBER_FUNCTOR_MEMBERS("onnx_fmod", true)
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return (y == 0 || y == -1) ? 0 : x % y;
    } else {
      return std::fmod(x, y);
    }
  }
};

// Shifts of unsigned values held in int64 (a = 1: left); a shift of 64 or more gives 0, as a shift through
// every bit would.
struct BitShift {
  EMBER_FUNCTOR_MEMBERS("onnx_bitshift", true)
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      const uint64_t u = static_cast<uint64_t>(x);
      if (y < 0 || y >= 64) return 0;
      return static_cast<T>(a != 0 ? u << y : u >> y);
    } else {
      return x;
    }
  }
};

}  // namespace ember::onnx::detail::fn
