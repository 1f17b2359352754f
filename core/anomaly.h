/// \file
/// NaN/Inf anomaly mode: find the first op that produced a non-finite value.
///
/// \code
///   ember::set_detect_anomaly(true);            // or EMBER_DETECT_ANOMALY=1
///   { ember::DetectAnomalyGuard g; train_step(); }
/// \endcode
///
/// When on, every kernel-table call (core/dispatch.h) checks its floating
/// outputs after the kernel ran, and the autograd engine checks the input
/// gradients every backward node produced. The first op that turns finite
/// inputs into a NaN or an infinity throws AnomalyError naming the kernel (and,
/// in backward, the node whose backward ran it). An op whose inputs, or
/// whose scalar arguments (masked_fill(-inf), full(inf)), are already
/// non-finite is not blamed: that value was the user's or an earlier op's.
///
/// Off, it costs nothing beyond what the profiler already costs: kernel tables
/// test one relaxed atomic word holding both switches, so the hot path keeps a
/// single predictable branch. On, each kernel call reads its inputs and
/// outputs once more (a debugging mode, like torch.autograd.detect_anomaly).
#pragma once

#include <string>
#include <type_traits>

#include <ember/core/error.h>
#include <ember/core/kernel_hooks.h>

namespace ember {

class Tensor;

/// A non-finite value where the anomaly mode forbids one.
class AnomalyError : public Error {
 public:
  using Error::Error;
};

/// Whether anomaly mode is on, and turning it on or off for the whole program (EMBER_DETECT_ANOMALY=1
/// at start-up).
///@{
inline bool detect_anomaly() { return (detail::kernel_hooks() & detail::kHookAnomaly) != 0; }
void set_detect_anomaly(bool on);
///@}

/// Turns anomaly mode on for a scope, restoring the previous state after.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : was_(detect_anomaly()) { set_detect_anomaly(true); }
  ~DetectAnomalyGuard() { set_detect_anomaly(was_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool was_;
};

/// True when t holds no NaN or infinity (non-floating tensors always do).
/// Strided tensors are read in place; other devices are copied to the CPU.
bool all_finite(const Tensor& t);

/// One kernel call's check, used by KernelTable when anomaly mode is on. The
/// table shows it every argument twice, typed as in the kernel's signature:
/// before the call (const Tensor& arguments are inputs, doubles are scalar
/// arguments) and after it (Tensor& arguments are outputs).
class AnomalyCheck {
 public:
  /// A check of one call of the named kernel.
  explicit AnomalyCheck(const char* kernel) : kernel_(kernel) {}

  /// Notes an input tensor, a scalar argument, and checks an output tensor (throws AnomalyError naming
  /// the kernel when it is non-finite and every input was finite).
  ///@{
  void input(const Tensor& t);
  void scalar(double v);
  void output(const Tensor& t);
  ///@}

  /// An argument before the call, classified by its parameter type Param.
  template <class Param, class Arg>
  void before(const Arg& a) {
    using P = std::remove_cv_t<std::remove_reference_t<Param>>;
    if constexpr (std::is_same_v<P, Tensor> && std::is_const_v<std::remove_reference_t<Param>>)
      input(a);
    else if constexpr (std::is_floating_point_v<P>)
      scalar(static_cast<double>(a));
    else if constexpr (requires(AnomalyCheck & c) { anomaly_inputs(a, c); })
      anomaly_inputs(a, *this);
  }
  /// An argument after the call: outputs (Tensor&) are checked.
  template <class Param, class Arg>
  void after(const Arg& a) {
    using P = std::remove_cv_t<std::remove_reference_t<Param>>;
    if constexpr (std::is_same_v<P, Tensor> && !std::is_const_v<std::remove_reference_t<Param>>)
      output(a);
    else if constexpr (requires(AnomalyCheck & c) { anomaly_outputs(a, c); })
      anomaly_outputs(a, *this);
  }

 private:
  const char* kernel_;
  bool inputs_finite_ = true;
};

/// Anomaly checks must not check themselves (a CUDA tensor is copied to the
/// CPU through a kernel table): the table skips them while this is set.
bool in_anomaly_check();

}  // namespace ember
