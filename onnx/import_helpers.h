/// \file
/// Small helpers the importer's elementwise and tensor op groups share
/// (internal to ember_onnx): axes as ONNX gives them, ONNX element types as
/// Ember dtypes, the pre-opset-7 broadcast attributes, and running a
/// pointwise functor of the importer's own (import_math.h) with its backward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ember/core/autograd.h>
#include <ember/onnx/import_ops.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/pointwise.h>

namespace ember::onnx::detail {

/// axis in [-rank, rank) as a dim in [0, rank); ValueError naming the node otherwise.
inline int64_t norm_axis(const NodeArgs& a, int64_t axis, int64_t rank) {
  // A 0-d tensor is one row of one: axes 0 and -1 both name it.
  const bool ok = rank == 0 ? (axis == 0 || axis == -1) : (axis >= -rank && axis < rank);
  if (!ok) a.invalid("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return rank == 0 ? 0 : (axis < 0 ? axis + rank : axis);
}

/// The Ember dtype that holds ONNX element type t (TensorProto::DataType); Unsupported for strings,
/// complex numbers and unknown types.
DType dtype_of_onnx(const NodeArgs& a, int64_t t);

/// Opsets before 7 broadcast B against A only with broadcast=1, aligned at `axis` (default: the trailing
/// dims); this reshapes b so that NumPy broadcasting does the same.
Tensor legacy_broadcast(const NodeArgs& a, const Tensor& x, const Tensor& b);

/// A 0-dim or one-element tensor's value as a double (an optional scalar input: Clip's min, Pad's value).
double scalar_value(const NodeArgs& a, size_t input);

/// y = F(x) with the functor's dtype rules, on any device (a device without F's kernel computes on the
/// host). F is one of the importer's own functors (import_math.h), registered for the CPU.
template <class F>
Tensor run_unary(const Tensor& x, double p = 0, double q = 0) {
  if (!x.device().is_cpu()) return unary_forward<F>(x.cpu(), p, q).to(x.device());
  return unary_forward<F>(x, p, q);
}
template <class F>
Tensor run_binary(const Tensor& x, const Tensor& y, double p = 0, double q = 0) {
  if (!x.device().is_cpu()) return binary_forward<F>(x.cpu(), y.cpu(), p, q).to(x.device());
  return binary_forward<F>(x, y, p, q);
}

/// y = F(x), recorded for autograd with dy/dx = deriv(x, y) written with Ember's ops.
template <class F, class D>
Tensor unary_with_grad(const Tensor& x, D deriv) {
  Tensor y = run_unary<F>(x);
  if (autograd::needs_grad({x}))
    autograd::record(
        F::name, {x}, y,
        [sx = autograd::SavedTensor(x), sy = autograd::SavedTensor(y), deriv](autograd::BackwardContext& ctx) {
          ctx.set_grad(0, mul(ctx.grad_output(), deriv(sx.get(), sy.get())));
        });
  return y;
}

}  // namespace ember::onnx::detail
