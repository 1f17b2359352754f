/// \file
/// Scalar formulas of the elementwise ops, written once and expanded into
/// every backend's kernels: the CPU loops (ops/elementwise.cpp) and the CUDA
/// kernels (cuda/) instantiate the same functor. Each functor carries its
/// name (for errors and the profiler), whether it accepts integer dtypes, and
/// up to two double parameters (a, b) for ops like clamp or x * scalar.
///
/// Kept to C++17 and free of host-only calls, so nvcc and the CUDA emulation
/// build compile it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <ember/core/hostdevice.h>
#include <ember/ops/fast_math.h>

namespace ember::fn {

/// Host/device math (`hd::exp`, ...): the overload that is right on the host
/// and on a device, and on the host in float32 the inline, vectorisable
/// ones of fast_math.h.
namespace hd {
/// Math that resolves to the right overload on host and device.
///@{
template <class T>
EMBER_HD inline T exp(T x) {
  return std::exp(x);
}
template <class T>
EMBER_HD inline T log(T x) {
  return std::log(x);
}
template <class T>
EMBER_HD inline T sqrt(T x) {
  return std::sqrt(x);
}
template <class T>
EMBER_HD inline T tanh(T x) {
  return std::tanh(x);
}
template <class T>
EMBER_HD inline T erf(T x) {
  return std::erf(x);
}
template <class T>
EMBER_HD inline T log1p(T x) {
  return std::log1p(x);
}
template <class T>
EMBER_HD inline T sin(T x) {
  return std::sin(x);
}
template <class T>
EMBER_HD inline T cos(T x) {
  return std::cos(x);
}
template <class T>
EMBER_HD inline T pow(T x, T y) {
  return std::pow(x, y);
}
template <class T>
EMBER_HD inline T abs(T x) {
  return x < T(0) ? -x : x;
}
///@}
/// GELU's erf: on the host in float32 the inline one of fast_math.h, so the
/// GELU loops vectorise; elsewhere the library's.
template <class T>
EMBER_HD inline T gelu_erf(T x) {
  return std::erf(x);
}
/// GELU's derivative Phi(x) + x phi(x), Phi and phi the standard normal's
/// cdf and density.
template <class T>
EMBER_HD inline T gelu_grad(T x) {
  const T cdf = T(0.5) * (T(1) + gelu_erf(x * T(0.70710678118654752440)));
  const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}
#if !defined(__CUDA_ARCH__)
/// Host float32: erf(x / sqrt 2) computes exp(-x^2 / 2), which is phi's
/// exponential too: one exp per element instead of two.
template <>
EMBER_FAST_INLINE float gelu_grad<float>(float x) {
  float e;
  const float erf = fast::erff(x * 0.70710678118654752440f, e);
  return 0.5f * (1.0f + erf) + x * 0.39894228040143267794f * e;
}
/// Host float32 exp: inline and vectorisable (fast_math.h, under 2 ulp).
///@{
template <>
EMBER_FAST_INLINE float exp<float>(float x) {
  return fast::expf(x);
}
template <>
EMBER_FAST_INLINE float gelu_erf<float>(float x) {
  return fast::erff(x);
}
///@}
/// Host float32 tanh: inline and vectorisable (fast_math.h, under 4 ulp).
template <>
EMBER_FAST_INLINE float tanh<float>(float x) {
  return fast::tanhf(x);
}
#endif
}  // namespace hd

/// \cond functors
// The functor structs below are the scalar formulas behind the ops of
// elementwise.h and activation.h (documented there); the reference leaves
// them out, the comments here give each one's math.
#define EMBER_FUNCTOR_HEAD(Name, str, integral) \
  static constexpr const char* name = str;      \
  static constexpr bool kIntegral = integral;   \
  double a = 0, b = 0;

// ---- unary: y = f(x; a, b) --------------------------------------------------
// Integer +, - and * wrap around (two's complement), as PyTorch's do: computed in the unsigned type, where
// overflow is defined, instead of the signed one, where it is undefined behaviour.
template <class T>
EMBER_HD T wrapping_add(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
  } else {
    return x + y;
  }
}
template <class T>
EMBER_HD T wrapping_sub(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
  } else {
    return x - y;
  }
}
template <class T>
EMBER_HD T wrapping_mul(T x, T y) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    return x * y;
  }
}

