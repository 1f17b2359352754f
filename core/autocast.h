/// \file
/// Autocast regions, as torch.autocast: inside
/// \code
///   AutocastGuard guard(DeviceType::CPU, kBFloat16);
/// \endcode
/// the ops of the lower-precision category (matmul, mm, bmm, linear, conv2d,
/// multi-head attention) cast their floating inputs on that device to the
/// region's dtype (their products still accumulate in float32: the 16-bit
/// GEMM path of docs/PRECISION.md), and the ops of the float32 category
/// (softmax, log_softmax, layer_norm, the losses, sum, mean, exp, log) cast
/// 16-bit inputs to float32 and return float32. Parameters are not changed
/// (float32 master weights); the casts are Tensor::to, so backward returns
/// float32 gradients to float32 leaves. An op's category is part of its
/// declaration (`OpDef::autocast`, core/op.h), PyTorch's CPU/CUDA autocast
/// lists restricted to the ops Ember has, and `op::call` applies it; this
/// file holds the per-thread state. Outside any region an op pays one
/// thread-local load.
#pragma once

#include <ember/core/device.h>
#include <ember/core/dtype.h>

namespace ember {

class Tensor;

/// Enables autocast on one device type (CPU or CUDA) with a 16-bit dtype for
/// the guard's lifetime (per thread); restores the previous state after.
/// enabled = false turns autocast off inside the region, as
/// torch.autocast(enabled=False).
class AutocastGuard {
 public:
  AutocastGuard(DeviceType device, DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};

/// Whether autocast is on for device on this thread, and its dtype.
bool autocast_enabled(DeviceType device);
DType autocast_dtype(DeviceType device);

/// Turns every autocast region off on this thread while alive (an op's
/// inner, already-cast call).
class AutocastSuspend {
 public:
  AutocastSuspend();
  ~AutocastSuspend();
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  bool prev_;
};

namespace detail {
/// True while any device has autocast on and no AutocastSuspend is alive.
extern thread_local bool t_autocast_any;
}  // namespace detail

/// t cast to dt when t is a floating tensor of another dtype, not float64
/// (undefined, integer and float64 tensors pass through, as in PyTorch).
Tensor autocast_cast(const Tensor& t, DType dt);

}  // namespace ember
