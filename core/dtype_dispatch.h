/// \file
/// Runs a generic lambda with the C++ type of a runtime dtype:
/// \code
///   dispatch_floating(t.dtype(), "exp", [&](auto tag) { using T = decltype(tag); ... });
/// \endcode
/// An unsupported dtype throws DTypeError naming the op.
///
/// The 16-bit floats (core/half.h) are dispatched only where a kernel has
/// opted in: dispatch_floating_and_half and dispatch_all pass bfloat16 and
/// float16 (kernels compute in opmath_t<T>); dispatch_floating and
/// dispatch_numeric refuse them with a DTypeError naming the op and dtype,
/// which the op layer avoids by computing such ops in float32 (with_float32
/// in ops/half_ops.h).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include <ember/core/dtype.h>
#include <ember/core/error.h>
#include <ember/core/half.h>

namespace ember {

namespace detail {
[[noreturn]] inline void throw_no_half_kernel(DType dt, const char* op) {
  throw DTypeError(
      cat_str(op, ": no kernel for ", dtype_name(dt), " tensors here; convert with .to(kFloat32) (docs/PRECISION.md)"));
}
}  // namespace detail

/// Calls f(T{}) with T = float or double for a floating dtype; throws DTypeError naming op otherwise.
template <class F>
decltype(auto) dispatch_floating(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::BFloat16:
    case DType::Float16:
      detail::throw_no_half_kernel(dt, op);
    default:
      throw DTypeError(
          detail::cat_str(op, ": expected a floating-point tensor (float32 or float64), got ", dtype_name(dt)));
  }
}

/// float32, float64 and int64.
template <class F>
decltype(auto) dispatch_numeric(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::BFloat16:
    case DType::Float16:
      detail::throw_no_half_kernel(dt, op);
    default:
      throw DTypeError(detail::cat_str(op, ": not supported for dtype ", dtype_name(dt)));
  }
}

/// Calls f(T{}) with T = float, double, bfloat16 or float16; throws
/// DTypeError naming op otherwise.
template <class F>
decltype(auto) dispatch_floating_and_half(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::BFloat16:
      return f(bfloat16{});
    case DType::Float16:
      return f(float16{});
    default:
      throw DTypeError(detail::cat_str(op, ": expected a floating-point tensor, got ", dtype_name(dt)));
  }
}

/// float32, float64, bfloat16, float16 and int64.
template <class F>
decltype(auto) dispatch_numeric_and_half(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::BFloat16:
      return f(bfloat16{});
    case DType::Float16:
      return f(float16{});
    default:
      throw DTypeError(detail::cat_str(op, ": not supported for dtype ", dtype_name(dt)));
  }
}

/// Element conversion between any two element types, the 16-bit floats
/// through float32 (as c10 converts them). A floating value outside an
/// integer type's range, NaN included, becomes the type's lowest value: what
/// x86's truncating conversion (and so PyTorch's CPU cast) gives, where C++
/// leaves the conversion undefined.
template <class D, class S>
EMBER_HD inline D convert_element(S v) {
  if constexpr (is_half_v<S> && is_half_v<D>) {
    return D(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool> &&
                       (is_half_v<S> || std::is_floating_point_v<S>)) {
    using F = std::conditional_t<std::is_same_v<S, double>, double, float>;
    const F f = static_cast<F>(v);
    constexpr F lim = static_cast<F>(std::numeric_limits<D>::max()) + F(1);  // 2^63 for int64_t, exactly
    return f >= -lim && f < lim ? static_cast<D>(f) : std::numeric_limits<D>::min();
  } else if constexpr (is_half_v<S>) {
    return static_cast<D>(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

/// Calls f(T{}) with T = float, double, int64_t, bool, bfloat16 or float16.
template <class F>
decltype(auto) dispatch_all(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int64:
      return f(int64_t{});
    case DType::Bool:
      return f(bool{});
    case DType::BFloat16:
      return f(bfloat16{});
    case DType::Float16:
      return f(float16{});
  }
  return f(float{});
}

}  // namespace ember
