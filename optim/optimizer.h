/// \file
/// Optimizers with PyTorch's names, defaults and update formulas: SGD
/// (momentum, dampening, nesterov, weight decay), Adam and AdamW (decoupled
/// weight decay). Parameters come in groups, each with its own lr and
/// weight_decay, so "no decay for biases and norms" is one extra group.
/// Hyperparameters live in the groups and are read at every step, so a
/// scheduler changes a group's lr without rebuilding anything.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember::optim {

/// Parameters that share hyperparameters (torch's param_groups entries).
struct ParamGroup {
  std::vector<Tensor> params;  ///< the parameters (handles to the model's tensors)
  double lr = -1;              ///< < 0: the optimizer's default
  double weight_decay = -1;    ///< < 0: the optimizer's default
  double initial_lr = -1;      ///< set by the optimizer; used by LR schedulers
};

/// The base of the optimizers: parameter groups, zero_grad, and state dicts.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  /// Clears every parameter's gradient (set_to_none as in PyTorch 2).
  void zero_grad(bool set_to_none = true);
  /// The groups, with their current lr and weight_decay (schedulers change lr here).
  ///@{
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  ///@}
  /// Hyperparameters and per-parameter state (momentum buffers, moments,
  /// step count) as named tensors, so training resumes exactly from a
  /// checkpoint. load_state_dict checks names and shapes, and values as the
  /// constructors check options: rates finite and >= 0, buffers finite, Adam's
  /// second moments >= 0 and its step a whole number from 0 to 2^53. A refused
  /// dict (ValueError naming the entry) leaves the optimizer unchanged.
  ///@{
  virtual StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);
  ///@}

 protected:
  /// Fills each group's unset lr and weight_decay with the defaults; name is for errors.
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name);
  std::vector<ParamGroup> groups_;  ///< the parameter groups
};

/// torch.optim.SGD's arguments, with PyTorch 1.13's defaults.
struct SGDOptions {
  /// Learning rate. PyTorch 1.13's SGD has no default (lr is required), so
  /// NaN here means "not given": construction then fails unless every
  /// parameter group sets its own lr, as torch's `required` does.
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0;      ///< momentum factor (0: plain SGD)
  double dampening = 0;     ///< dampening of the momentum
  double weight_decay = 0;  ///< L2 penalty added to the gradient
  bool nesterov = false;    ///< Nesterov momentum
  /// bfloat16 parameters: each updated weight rounded stochastically
  /// instead of to nearest (see AdamOptions::stochastic_rounding).
  bool stochastic_rounding = false;
  Generator* generator = nullptr;  ///< stochastic rounding's random stream (null: default_generator())
};

/// Stochastic gradient descent with momentum, dampening, Nesterov and weight
/// decay, as torch.optim.SGD. bfloat16 and float16 parameters (contiguous)
/// take one fused kernel: the momentum buffer in their dtype, the formula in
/// float32, p and the buffer each rounded once.
class SGD final : public Optimizer {
 public:
  /// One group of params, or several groups with their own lr/weight_decay.
  ///@{
  SGD(std::vector<Tensor> params, SGDOptions opts);
  SGD(std::vector<ParamGroup> groups, SGDOptions opts);
  ///@}
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  SGDOptions opts_;
  std::vector<std::vector<Tensor>> momentum_;  ///< per group, per param (undefined until first step)
};

