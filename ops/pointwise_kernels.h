/// \file
/// The pointwise kernels (unary, binary, compare for every functor of
/// ops/functors.h, plus where and masked_fill), written once over a backend's
/// elementwise loop. A backend supplies
/// \code
/// struct Loops {
///   template <class Out, class... In, class F>
///   static void map(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f);
/// };
/// \endcode
/// (cpu::map in ops/cpu_loops.h, cuda::map in cuda/loops.cuh) and calls
/// register_pointwise_kernels<Loops>(its DeviceType) once; the dtype rules
/// and the functor adapters below are then the same on every device.
#pragma once

#include <array>

#include <ember/core/dtype_dispatch.h>
#include <ember/core/hostdevice.h>
#include <ember/ops/pointwise.h>

namespace ember {

// Functor adapters with the element type fixed, callable on the host and on
// a device (a GPU kernel takes them by value). The formula runs in
// opmath_t<T>: T itself, except float32 for bfloat16/float16 elements,
// which are loaded as float32 and stored rounded (core/half.h).
/// \cond pointwise_internals
template <class F, class T>
struct UnaryOp {
  F f;
  EMBER_HD T operator()(T v) const { return T(f(static_cast<opmath_t<T>>(v))); }
};
template <class F, class T>
struct BinaryOp {
  F f;
  EMBER_HD T operator()(T u, T v) const { return T(f(static_cast<opmath_t<T>>(u), static_cast<opmath_t<T>>(v))); }
};
template <class F, class T>
struct CompareOp {
  EMBER_HD bool operator()(T u, T v) const { return F{}(static_cast<opmath_t<T>>(u), static_cast<opmath_t<T>>(v)); }
};
template <class T>
struct WhereOp {
  EMBER_HD T operator()(bool c, T u, T v) const { return c ? u : v; }
};
template <class T>
struct MaskedFillOp {
  T value;
  EMBER_HD T operator()(T u, bool m) const { return m ? value : u; }
};
/// \endcond

/// The pointwise kernels over Loops::map, one static function per kernel
/// table: unary<F>, binary<F>, compare<F>, where, masked_fill.
template <class Loops>
struct PointwiseKernels {
  /// F with its scalar parameters (clamp's bounds, pow's exponent, ...).
  template <class F>
  static F with(double a, double b) {
    F f;
    f.a = a;
    f.b = b;
    return f;
  }
  /// body(tag) for dt under F's dtype rule: integers only when F accepts them.
  template <class F, class Body>
  static void dispatch(DType dt, const Body& body) {
    if constexpr (F::kIntegral)
      dispatch_numeric_and_half(dt, F::name, body);
    else
      dispatch_floating_and_half(dt, F::name, body);
  }

  /// The kernels, with the signatures of their tables (ops/pointwise.h).
  ///@{
  template <class F>
  static void unary(const Tensor& x, Tensor& out, double a, double b) {
    dispatch<F>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Loops::template map<T, T>(out, {&x}, UnaryOp<F, T>{with<F>(a, b)});
    });
  }
  template <class F>
  static void binary(const Tensor& x, const Tensor& y, Tensor& out, double a, double b) {
    dispatch<F>(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Loops::template map<T, T, T>(out, {&x, &y}, BinaryOp<F, T>{with<F>(a, b)});
    });
  }
  template <class F>
  static void compare(const Tensor& x, const Tensor& y, Tensor& out) {
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Loops::template map<bool, T, T>(out, {&x, &y}, CompareOp<F, T>{});
    });
  }
  static void where(const Tensor& cond, const Tensor& x, const Tensor& y, Tensor& out) {
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Loops::template map<T, bool, T, T>(out, {&cond, &x, &y}, WhereOp<T>{});
    });
  }
  static void masked_fill(const Tensor& x, const Tensor& mask, Tensor& out, double value) {
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      Loops::template map<T, T, bool>(out, {&x, &mask}, MaskedFillOp<T>{static_cast<T>(value)});
    });
  }
  ///@}
};

/// Registers every pointwise kernel of PointwiseKernels<Loops> for device.
/// Returns true, so that a backend can call it from a static initialiser.
template <class Loops>
bool register_pointwise_kernels(DeviceType device) {
  using K = PointwiseKernels<Loops>;
  /// \cond pointwise_internals
#define EMBER_REG_UNARY(F) unary_kernel<fn::F>().set(device, &K::template unary<fn::F>);
#define EMBER_REG_BINARY(F) binary_kernel<fn::F>().set(device, &K::template binary<fn::F>);
#define EMBER_REG_COMPARE(F) compare_kernel<fn::F>().set(device, &K::template compare<fn::F>);
  EMBER_UNARY_FUNCTORS(EMBER_REG_UNARY)
  EMBER_BINARY_FUNCTORS(EMBER_REG_BINARY)
  EMBER_COMPARE_FUNCTORS(EMBER_REG_COMPARE)
#undef EMBER_REG_UNARY
#undef EMBER_REG_BINARY
#undef EMBER_REG_COMPARE
  /// \endcond
  where_kernel.set(device, &K::where);
  masked_fill_kernel.set(device, &K::masked_fill);
  return true;
}

}  // namespace ember
