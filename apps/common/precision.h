// The --precision flag the demos share (vit, attention_regression, seq2seq,
// bench): fp32, or mixed precision as PyTorch users run it on a CPU or GPU:
// the forward pass and the loss inside an autocast region (core/autocast.h:
// GEMM-shaped ops in bfloat16 / float16 with float32 accumulation, softmax,
// norms and losses in float32), float32 master weights, backward and the
// optimizer step outside the region; fp16 adds dynamic loss scaling
// (optim::GradScaler), which bf16 does not need (float32's exponent range).
// On this CPU bf16 runs on Ember's AVX512_BF16 GEMM; fp16 has no CPU kernel
// and runs through float32 copies, so it is slower than fp32 here.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::app {

/// Adds --precision fp32|bf16|fp16 (default fp32) bound to precision.
CLI::Option* add_precision(CLI::App& cli, std::string& precision);

/// One training run's precision: the autocast region for forward + loss, and
/// the backward / unscale / clip / step / update sequence around it.
class MixedPrecision {
 public:
  /// precision: "fp32", "bf16" or "fp16" (ValueError otherwise); device: where the model runs.
  MixedPrecision(const std::string& precision, DeviceType device);

  const std::string& name() const { return name_; }
  /// Whether forward runs in a 16-bit autocast region.
  bool low() const { return low_; }

  /// The region to hold while computing forward and loss (and evaluation
  /// forwards): on for bf16 / fp16, off for fp32.
  AutocastGuard region() const { return AutocastGuard(device_, dtype_, low_); }

  /// loss.backward() (scaled for fp16), gradients unscaled, clipped to
  /// max_norm when it is > 0, opt.step() (skipped by the scaler when a
  /// gradient is Inf/NaN), scaler update. Returns false when the step was
  /// skipped.
  bool backward_step(const Tensor& loss, optim::Optimizer& opt, const std::vector<Tensor>& params, double max_norm = 0);

  optim::GradScaler& scaler() { return scaler_; }

 private:
  std::string name_;
  DeviceType device_;
  DType dtype_ = kBFloat16;
  bool low_ = false;
  optim::GradScaler scaler_;
};

}  // namespace ember::app
