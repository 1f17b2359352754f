/// \file
/// Runs a generic lambda with the C++ type of a runtime dtype:
/// \code
///   dispatch_floating(t.dtype(), "exp", [&](auto tag) { using T = decltype(tag); ... });
/// \endcode
/// An unsupported dtype throws DTypeError naming the op.
#pragma once

#include <cstdint>

#include <ember/core/dtype.h>
#include <ember/core/error.h>

namespace ember {

/// Calls f(T{}) with T = float or double for a floating dtype; throws DTypeError naming op otherwise.
template <class F>
decltype(auto) dispatch_floating(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default:
      throw DTypeError(detail::cat_str(op, ": expected a floating-point tensor (float32 or float64), got ",
                                       dtype_name(dt)));
  }
}

/// float32, float64 and int64.
template <class F>
decltype(auto) dispatch_numeric(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    default:
      throw DTypeError(detail::cat_str(op, ": not supported for dtype ", dtype_name(dt)));
  }
}

/// Calls f(T{}) with T = float, double, int64_t or bool.
template <class F>
decltype(auto) dispatch_all(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Bool: return f(bool{});
  }
  return f(float{});
}

}  // namespace ember