struct Neg {
  EMBER_FUNCTOR_HEAD(Neg, "neg", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return wrapping_sub(T(0), x);
    else
      return -x;  // (0 - x would turn -0.0 into +0.0)
  }
};
struct Abs {
  EMBER_FUNCTOR_HEAD(Abs, "abs", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::abs(x);
  }
};
struct Exp {
  EMBER_FUNCTOR_HEAD(Exp, "exp", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::exp(x);
  }
};
struct Log {
  EMBER_FUNCTOR_HEAD(Log, "log", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::log(x);
  }
};
struct Sqrt {
  EMBER_FUNCTOR_HEAD(Sqrt, "sqrt", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::sqrt(x);
  }
};
struct Rsqrt {
  EMBER_FUNCTOR_HEAD(Rsqrt, "rsqrt", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return T(1) / hd::sqrt(x);
  }
};
struct Sin {
  EMBER_FUNCTOR_HEAD(Sin, "sin", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::sin(x);
  }
};
struct Cos {
  EMBER_FUNCTOR_HEAD(Cos, "cos", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::cos(x);
  }
};
struct Tanh {
  EMBER_FUNCTOR_HEAD(Tanh, "tanh", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return hd::tanh(x);
  }
};
// Stable for large |x|: exp only ever of a non-positive number. One exp and
// a select (no branch around two calls), so the float32 loop vectorises:
// with e = exp(-|x|), sigmoid = 1 / (1 + e) for x >= 0 and e / (1 + e) below.
struct Sigmoid {
  EMBER_FUNCTOR_HEAD(Sigmoid, "sigmoid", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    const T e = hd::exp(x < T(0) ? x : -x);
    const T s = T(1) / (T(1) + e);
    return x >= T(0) ? s : e * s;
  }
};
struct Relu {
  EMBER_FUNCTOR_HEAD(Relu, "relu", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return x > T(0) ? x : T(0);
  }
};
struct Silu {
  EMBER_FUNCTOR_HEAD(Silu, "silu", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return x * Sigmoid{}(x);
  }
};
// gelu(x) = x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))
struct Gelu {
  EMBER_FUNCTOR_HEAD(Gelu, "gelu", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return T(0.5) * x * (T(1) + hd::gelu_erf(x * T(0.70710678118654752440)));
  }
};
// PyTorch's approximate="tanh": x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
struct GeluTanh {
  EMBER_FUNCTOR_HEAD(GeluTanh, "gelu_tanh", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    const T k = T(0.79788456080286535588);
    return T(0.5) * x * (T(1) + hd::tanh(k * (x + T(0.044715) * x * x * x)));
  }
};
// softplus(x) = log(1 + exp(beta x)) / beta, linear above threshold (a=beta, b=threshold).
struct Softplus {
  EMBER_FUNCTOR_HEAD(Softplus, "softplus", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    const T bx = T(a) * x;
    if (bx > T(b)) return x;
    return (bx > T(0) ? bx + hd::log1p(hd::exp(-bx)) : hd::log1p(hd::exp(bx))) / T(a);
  }
};
// clamp to [a, b]; a = -inf or b = +inf leaves that side open.
struct Clamp {
  EMBER_FUNCTOR_HEAD(Clamp, "clamp", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    const T lo = static_cast<T>(a), hi = static_cast<T>(b);
    return x < lo ? lo : (x > hi ? hi : x);
  }
};
struct AddScalar {
  EMBER_FUNCTOR_HEAD(AddScalar, "add", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return wrapping_add(x, static_cast<T>(a));
  }
};
struct MulScalar {
  EMBER_FUNCTOR_HEAD(MulScalar, "mul", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return wrapping_mul(x, static_cast<T>(a));
  }
};
struct RsubScalar {
  EMBER_FUNCTOR_HEAD(RsubScalar, "sub", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return wrapping_sub(static_cast<T>(a), x);
  }
};
struct RdivScalar {
  EMBER_FUNCTOR_HEAD(RdivScalar, "div", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return static_cast<T>(a) / x;
  }
};
struct PowScalar {
  EMBER_FUNCTOR_HEAD(PowScalar, "pow", false)
  template <class T>
  EMBER_HD T operator()(T x) const {
    if (a == 2.0) return x * x;
    if (a == 1.0) return x;
    if (a == 0.5) return hd::sqrt(x);
    return hd::pow(x, static_cast<T>(a));
  }
};

