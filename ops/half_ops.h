/// \file
/// Helpers for code that handles bfloat16 and float16 itself: the bodies of
/// ops declared `Half::InBody` (core/op.h), which choose per shape between
/// a 16-bit kernel and float32 copies, and backward closures that sum 16-bit
/// gradients in float32. An op states its policy in its declaration
/// (`OpDef::half`), and `op::call` makes the float32 copies for it; the
/// 16-bit kernel marks (`EMBER_REGISTER_HALF_KERNEL`) are in core/dispatch.h.
#pragma once

#include <initializer_list>

#include <ember/core/device.h>
#include <ember/core/dispatch.h>
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

}  // namespace ember
