/// \file
/// Kernel tables of the pointwise ops, and the helpers that run a functor
/// from ops/functors.h through them. Shared by the op files (elementwise,
/// activation) and by backends, which register one kernel per functor.
///
/// Kernels receive operands already broadcast to the output's shape (stride-0
/// views) and already of the computation dtype, so a kernel only walks an
/// ElementwisePlan.
#pragma once

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>
#include <ember/ops/functors.h>

namespace ember {

/// The kernel signatures of the functor ops: unary out = f(x; a, b), binary out = f(x, y; a, b),
/// comparisons (bool out).
///@{
using UnaryKernelFn = void(const Tensor& x, Tensor& out, double a, double b);
using BinaryKernelFn = void(const Tensor& x, const Tensor& y, Tensor& out, double a, double b);
using CompareKernelFn = void(const Tensor& x, const Tensor& y, Tensor& out);
///@}

/// The kernel table of functor F (one table per functor, named F::name).
///@{
template <class F>
KernelTable<UnaryKernelFn>& unary_kernel() {
  static KernelTable<UnaryKernelFn> table(F::name);
  return table;
}
template <class F>
KernelTable<BinaryKernelFn>& binary_kernel() {
  static KernelTable<BinaryKernelFn> table(F::name);
  return table;
}
template <class F>
KernelTable<CompareKernelFn>& compare_kernel() {
  static KernelTable<CompareKernelFn> table(F::name);
  return table;
}
///@}
/// out = cond ? x : y (x, y, out of one dtype; cond bool; all of out's shape).
extern KernelTable<void(const Tensor& cond, const Tensor& x, const Tensor& y, Tensor& out)> where_kernel;
/// out = mask ? value : x.
extern KernelTable<void(const Tensor& x, const Tensor& mask, Tensor& out, double value)> masked_fill_kernel;

/// A plain (autograd-free) view of t broadcast to shape.
Tensor broadcast_view(const Tensor& t, const Shape& shape);
/// Throws DeviceError naming op when the tensors are on different devices.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
/// PyTorch's result dtype of a binary op.
DType result_type(const Tensor& a, const Tensor& b);
/// Throws AutogradError when an in-place op would write into a tensor that autograd tracks.
void check_inplace(const char* op, const Tensor& self);

/// y = F(x; a, b) with F's dtype rules (integers go to float32 unless F
/// accepts them). No autograd: callers record their own backward.
template <class F>
Tensor unary_forward(const Tensor& x, double a = 0, double b = 0) {
  Tensor in = (!F::kIntegral && !x.is_floating_point()) || x.dtype() == DType::Bool
                  ? x.to(F::kIntegral ? DType::Int64 : DType::Float32)
                  : x;
  Tensor out = empty(in.shape(), TensorOptions(in.dtype(), in.device()));
  unary_kernel<F>()(in.device(), in, out, a, b);
  return out;
}

/// z = F(x, y; a, b) with broadcasting and promotion. No autograd.
template <class F>
Tensor binary_forward(const Tensor& x, const Tensor& y, double a = 0, double b = 0) {
  check_same_device(F::name, x, y);
  DType dt = result_type(x, y);
  if (dt == DType::Bool || (!F::kIntegral && !is_floating(dt))) dt = F::kIntegral ? DType::Int64 : DType::Float32;
  const Shape shape = x.shape() == y.shape() ? x.shape() : broadcast_shapes(x.shape(), y.shape(), F::name);
  Tensor xc = x.dtype() == dt ? x : x.to(dt);
  Tensor yc = y.dtype() == dt ? y : y.to(dt);
  Tensor out = empty(shape, TensorOptions(dt, x.device()));
  binary_kernel<F>()(x.device(), broadcast_view(xc, shape), broadcast_view(yc, shape), out, a, b);
  return out;
}

/// In place: self = F(self, other; a, b); other broadcasts to self's shape.
template <class F>
Tensor& binary_inplace(Tensor& self, const Tensor& other, double a = 0, double b = 0) {
  check_inplace(F::name, self);
  check_same_device(F::name, self, other);
  EMBER_CHECK(broadcast_shapes(self.shape(), other.shape(), F::name) == self.shape(), ShapeError, F::name,
              "_: the result of broadcasting ", self.shape().str(), " with ", other.shape().str(),
              " does not have the in-place tensor's shape");
  Tensor o = other.dtype() == self.dtype() ? other : other.to(self.dtype());
  binary_kernel<F>()(self.device(), self, broadcast_view(o, self.shape()), self, a, b);
  self.bump_version();
  return self;
}

/// self = F(self; a, b) in place (not recorded by autograd; bumps the version).
template <class F>
Tensor& unary_inplace(Tensor& self, double a = 0, double b = 0) {
  check_inplace(F::name, self);
  unary_kernel<F>()(self.device(), self, self, a, b);
  self.bump_version();
  return self;
}

}  // namespace ember