// ---- binary: z = f(x, y; a, b) ----------------------------------------------
struct Add {
  EMBER_FUNCTOR_HEAD(Add, "add", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return wrapping_add(x, y);
  }
};
struct Sub {
  EMBER_FUNCTOR_HEAD(Sub, "sub", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return wrapping_sub(x, y);
  }
};
struct Mul {
  EMBER_FUNCTOR_HEAD(Mul, "mul", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return wrapping_mul(x, y);
  }
};
struct Div {
  EMBER_FUNCTOR_HEAD(Div, "div", false)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return x / y;
  }
};
struct Pow {
  EMBER_FUNCTOR_HEAD(Pow, "pow", false)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return hd::pow(x, y);
  }
};
// NaN-propagating, as torch.maximum / torch.minimum.
struct Maximum {
  EMBER_FUNCTOR_HEAD(Maximum, "maximum", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return (x != x || x > y) ? x : y;
  }
};
struct Minimum {
  EMBER_FUNCTOR_HEAD(Minimum, "minimum", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return (x != x || x < y) ? x : y;
  }
};
// Rounding division's remainders, as torch.remainder (the divisor's sign,
// Python's %) and torch.fmod (the dividend's sign, C's fmod). Integers: C++'s
// % truncates, as fmod; the op checks for a zero divisor before the kernel
// runs, and x % -1 is 0 here (INT64_MIN % -1 would overflow).
template <class T>
EMBER_HD T fmod_of(T x, T y) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return y == T(-1) ? T(0) : x % y;
  } else if constexpr (std::is_integral_v<T>) {
    return x % y;
  } else {
    return std::fmod(x, y);
  }
}
template <class T>
EMBER_HD T remainder_of(T x, T y) {
  const T r = fmod_of(x, y);
  return (r != T(0) && ((r < T(0)) != (y < T(0)))) ? r + y : r;
}
struct Floor {
  EMBER_FUNCTOR_HEAD(Floor, "floor", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x;
    else
      return std::floor(x);
  }
};
struct Remainder {
  EMBER_FUNCTOR_HEAD(Remainder, "remainder", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return remainder_of(x, y);
  }
};
struct Fmod {
  EMBER_FUNCTOR_HEAD(Fmod, "fmod", true)
  template <class T>
  EMBER_HD T operator()(T x, T y) const {
    return fmod_of(x, y);
  }
};
// The divisor a as a scalar (converted to the input's dtype, as PyTorch does
// for a Python number).
struct RemainderScalar {
  EMBER_FUNCTOR_HEAD(RemainderScalar, "remainder_scalar", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return remainder_of(x, static_cast<T>(a));
  }
};
struct FmodScalar {
  EMBER_FUNCTOR_HEAD(FmodScalar, "fmod_scalar", true)
  template <class T>
  EMBER_HD T operator()(T x) const {
    return fmod_of(x, static_cast<T>(a));
  }
};

