// Every default of the optimizers, LR schedulers and GradScaler against
// PyTorch 1.13's. The expected values are written out here, read from
// inspect.signature(torch.optim.SGD) and friends; the stepped values come
// from running the same calls under torch 1.13 in float64. OneCycleLR's
// momentum cycling (PyTorch's cycle_momentum=True) is not implemented: only
// its rates are compared.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

TEST_CASE("optim defaults: SGD as torch.optim.SGD (lr required, momentum 0, dampening 0, weight_decay 0)") {
  const optim::SGDOptions o;
  CHECK(std::isnan(o.lr));  // PyTorch 1.13: lr=<required parameter>
  CHECK(o.momentum == 0.0);
  CHECK(o.dampening == 0.0);
  CHECK(o.weight_decay == 0.0);
  CHECK(o.nesterov == false);
  Tensor p = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  // No lr anywhere: a clear error, as torch's "didn't specify a value of required optimization parameter lr".
  const std::string e = test::error_of<ValueError>([&] { optim::SGD opt({p}, optim::SGDOptions{}); });
  CHECK_MESSAGE(test::contains(e, "SGD: no learning rate for parameter group 0"), e);
  // An lr in every group is enough.
  optim::SGD by_group(std::vector<optim::ParamGroup>{{{p}, /*lr=*/0.5}}, optim::SGDOptions{});
  CHECK(by_group.param_groups()[0].lr == 0.5);
  CHECK(by_group.param_groups()[0].weight_decay == 0.0);
}

TEST_CASE("optim defaults: Adam as torch.optim.Adam (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0)") {
  const optim::AdamOptions o;
  CHECK(o.lr == 1e-3);
  CHECK(o.beta1 == 0.9);
  CHECK(o.beta2 == 0.999);
  CHECK(o.eps == 1e-8);
  CHECK(o.weight_decay == 0.0);
  Tensor p = tensor({1.0}, kFloat64).requires_grad_();
  optim::Adam opt({p}, {});
  CHECK(opt.param_groups()[0].lr == 1e-3);
  CHECK(opt.param_groups()[0].weight_decay == 0.0);
}

TEST_CASE("optim defaults: AdamW as torch.optim.AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2)") {
  for (const optim::AdamWOptions& o : {optim::AdamWOptions{}, optim::AdamW::defaults()}) {
    CHECK(o.lr == 1e-3);
    CHECK(o.beta1 == 0.9);
    CHECK(o.beta2 == 0.999);
    CHECK(o.eps == 1e-8);
    CHECK(o.weight_decay == 1e-2);
  }
  Tensor p = tensor({1.0}, kFloat64).requires_grad_();
  optim::AdamW none({p});
  CHECK(none.param_groups()[0].lr == 1e-3);
  CHECK(none.param_groups()[0].weight_decay == 1e-2);
  // Groups that set only their lr take the optimizer's weight decay.
  optim::AdamW groups(std::vector<optim::ParamGroup>{{{p}, /*lr=*/0.5}}, {.lr = 0.1});
  CHECK(groups.param_groups()[0].lr == 0.5);
  CHECK(groups.param_groups()[0].weight_decay == 1e-2);
}

TEST_CASE("optim defaults: AdamW given only lr still decays by 1e-2, as torch.optim.AdamW(params, lr=0.1)") {
  Tensor p = tensor({1.0, -2.0, 3.0, 0.0}, kFloat64).requires_grad_();
  const Tensor g = tensor({0.5, 0.25, -1.0, 2.0}, kFloat64);
  optim::AdamW opt({p}, {.lr = 0.1});
  CHECK(opt.param_groups()[0].weight_decay == 1e-2);
  // torch 1.13, two steps of loss = sum(p * g). With weight_decay 0 the
  // first step would give 0.900000002, -2.099999996, 3.099999999, -0.0999999995.
  const std::vector<std::vector<double>> want = {
      {0.899000002, -2.097999996, 3.096999999, -0.0999999995},
      {0.7981010039980005, -2.1959019920039995, 3.193902998000999, -0.19989999900049932}};
  for (const auto& w : want) {
    opt.zero_grad();
    sum(mul(p, g)).backward();
    opt.step();
    test::check_close(p.detach(), w, 1e-13);
  }
}

