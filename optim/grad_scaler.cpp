// GradScaler (optim/grad_scaler.h): torch.cuda.amp.GradScaler's loss
// scaling, step skipping and scale updates.
#include <ember/optim/grad_scaler.h>

#include <cmath>

#include <ember/core/autograd.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/reduce.h>

namespace ember::optim {

GradScaler::GradScaler(GradScalerOptions opts) : opts_(opts), scale_(opts.init_scale) {
  EMBER_CHECK(std::isfinite(opts.init_scale) && opts.init_scale > 0, ValueError,
              "GradScaler: init_scale must be positive and finite, got ", opts.init_scale);
  EMBER_CHECK(opts.growth_factor > 1.0 && std::isfinite(opts.growth_factor), ValueError,
              "GradScaler: growth_factor should be > 1, got ", opts.growth_factor);
  EMBER_CHECK(opts.backoff_factor > 0.0 && opts.backoff_factor < 1.0, ValueError,
              "GradScaler: backoff_factor should be in (0, 1), got ", opts.backoff_factor);
  EMBER_CHECK(opts.growth_interval > 0, ValueError, "GradScaler: growth_interval should be a positive integer, got ",
              opts.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!opts_.enabled) return loss;
  const Tensor l = is_half(loss.dtype()) ? loss.to(DType::Float32) : loss;
  return mul(l, scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!opts_.enabled) return;
  PerOptimizer& st = per_opt_[&opt];
  EMBER_CHECK(!st.unscaled, ValueError,
              "GradScaler: unscale_() has already been called on this optimizer since the last update()");
  EMBER_CHECK(!st.stepped, ValueError, "GradScaler: unscale_() is being called after step()");
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  bool found = false;
  for (ParamGroup& g : opt.param_groups())
    for (Tensor& p : g.params) {
      Tensor& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      mul_(grad, inv);
      // The largest magnitude is NaN when any element is (max propagates
      // NaN), Inf when any is: one reduction per gradient.
      if (grad.numel() && !std::isfinite(max(abs(grad)).item<double>())) found = true;
    }
  st.unscaled = true;
  st.found_inf = found;
}

bool GradScaler::step(Optimizer& opt) {
  if (!opts_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& st = per_opt_[&opt];
  EMBER_CHECK(!st.stepped, ValueError, "GradScaler: step() has already been called since the last update()");
  if (!st.unscaled) unscale_(opt);
  PerOptimizer& s = per_opt_[&opt];
  s.stepped = true;
  if (s.found_inf) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!opts_.enabled) return;
  EMBER_CHECK(!per_opt_.empty(), ValueError,
              "GradScaler: no inf checks were recorded prior to update() (call step() first)");
  bool found = false;
  for (const auto& [o, st] : per_opt_) found = found || st.found_inf;
  if (found) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == opts_.growth_interval) {
    scale_ *= opts_.growth_factor;
    growth_tracker_ = 0;
  }
  per_opt_.clear();
}

StateDict GradScaler::state_dict() const {
  return {{"scale", scalar_tensor(scale_, DType::Float64)},
          {"growth_factor", scalar_tensor(opts_.growth_factor, DType::Float64)},
          {"backoff_factor", scalar_tensor(opts_.backoff_factor, DType::Float64)},
          {"growth_interval", scalar_tensor(static_cast<double>(opts_.growth_interval), DType::Int64)},
          {"_growth_tracker", scalar_tensor(static_cast<double>(growth_tracker_), DType::Int64)}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  bool have_scale = false;
  for (const auto& [k, t] : state) {
    EMBER_CHECK(t.numel() == 1, ValueError, "GradScaler::load_state_dict: '", k, "' must hold one value, got shape ",
                t.shape().str());
    const double v = t.item<double>();
    if (k == "scale") {
      EMBER_CHECK(std::isfinite(v) && v > 0, ValueError,
                  "GradScaler::load_state_dict: scale must be positive and finite, got ", v);
      scale_ = v;
      have_scale = true;
    } else if (k == "growth_factor") {
      opts_.growth_factor = v;
    } else if (k == "backoff_factor") {
      opts_.backoff_factor = v;
    } else if (k == "growth_interval") {
      opts_.growth_interval = static_cast<int64_t>(v);
    } else if (k == "_growth_tracker") {
      growth_tracker_ = static_cast<int64_t>(v);
    } else {
      EMBER_CHECK(false, ValueError, "GradScaler::load_state_dict: unexpected key '", k, "'");
    }
  }
  EMBER_CHECK(have_scale, ValueError, "GradScaler::load_state_dict: the state has no 'scale'");
}

}  // namespace ember::optim