// Backward formulas fused into one pass: (gy, x) -> gx.
struct ReluBackward {
  EMBER_FUNCTOR_HEAD(ReluBackward, "relu_backward", true)
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    return x > T(0) ? g : T(0);
  }
};
// d/dx sigmoid = y (1 - y), from the saved output y.
struct SigmoidBackward {
  EMBER_FUNCTOR_HEAD(SigmoidBackward, "sigmoid_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T y) const {
    return g * y * (T(1) - y);
  }
};
// d/dx tanh = 1 - y^2, from the saved output y.
struct TanhBackward {
  EMBER_FUNCTOR_HEAD(TanhBackward, "tanh_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T y) const {
    return g * (T(1) - y * y);
  }
};
// d/dx x s(x) = s(x) (1 + x (1 - s(x))).
struct SiluBackward {
  EMBER_FUNCTOR_HEAD(SiluBackward, "silu_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    const T s = Sigmoid{}(x);
    return g * s * (T(1) + x * (T(1) - s));
  }
};
// d/dx x Phi(x) = Phi(x) + x phi(x)   (term 1: Phi, term 2: x phi).
struct GeluBackward {
  EMBER_FUNCTOR_HEAD(GeluBackward, "gelu_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    return g * hd::gelu_grad(x);
  }
};
// With u = k (x + c x^3) and t = tanh u:
// d/dx x/2 (1 + t) = 1/2 (1 + t) + x/2 (1 - t^2) k (1 + 3 c x^2).
struct GeluTanhBackward {
  EMBER_FUNCTOR_HEAD(GeluTanhBackward, "gelu_tanh_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    const T k = T(0.79788456080286535588), c = T(0.044715);
    const T t = hd::tanh(k * (x + c * x * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
  }
};
// d/dx softplus = sigmoid(beta x), except 1 above the threshold (a=beta, b=threshold).
struct SoftplusBackward {
  EMBER_FUNCTOR_HEAD(SoftplusBackward, "softplus_backward", false)
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    const T bx = T(a) * x;
    return bx > T(b) ? g : g * Sigmoid{}(bx);
  }
};

// ---- comparisons: bool z = f(x, y) ------------------------------------------
struct Eq {
  static constexpr const char* name = "eq";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x == y;
  }
};
struct Ne {
  static constexpr const char* name = "ne";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x != y;
  }
};
struct Lt {
  static constexpr const char* name = "lt";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x < y;
  }
};
struct Le {
  static constexpr const char* name = "le";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x <= y;
  }
};
struct Gt {
  static constexpr const char* name = "gt";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x > y;
  }
};
struct Ge {
  static constexpr const char* name = "ge";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x >= y;
  }
};
struct LogicalAnd {
  static constexpr const char* name = "logical_and";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x && y;
  }
};
struct LogicalOr {
  static constexpr const char* name = "logical_or";
  template <class T>
  EMBER_HD bool operator()(T x, T y) const {
    return x || y;
  }
};

/// \endcond
#undef EMBER_FUNCTOR_HEAD

// (clang-format does not settle on these lists of macro calls)
// clang-format off
/// The lists every backend expands to register one kernel per functor.
///@{
#define EMBER_UNARY_FUNCTORS(X)                                                                              \
  X(Neg)                                                                                                     \
  X(Abs) X(Exp) X(Log) X(Sqrt) X(Rsqrt) X(Sin) X(Cos) X(Tanh) X(Sigmoid) X(Relu) X(Silu) X(Gelu) X(GeluTanh) \
      X(Softplus) X(Clamp) X(AddScalar) X(MulScalar) X(RsubScalar) X(RdivScalar) X(PowScalar) X(Floor)             \
      X(RemainderScalar) X(FmodScalar)
#define EMBER_BINARY_FUNCTORS(X)                                                                                       \
  X(Add)                                                                                                               \
  X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(ReluBackward) X(SigmoidBackward) X(TanhBackward) X(SiluBackward) \
      X(GeluBackward) X(GeluTanhBackward) X(SoftplusBackward) X(Remainder) X(Fmod)
#define EMBER_COMPARE_FUNCTORS(X) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) X(LogicalAnd) X(LogicalOr)
// clang-format on
///@}

}  // namespace ember::fn
