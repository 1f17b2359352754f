/// \file
/// How the ops without a 16-bit kernel accept bfloat16 and float16 tensors:
/// they run on float32 copies and round the result back, which is what
/// PyTorch's CPU kernels do inside (load as float32, accumulate in float32,
/// store in the input dtype). The copies go through Tensor::to, which
/// autograd records, so a bfloat16 input's gradient comes back bfloat16.
///
/// An op opts in with one line at its top:
/// \code
///   if (any_half({x, w})) return some_op(upcast_half(x), upcast_half(w)).to(x.dtype());
/// \endcode
/// The pointwise functor kernels (ops/pointwise_kernels.h), copies, fills
/// and the gather-like indexing kernels handle the 16-bit types natively.
#pragma once

#include <initializer_list>

#include <ember/core/tensor.h>

namespace ember {

/// True when any defined tensor among ts is bfloat16 or float16.
inline bool any_half(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && is_half(t->dtype())) return true;
  return false;
}
/// any_half of one tensor.
inline bool any_half(const Tensor& t) { return t.defined() && is_half(t.dtype()); }

/// t as float32 when it is bfloat16 or float16 (differentiable), else t.
inline Tensor upcast_half(const Tensor& t) { return any_half(t) ? t.to(DType::Float32) : t; }

/// The dtype a float32-computed result returns in: the first 16-bit dtype
/// among ts (PyTorch returns the input's dtype).
inline DType half_result_dtype(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && is_half(t->dtype())) return t->dtype();
  return DType::Float32;
}

}  // namespace ember