namespace {
// The rate of a one-group SGD (lr 1) after construction and after each of n steps.
std::vector<double> rates(const std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>& make, int n) {
  Tensor q = zeros({1}, kFloat64).requires_grad_();
  optim::SGD opt({q}, {.lr = 1.0});
  auto sched = make(opt);
  std::vector<double> out = {opt.param_groups()[0].lr};
  for (int i = 0; i < n; ++i) {
    sched->step();
    out.push_back(opt.param_groups()[0].lr);
  }
  return out;
}
void check_rates(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= 1e-12, "epoch ", i, ": ", got[i], " vs ", want[i]);
}
}  // namespace

TEST_CASE("optim defaults: LR schedulers' default arguments give torch 1.13's rates") {
  // StepLR(opt, 2): gamma=0.1
  check_rates(rates([](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 2); }, 5),
              {1.0, 1.0, 0.1, 0.1, 0.01, 0.01});
  // MultiStepLR(opt, [1, 3]): gamma=0.1
  check_rates(rates(
                  [](optim::Optimizer& o) {
                    return std::make_unique<optim::MultiStepLR>(o, std::vector<int64_t>{1, 3});
                  },
                  4),
              {1.0, 0.1, 0.1, 0.01, 0.01});
  // CosineAnnealingLR(opt, 4): eta_min=0
  check_rates(rates([](optim::Optimizer& o) { return std::make_unique<optim::CosineAnnealingLR>(o, 4); }, 4),
              {1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0});
  // LinearLR(opt): start_factor=1/3, end_factor=1, total_iters=5
  check_rates(rates([](optim::Optimizer& o) { return std::make_unique<optim::LinearLR>(o); }, 6),
              {1.0 / 3, 0.4666666666666667, 0.6, 0.7333333333333335, 0.8666666666666669, 1.0, 1.0});
  // OneCycleLR(opt, 1.0, total_steps=100): pct_start=0.3, 'cos', div_factor=25, final_div_factor=1e4
  const std::vector<double> one =
      rates([](optim::Optimizer& o) { return std::make_unique<optim::OneCycleLR>(o, 1.0, 100); }, 99);
  check_rates({one[0], one[29], one[60], one[99]}, {0.04, 1.0, 0.5892800902855287, 4e-06});
  // WarmupCosineLR (not in PyTorch) starts at LinearLR's start_factor.
  check_rates(rates([](optim::Optimizer& o) { return std::make_unique<optim::WarmupCosineLR>(o, 2, 10); }, 0),
              {1.0 / 3});
}

TEST_CASE(
    "optim defaults: ReduceLROnPlateau as torch 1.13 (min, 0.1, patience 10, 1e-4 rel, cooldown 0, min_lr 0, "
    "eps 1e-8)") {
  const optim::ReduceLROnPlateau::Options o;
  CHECK(o.mode == optim::PlateauMode::Min);
  CHECK(o.factor == 0.1);
  CHECK(o.patience == 10);
  CHECK(o.threshold == 1e-4);
  CHECK(o.threshold_mode == optim::ThresholdMode::Rel);
  CHECK(o.cooldown == 0);
  CHECK(o.min_lr == 0.0);
  CHECK(o.eps == 1e-8);
  // A constant metric: torch cuts the rate at the 12th step.
  Tensor q = zeros({1}, kFloat64).requires_grad_();
  optim::SGD opt({q}, {.lr = 1.0});
  optim::ReduceLROnPlateau sched(opt);
  std::vector<double> got;
  for (int i = 0; i < 13; ++i) {
    sched.step(1.0);
    got.push_back(opt.param_groups()[0].lr);
  }
  check_rates(got, {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.1});
}

TEST_CASE("optim defaults: GradScaler as torch.cuda.amp.GradScaler (2^16, 2.0, 0.5, 2000, enabled)") {
  const optim::GradScalerOptions o;
  CHECK(o.init_scale == 65536.0);
  CHECK(o.growth_factor == 2.0);
  CHECK(o.backoff_factor == 0.5);
  CHECK(o.growth_interval == 2000);
  CHECK(o.enabled == true);
  const optim::GradScaler scaler;
  CHECK(scaler.is_enabled());
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.growth_tracker() == 0);
}
