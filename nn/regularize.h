/// \file
/// Training tricks of the DeiT recipe, usable from C++:
///  - drop_path / DropPath: stochastic depth as timm's drop_path;
///  - ModelEma: an exponential moving average of a model's weights, as timm's
///    ModelEmaV2 (parameters averaged, buffers copied);
///  - distillation_loss: DeiT's DistillationLoss, hard (teacher argmax) or
///    soft (temperature-scaled KL), for a student with a distillation head.
#pragma once

#include <memory>

#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/nn/module.h>

namespace ember::nn {

/// timm's drop_path: in training, each sample (dim 0) of x is kept with
/// probability 1 - p and scaled by 1 / (1 - p) (zeroed otherwise); identity
/// in eval or with p = 0. p = 1 drops every sample (no scaling, as timm).
/// The per-sample draw is rand() < 1 - p from gen (the default generator when
/// null), the same values on every backend.
Tensor drop_path(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

/// drop_path as a layer (timm's DropPath): drops the residual branch it wraps per sample.
class DropPath : public Module {
 public:
  /// The drop probability, in [0, 1].
  explicit DropPath(double p = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DropPath"; }
  double p;  ///< the drop probability
};

/// timm's ModelEmaV2 with buffers copied (ModelEmaV3's default): an averaged
/// copy of a model kept beside it. After each optimizer step call update(model):
///   ema_param = decay * ema_param + (1 - decay) * param   for every parameter,
///   ema_buffer = buffer                                     for every buffer.
/// The averaged model is a second instance of the same architecture (C++ has
/// no deepcopy of a Module): pass it in; it is loaded with model's state, put
/// in eval mode and frozen. Evaluate it alongside the raw model.
class ModelEma {
 public:
  /// ema_model: the same architecture as model (same state_dict names and shapes); decay in [0, 1].
  ModelEma(std::shared_ptr<Module> ema_model, const Module& model, double decay = 0.9999);
  /// One EMA step from model's current weights.
  void update(const Module& model);
  /// The averaged model.
  Module& module() const { return *ema_; }
  double decay;  ///< weight of the old average in each update

 private:
  std::shared_ptr<Module> ema_;
};

/// DeiT's distillation variants: none (base loss only), soft (KL at a temperature), hard (teacher's argmax).
enum class DistillType { None, Soft, Hard };

/// DeiT's DistillationLoss (deit/losses.py), given the student's base loss
/// (the criterion on the class-token head against the labels, computed by the
/// caller: mixup, label smoothing and the like stay its business):
///   hard: (1 - alpha) base + alpha CE(dist_logits, argmax teacher_logits)
///   soft: (1 - alpha) base + alpha T^2 sum KL(softmax(teacher/T) || softmax(dist/T)) / numel(dist_logits)
///         (DeiT divides the summed KL by N C, not by N)
///   none: base.
/// teacher_logits get no gradient. DeiT's hard recipe uses alpha = 0.5.
Tensor distillation_loss(const Tensor& base_loss, const Tensor& dist_logits, const Tensor& teacher_logits,
                         DistillType type, double alpha = 0.5, double tau = 1.0);

/// The same with the base loss cross_entropy(cls_logits, target, label_smoothing).
Tensor distillation_loss(const Tensor& cls_logits, const Tensor& dist_logits, const Tensor& teacher_logits,
                         const Tensor& target, DistillType type, double alpha = 0.5, double tau = 1.0,
                         double label_smoothing = 0.0);

}  // namespace ember::nn
