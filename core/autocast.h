/// \file
/// Autocast regions, as torch.autocast: inside
/// \code
///   AutocastGuard guard(DeviceType::CPU, kBFloat16);
/// \endcode
/// the ops of the lower-precision list (matmul, mm, bmm, linear, conv2d,
/// multi-head attention) cast their floating inputs on that device to the
/// region's dtype (their products still accumulate in float32: the 16-bit
/// GEMM path of docs/PRECISION.md), and the ops of the float32 list
/// (softmax, log_softmax, layer_norm, the losses, sum, mean, exp, log) cast
/// 16-bit inputs to float32 and return float32. Parameters are not changed
/// (float32 master weights); the casts are Tensor::to, so backward returns
/// float32 gradients to float32 leaves. The lists are one table
/// (autocast_table(), core/autocast.cpp), PyTorch's CPU/CUDA autocast lists
/// restricted to the ops Ember has.
///
/// An op opts in with two lines at its top:
/// \code
///   if (auto dt = autocast_dtype_for("linear", x)) {
///     AutocastSuspend off;  // the inner call must not cast again
///     return linear(autocast_cast(x, *dt), autocast_cast(w, *dt), autocast_cast(b, *dt));
///   }
/// \endcode
/// Outside any region the check is one thread-local load.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/dtype.h>

namespace ember {

class Tensor;

/// Which way an op in the autocast table casts.
enum class AutocastPolicy { LowerPrecision, Float32 };

/// The table: op name -> policy.
const std::vector<std::pair<const char*, AutocastPolicy>>& autocast_table();

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
std::optional<DType> autocast_dtype_for_slow(const char* op, const Tensor& t);
}  // namespace detail

/// The dtype op must cast its floating inputs to, when t's device is in an
/// autocast region and op is in the table; nullopt otherwise.
inline std::optional<DType> autocast_dtype_for(const char* op, const Tensor& t) {
  if (!detail::t_autocast_any) return std::nullopt;
  return detail::autocast_dtype_for_slow(op, t);
}

/// t cast to dt when t is a floating tensor of another dtype, not float64
/// (undefined, integer and float64 tensors pass through, as in PyTorch).
Tensor autocast_cast(const Tensor& t, DType dt);

}  // namespace ember
