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
///
/// A backend whose kernel of an op computes the 16-bit types itself (load
/// as float32, compute and accumulate in float32, store rounded) says so
/// next to its registration, and the op then skips the copies on that
/// device:
/// \code
///   EMBER_REGISTER_KERNEL(sum_kernel, CUDA, cuda_sum);
///   EMBER_REGISTER_HALF_KERNEL(sum_kernel, CUDA);   // cuda/reduce.cu
///   if (any_half(x) && !takes_half(sum_kernel, x.device())) return ...upcast...;  // ops/reduce.cpp
/// \endcode
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

/// The dtype a float32-computed result returns in: the first 16-bit dtype
/// among ts (PyTorch returns the input's dtype).
inline DType half_result_dtype(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && is_half(t->dtype())) return t->dtype();
  return DType::Float32;
}

/// Marks table's kernel for device type as taking bfloat16 and float16
/// tensors natively (at static initialisation, through
/// EMBER_REGISTER_HALF_KERNEL).
void register_half_kernel(const void* table, DeviceType type);
/// Whether table's kernel for device's type was marked so.
bool takes_half_kernel(const void* table, DeviceType type);
/// takes_half_kernel for a kernel table (any signature).
template <class Table>
bool takes_half(const Table& table, Device device) {
  return takes_half_kernel(&table, device.type);
}

/// Registers the mark from a static initialiser.
struct HalfKernelRegistrar {
  /// register_half_kernel(table, type).
  HalfKernelRegistrar(const void* table, DeviceType type) { register_half_kernel(table, type); }
};

}  // namespace ember

/// Marks table's kernel for DeviceType::device as computing 16-bit tensors
/// natively (the file comment).
#define EMBER_REGISTER_HALF_KERNEL(table, device)                                              \
  static ::ember::HalfKernelRegistrar EMBER_CONCAT(ember_half_kernel_registrar_, __COUNTER__)( \
      &(table), ::ember::DeviceType::device)
