// drop_path / DropPath, ModelEma and DeiT's distillation loss (nn/regularize.h).
// The distillation values were computed by hand (plain-math log-softmax) and
// agree with DeiT's formula in PyTorch 1.13 to the last digit.
#include <doctest/doctest.h>

#include <cmath>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_values;

TEST_CASE("drop_path: identity in eval, per-sample keep with scale 1/(1-p) in training, gradient") {
  const Tensor x = add(randn({64, 3, 4}, TensorOptions(kFloat64)), 5.0);  // no zeros in x
  CHECK(nn::drop_path(x, 0.3, false).is_same(x));
  CHECK(nn::drop_path(x, 0.0, true).is_same(x));
  Generator g1(42), g2(42);
  const Tensor y = nn::drop_path(x, 0.25, true, &g1);
  check_values(y, nn::drop_path(x, 0.25, true, &g2).to_vector<double>(), 0);  // same seed, same masks
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  int kept = 0;
  for (int n = 0; n < 64; ++n) {
    // Every element of a sample shares one fate: all zero, or all x / 0.75.
    const bool keep = yv[n * 12] != 0;
    kept += keep;
    for (int i = 0; i < 12; ++i) CHECK(yv[n * 12 + i] == doctest::Approx(keep ? xv[n * 12 + i] / 0.75 : 0.0));
  }
  CHECK(kept > 32);  // Binomial(64, 0.75): mean 48, sd 3.5
  CHECK(kept < 64);
  Tensor xr = x.detach().requires_grad_();
  Generator g3(42);
  sum(nn::drop_path(xr, 0.25, true, &g3)).backward();
  const std::vector<double> gv = xr.grad().to_vector<double>();
  for (int n = 0; n < 64; ++n) CHECK(gv[n * 12] == doctest::Approx(yv[n * 12] != 0 ? 1 / 0.75 : 0.0));
  check_values(nn::drop_path(x, 1.0, true), std::vector<double>(x.numel(), 0.0), 0);
  CHECK_THROWS_AS(nn::drop_path(x, 1.5), ValueError);
  CHECK_THROWS_AS(nn::DropPath(-0.1), ValueError);
  nn::DropPath dp(0.5);
  dp.eval();
  CHECK(dp.forward(x).is_same(x));
}

TEST_CASE("ModelEma: ema = decay ema + (1 - decay) param, buffers copied, eval and frozen") {
  auto make = [] {
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(2, 2));
    m->push_back(std::make_shared<nn::BatchNorm1d>(2));
    return m;
  };
  auto model = make();
  nn::Linear& lin = dynamic_cast<nn::Linear&>((*model)[0]);
  {
    NoGradGuard no_grad;
    lin.weight.copy_(tensor({{1, 2}, {3, 4}}));
    lin.bias.copy_(tensor({0.5, -0.5}));
  }
  nn::ModelEma ema(make(), *model, 0.9);
  CHECK_FALSE(ema.module().is_training());
  auto& elin = dynamic_cast<nn::Linear&>(dynamic_cast<nn::Sequential&>(ema.module())[0]);
  check_values(elin.weight, {1, 2, 3, 4}, 0);  // starts as a copy
  CHECK_FALSE(elin.weight.requires_grad());
  {
    NoGradGuard no_grad;
    lin.weight.copy_(tensor({{11, 2}, {-7, 4}}));
    lin.bias.copy_(tensor({1.5, 0.5}));
  }
  model->forward(tensor({{1, 2}, {3, 5}, {0, 1}}));  // moves BatchNorm1d's running statistics
  ema.update(*model);
  // 0.9 old + 0.1 new: 1 -> 2, 3 -> 2, bias 0.5 -> 0.6, -0.5 -> -0.4.
  check_values(elin.weight, {2, 2, 2, 4}, 1e-6);
  check_values(elin.bias, {0.6, -0.4}, 1e-6);
  auto& ebn = dynamic_cast<nn::BatchNorm1d&>(dynamic_cast<nn::Sequential&>(ema.module())[1]);
  auto& bn = dynamic_cast<nn::BatchNorm1d&>((*model)[1]);
  check_values(ebn.running_mean, bn.running_mean.to_vector<double>(), 0);  // copied, not averaged
  check_values(ebn.running_var, bn.running_var.to_vector<double>(), 0);
  CHECK(ebn.num_batches_tracked.item<int64_t>() == 1);
  ema.update(*model);
  check_values(elin.weight, {2.9, 2, 1.1, 4}, 1e-6);  // 0.9 * 2 + 0.1 * 11, 0.9 * 2 - 0.1 * 7
  auto other = std::make_shared<nn::Linear>(2, 3);
  CHECK_THROWS_AS(ema.update(*other), ValueError);
  CHECK_THROWS_AS(nn::ModelEma(make(), *model, 1.5), ValueError);
}

TEST_CASE("distillation_loss: DeiT's hard and soft variants against hand-computed values") {
  const TensorOptions f64(kFloat64);
  const Tensor cls = tensor({{0, 0, 0}, {1, 2, 0.5}}, f64);
  const Tensor dist = tensor({{1, 0, -1}, {0.2, 0.3, 2.0}}, f64).requires_grad_();
  const Tensor teacher = tensor({{0, 2, 1}, {3, 0, 1}}, f64).requires_grad_();
  const Tensor target = tensor({0, 1}, TensorOptions(DType::Int64));
  // base = mean CE(cls, target) = 0.78149...; hard: teacher argmax (1, 0), CE(dist, .) = 1.75310...
  const Tensor hard = nn::distillation_loss(cls, dist, teacher, target, nn::DistillType::Hard);
  CHECK(hard.item<double>() == doctest::Approx(1.267299000587798).epsilon(1e-12));
  // soft, T = 2, alpha = 0.3: KL sum / (N C) * T^2 = 0.40395...
  const Tensor soft = nn::distillation_loss(cls, dist, teacher, target, nn::DistillType::Soft, 0.3, 2.0);
  CHECK(soft.item<double>() == doctest::Approx(0.6682298562685655).epsilon(1e-12));
  const Tensor none = nn::distillation_loss(cls, dist, teacher, target, nn::DistillType::None);
  CHECK(none.item<double>() == doctest::Approx(0.7814905363880275).epsilon(1e-12));
  // The teacher gets no gradient; the student's distillation head does.
  soft.backward();
  CHECK(dist.grad().defined());
  CHECK_FALSE(teacher.grad().defined());
  // Soft loss against itself is zero: KL(p || p).
  const Tensor same =
      nn::distillation_loss(scalar_tensor(0.0, f64), dist.detach(), dist.detach(), nn::DistillType::Soft, 1.0, 3.0);
  CHECK(same.item<double>() == doctest::Approx(0.0).epsilon(1e-12));
  CHECK_THROWS_AS(nn::distillation_loss(cls, dist, zeros({2, 4}, f64), target, nn::DistillType::Hard), ShapeError);
  CHECK_THROWS_AS(nn::distillation_loss(cls, dist, teacher, target, nn::DistillType::Soft, 0.5, 0.0), ValueError);
  CHECK_THROWS_AS(nn::distillation_loss(cls, dist, teacher, target, nn::DistillType::Hard, 1.5), ValueError);
}
