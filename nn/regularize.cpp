// drop_path, ModelEma and DeiT's distillation loss (nn/regularize.h), composed
// from existing ops, so their backward and CUDA support come from those ops.
#include <ember/nn/regularize.h>

#include <cmath>
#include <map>

#include <ember/core/autograd.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/loss.h>
#include <ember/ops/reduce.h>
#include <ember/ops/softmax.h>

namespace ember::nn {

Tensor drop_path(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(p >= 0 && p <= 1, ValueError, "drop_path: probability has to be between 0 and 1, got ", p);
  if (!training || p == 0) return x;
  EMBER_CHECK(x.dim() >= 1 && x.is_floating_point(), ValueError,
              "drop_path: expected a floating-point input with a batch dim, got ", dtype_name(x.dtype()), " of shape ",
              x.shape().str());
  const double keep = 1.0 - p;
  // One draw per sample, broadcast over the rest: shape (N, 1, ..., 1).
  std::vector<int64_t> s(static_cast<size_t>(x.dim()), 1);
  s[0] = x.size(0);
  const Tensor u = rand(Shape(s), TensorOptions(x.dtype(), x.device()), gen);
  Tensor mask = lt(u, keep).to(x.dtype());  // Bernoulli(keep)
  if (keep > 0) mask = mul(mask, 1.0 / keep);
  return mul(x, mask);
}

DropPath::DropPath(double prob) : p(prob) {
  EMBER_CHECK(p >= 0 && p <= 1, ValueError, "DropPath: probability has to be between 0 and 1, got ", p);
}

Tensor DropPath::forward(const Tensor& x) { return drop_path(x, p, is_training()); }

ModelEma::ModelEma(std::shared_ptr<Module> ema_model, const Module& model, double d)
    : decay(d), ema_(std::move(ema_model)) {
  EMBER_CHECK(ema_, ValueError, "ModelEma: the averaged model is null");
  EMBER_CHECK(decay >= 0 && decay <= 1, ValueError, "ModelEma: decay has to be between 0 and 1, got ", decay);
  ema_->load_state_dict(model.state_dict(), true);
  ema_->eval();
  for (Tensor& t : ema_->parameters()) t.requires_grad_(false);
}

void ModelEma::update(const Module& model) {
  NoGradGuard no_grad;
  const auto src = model.named_parameters();
  auto dst = ema_->named_parameters();
  EMBER_CHECK(src.size() == dst.size(), ValueError, "ModelEma: the model has ", src.size(),
              " parameters, the averaged model ", dst.size());
  for (size_t i = 0; i < src.size(); ++i) {
    EMBER_CHECK(src[i].first == dst[i].first && src[i].second.shape() == dst[i].second.shape(), ValueError,
                "ModelEma: parameter ", i, " is ", src[i].first, " ", src[i].second.shape().str(), " in the model but ",
                dst[i].first, " ", dst[i].second.shape().str(), " in the averaged model");
    Tensor e = dst[i].second;
    mul_(e, decay);
    add_(e, src[i].second.detach(), 1.0 - decay);
  }
  const auto bsrc = model.named_buffers();
  auto bdst = ema_->named_buffers();
  EMBER_CHECK(bsrc.size() == bdst.size(), ValueError, "ModelEma: the model has ", bsrc.size(),
              " buffers, the averaged model ", bdst.size());
  for (size_t i = 0; i < bsrc.size(); ++i) {
    EMBER_CHECK(bsrc[i].first == bdst[i].first && bsrc[i].second.shape() == bdst[i].second.shape(), ValueError,
                "ModelEma: buffer ", bsrc[i].first, " does not match the averaged model's ", bdst[i].first);
    bdst[i].second.copy_(bsrc[i].second);
  }
}

Tensor distillation_loss(const Tensor& base_loss, const Tensor& dist_logits, const Tensor& teacher_logits,
                         DistillType type, double alpha, double tau) {
  if (type == DistillType::None) return base_loss;
  EMBER_CHECK(alpha >= 0 && alpha <= 1, ValueError, "distillation_loss: alpha has to be between 0 and 1, got ", alpha);
  EMBER_CHECK(dist_logits.dim() == 2 && teacher_logits.shape() == dist_logits.shape(), ShapeError,
              "distillation_loss: expected student and teacher logits of one shape (N, C), got ",
              dist_logits.shape().str(), " and ", teacher_logits.shape().str());
  const Tensor teacher = teacher_logits.detach();
  Tensor distill;
  if (type == DistillType::Hard) {
    distill = cross_entropy(dist_logits, argmax(teacher, 1));
  } else {
    EMBER_CHECK(tau > 0 && std::isfinite(tau), ValueError, "distillation_loss: temperature has to be positive, got ",
                tau);
    // F.kl_div(log_softmax(s/T), log_softmax(t/T), 'sum', log_target=True) = sum exp(lt) (lt - ls).
    const Tensor ls = log_softmax(mul(dist_logits, 1.0 / tau), 1);
    const Tensor lt = log_softmax(mul(teacher, 1.0 / tau), 1);
    distill = mul(sum(mul(exp(lt), sub(lt, ls))), tau * tau / static_cast<double>(dist_logits.numel()));
  }
  return add(mul(base_loss, 1.0 - alpha), mul(distill, alpha));
}

Tensor distillation_loss(const Tensor& cls_logits, const Tensor& dist_logits, const Tensor& teacher_logits,
                         const Tensor& target, DistillType type, double alpha, double tau, double label_smoothing) {
  const Tensor base = cross_entropy(cls_logits, target, Reduction::Mean, -100, label_smoothing);
  return distillation_loss(base, dist_logits, teacher_logits, type, alpha, tau);
}

}  // namespace ember::nn
