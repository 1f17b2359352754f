/// \file
/// GradScaler: dynamic loss scaling for float16 training, as
/// torch.cuda.amp.GradScaler, with its defaults and semantics. The loss is
/// multiplied by the scale before backward (so small float16 gradients do
/// not flush to zero); step() unscales the gradients, skips the optimizer
/// step when any is Inf or NaN, and update() then halves the scale, or
/// doubles it after growth_interval steps in a row without Inf/NaN.
/// \code
///   optim::GradScaler scaler;
///   scaler.scale(loss).backward();
///   scaler.step(opt);   // unscales, steps unless a gradient is Inf/NaN
///   scaler.update();
/// \endcode
#pragma once

#include <cstdint>
#include <map>

#include <ember/core/tensor.h>
#include <ember/optim/optimizer.h>

namespace ember::optim {

/// torch.cuda.amp.GradScaler's arguments and defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;     ///< 2^16
  double growth_factor = 2.0;      ///< scale *= this after growth_interval good steps
  double backoff_factor = 0.5;     ///< scale *= this after a step with Inf/NaN
  int64_t growth_interval = 2000;  ///< good steps in a row before growing
  bool enabled = true;             ///< false: every call is a pass-through
};

/// Dynamic loss scaling (see the file comment).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions opts = {});
  /// loss * scale, in float32 for a 16-bit loss (as PyTorch's float32 scale
  /// tensor promotes it), so the scaled loss does not overflow float16.
  Tensor scale(const Tensor& loss) const;
  /// Divides opt's gradients by the scale in place and records whether any
  /// is Inf or NaN. At most once per optimizer between update()s.
  void unscale_(Optimizer& opt);
  /// Unscales (unless unscale_ was called) and runs opt.step() unless a
  /// gradient was Inf or NaN. Returns whether the step ran.
  bool step(Optimizer& opt);
  /// Backs the scale off after a skipped step, grows it after
  /// growth_interval clean ones; clears the per-optimizer records.
  void update();
  /// The current scale (1 when disabled).
  double get_scale() const { return opts_.enabled ? scale_ : 1.0; }
  /// Clean steps since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return opts_.enabled; }
  /// PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval,
  /// _growth_tracker (0-dim float64 / int64 tensors), for checkpoints.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  struct PerOptimizer {
    bool unscaled = false, stepped = false, found_inf = false;
  };
  GradScalerOptions opts_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace ember::optim