/// torch.optim.Adam's arguments and PyTorch 1.13's defaults (amsgrad is
/// not supported).
struct AdamOptions {
  double lr = 1e-3;         ///< learning rate
  double beta1 = 0.9;       ///< decay of the first moment
  double beta2 = 0.999;     ///< decay of the second moment
  double eps = 1e-8;        ///< added to the denominator
  double weight_decay = 0;  ///< L2 penalty added to the gradient
  /// bfloat16 parameters: round each updated weight up or down at random,
  /// up with probability (distance from the lower neighbour) / ulp, so that
  /// its expectation is the float32 result. Off (PyTorch's behaviour): to
  /// nearest, where an update under half an ulp of the weight (at 1.0, 2^-9
  /// ~ 0.002) is lost every step and a long fine-tune with a small lr
  /// stalls. The moments keep round-to-nearest; float32 and float64
  /// parameters are unaffected, float16 ones refused (DTypeError).
  /// Deterministic for the generator's seed, on the CPU and on CUDA alike
  /// (docs/PRECISION.md).
  bool stochastic_rounding = false;
  /// Stochastic rounding's random stream (null: default_generator()); a step
  /// reserves one Philox counter per 4 elements of each bfloat16 parameter.
  Generator* generator = nullptr;
};

/// torch.optim.AdamW's arguments and PyTorch 1.13's defaults. A type of its
/// own, not AdamOptions, so that `AdamW(params, {.lr = 3e-4})` keeps AdamW's
/// weight_decay of 1e-2 as in PyTorch, rather than Adam's 0. The fields are
/// AdamOptions' in the same order, so positional initialisers read the same.
struct AdamWOptions {
  double lr = 1e-3;                  ///< learning rate
  double beta1 = 0.9;                ///< decay of the first moment
  double beta2 = 0.999;              ///< decay of the second moment
  double eps = 1e-8;                 ///< added to the denominator
  double weight_decay = 1e-2;        ///< decoupled: p -= lr * weight_decay * p
  bool stochastic_rounding = false;  ///< as AdamOptions::stochastic_rounding
  Generator* generator = nullptr;    ///< as AdamOptions::generator
};

/// Adam (decoupled = false) and AdamW (decoupled = true) share one fused
/// per-parameter kernel. bfloat16 and float16 parameters keep their moments
/// in their own dtype (as PyTorch) and step in float32 math, each stored
/// value rounded once.
class Adam : public Optimizer {
 public:
  /// One group of params, or several groups with their own lr/weight_decay.
  ///@{
  Adam(std::vector<Tensor> params, AdamOptions opts);
  Adam(std::vector<ParamGroup> groups, AdamOptions opts);
  ///@}
  void step() override;
  /// Steps taken so far (the bias corrections' t).
  int64_t steps() const { return step_; }
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  /// AdamW's constructor: decoupled weight decay.
  Adam(std::vector<ParamGroup> groups, AdamOptions opts, bool decoupled, const char* name);

 private:
  AdamOptions opts_;
  bool decoupled_;
  int64_t step_ = 0;
  ///@{
  std::vector<std::vector<Tensor>> m_, v_;  ///< first and second moments
  ///@}
};

/// Adam with decoupled weight decay (Loshchilov & Hutter): p -= lr wd p apart
/// from the adaptive step, as torch.optim.AdamW.
class AdamW final : public Adam {
 public:
  /// AdamW's defaults (AdamWOptions{}).
  static AdamWOptions defaults() { return {}; }
  /// One group of params, or several groups with their own lr/weight_decay.
  ///@{
  AdamW(std::vector<Tensor> params, AdamWOptions opts = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions opts = {});
  ///@}
};

/// The usual AdamW split in one line: parameters with 2 or more dims decay
/// with weight_decay; biases, norm weights and anything named in no_decay
/// (e.g. "cls_token", "pos_embed") do not.
std::vector<ParamGroup> weight_decay_groups(const StateDict& named_parameters, double weight_decay,
                                            const std::vector<std::string>& no_decay = {"cls_token", "pos_embed"});

/// Scales all gradients so their global L2 norm is at most max_norm
/// (coefficient max_norm / (norm + 1e-6) where below 1; the sum of squares
/// in float64); returns the norm before clipping as a 0-d float64 tensor on
/// the gradients' device, as torch.nn.utils.clip_grad_norm_ does: on a GPU
/// nothing is read back unless the caller asks (`.item<double>()`), so the
/// step needs no synchronisation and can be captured in a CUDA graph.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);
/// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace ember::optim
