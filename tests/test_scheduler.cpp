// LR schedulers: rate sequences equal to PyTorch's over every phase
// (tools/reference_scheduler.py), and state round trips.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include <ember/ember.h>

using namespace ember;

namespace {
using Make = std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>;

void check_seq(const Make& make, const std::vector<double>& want) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{0.1});
  auto s = make(opt);
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK_MESSAGE(std::fabs(opt.param_groups()[0].lr - want[i]) < 1e-12, "step ", i, ": ", opt.param_groups()[0].lr,
                  " vs ", want[i]);
    opt.step();
    s->step();
  }
}
}  // namespace

TEST_CASE("schedulers: StepLR, MultiStepLR, ExponentialLR") {
  check_seq([](auto& o) { return std::make_unique<optim::StepLR>(o, 3, 0.5); },
            {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125});
  check_seq(
      [](auto& o) {
        return std::make_unique<optim::MultiStepLR>(o, std::vector<int64_t>{2, 5, 6}, 0.1);
      },
      {0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.0001, 0.0001});
  check_seq([](auto& o) { return std::make_unique<optim::ExponentialLR>(o, 0.9); },
            {0.1, 0.09, 0.081, 0.0729, 0.06561, 0.059049});
}

TEST_CASE("schedulers: CosineAnnealingLR past T_max, LinearLR, warm-up + cosine") {
  check_seq([](auto& o) { return std::make_unique<optim::CosineAnnealingLR>(o, 5, 0.01); },
            {0.1, 0.09140576474687, 0.06890576474687, 0.04109423525313, 0.01859423525313, 0.01, 0.01859423525313,
             0.04109423525313, 0.06890576474687, 0.09140576474687, 0.1, 0.09140576474687});
  check_seq([](auto& o) { return std::make_unique<optim::LinearLR>(o, 0.25, 1.0, 4); },
            {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1, 0.1});
  check_seq([](auto& o) { return std::make_unique<optim::WarmupCosineLR>(o, 3, 10, 0.001, 0.1); },
            {0.01, 0.04, 0.07, 0.1, 0.09509795896117, 0.08136274519201, 0.06151478623084, 0.03948521376916,
             0.01963725480799, 0.00590204103883});
}

TEST_CASE("schedulers: NanoGPTCosineLR equals nanoGPT's get_lr bit for bit") {
  // nanoGPT's train.py get_lr, transcribed: the reference the rates must equal exactly.
  auto get_lr = [](int64_t it, double lr, double min_lr, int64_t warmup, int64_t iters) {
    if (it < warmup) return lr * static_cast<double>(it + 1) / static_cast<double>(warmup + 1);
    if (it >= iters) return min_lr;
    const double r = static_cast<double>(it - warmup) / static_cast<double>(std::max<int64_t>(1, iters - warmup));
    return min_lr + 0.5 * (1.0 + std::cos(M_PI * r)) * (lr - min_lr);
  };
  struct Case {
    double lr, min_lr;
    int64_t warmup, iters;
  };
  for (const Case& k :
       {Case{1e-3, 1e-4, 100, 1500}, Case{1e-3, 1e-4, 100, 2000}, Case{3e-4, 0.0, 0, 37}, Case{1e-2, 1e-3, 10, 5}}) {
    Tensor p = zeros({1}).requires_grad_();
    optim::AdamW opt({optim::ParamGroup{{p}}, optim::ParamGroup{{zeros({1}).requires_grad_()}, -1, 0.0}},
                     optim::AdamWOptions{.lr = k.lr});
    optim::NanoGPTCosineLR s(opt, k.warmup, k.iters, k.min_lr);
    for (int64_t it = 0; it < k.iters + 3; ++it) {
      for (const optim::ParamGroup& g : opt.param_groups())
        CHECK_MESSAGE(g.lr == get_lr(it, k.lr, k.min_lr, k.warmup, k.iters), "iteration ", it, ": ", g.lr);
      s.step();
    }
    // A checkpoint's last_epoch puts the rates back where they were.
    optim::NanoGPTCosineLR r(opt, k.warmup, k.iters, k.min_lr);
    r.load_state_dict(s.state_dict());
    CHECK(r.last_epoch() == s.last_epoch());
    CHECK(opt.param_groups()[0].lr == get_lr(s.last_epoch(), k.lr, k.min_lr, k.warmup, k.iters));
  }
  Tensor q = zeros({1}).requires_grad_();
  optim::SGD sgd({q}, optim::SGDOptions{0.1});
  CHECK_THROWS_AS(optim::NanoGPTCosineLR(sgd, -1, 10, 0.0), ValueError);
}

TEST_CASE("schedulers: OneCycleLR, cosine and linear") {
  check_seq([](auto& o) { return std::make_unique<optim::OneCycleLR>(o, 1.0, 10, 0.25); },
            {0.04, 0.76, 0.9890738440717, 0.90450887915348, 0.750001, 0.5522660225769, 0.34549412084652,
             0.16543803508178, 0.04323109826961, 4e-06});
  check_seq([](auto& o) { return std::make_unique<optim::OneCycleLR>(o, 1.0, 10, 0.3, optim::AnnealStrategy::Linear); },
            {0.04, 0.52, 1.0, 0.85714342857143, 0.71428685714286, 0.57143028571429, 0.42857371428571, 0.28571714285714,
             0.14286057142857, 4e-06});
}

TEST_CASE("schedulers: ReduceLROnPlateau with patience, cooldown and min_lr") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{0.1});
  optim::ReduceLROnPlateau::Options o;
  o.factor = 0.5;
  o.patience = 2;
  o.cooldown = 1;
  o.min_lr = 0.02;
  optim::ReduceLROnPlateau s(opt, o);
  const std::vector<double> metric = {1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6};
  const std::vector<double> want = {0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025};
  for (size_t i = 0; i < metric.size(); ++i) {
    CHECK(std::fabs(opt.param_groups()[0].lr - want[i]) < 1e-12);
    s.step(metric[i]);
  }
  // State round trip into a fresh scheduler.
  Tensor p2 = zeros({1}).requires_grad_();
  optim::SGD opt2({p2}, optim::SGDOptions{0.1});
  optim::ReduceLROnPlateau s2(opt2, o);
  s2.load_state_dict(s.state_dict());
  CHECK(s2.best() == 0.5);
  CHECK(opt2.param_groups()[0].lr == opt.param_groups()[0].lr);
}

TEST_CASE("schedulers: ReduceLROnPlateau in max mode with an absolute threshold, modes parsed from strings") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{0.1});
  optim::ReduceLROnPlateau s(opt, {.mode = optim::PlateauMode::Max,
                                   .factor = 0.5,
                                   .patience = 1,
                                   .threshold = 0.1,
                                   .threshold_mode = optim::ThresholdMode::Abs});
  // An improvement is a metric above best + 0.1: 0.55 and 0.58 are not (a cut after two), 0.7 is.
  const std::vector<double> metric = {0.5, 0.55, 0.58, 0.7, 0.65};
  const std::vector<double> want = {0.1, 0.1, 0.05, 0.05, 0.05};
  for (size_t i = 0; i < metric.size(); ++i) {
    s.step(metric[i]);
    CHECK(std::fabs(opt.param_groups()[0].lr - want[i]) < 1e-12);
  }
  CHECK(s.best() == 0.7);
  CHECK(optim::plateau_mode("max") == optim::PlateauMode::Max);
  CHECK(optim::threshold_mode("abs") == optim::ThresholdMode::Abs);
  CHECK(optim::anneal_strategy("linear") == optim::AnnealStrategy::Linear);
  CHECK_THROWS_WITH_AS(optim::plateau_mode("up"), doctest::Contains("min or max"), ValueError);
  CHECK_THROWS_WITH_AS(optim::threshold_mode("pct"), doctest::Contains("rel or abs"), ValueError);
  CHECK_THROWS_WITH_AS(optim::anneal_strategy("cosine"), doctest::Contains("cos or linear"), ValueError);
}

TEST_CASE("schedulers: state round trip resumes the sequence") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD a({p}, optim::SGDOptions{0.1}), b({p}, optim::SGDOptions{0.1});
  optim::CosineAnnealingLR sa(a, 8), sb(b, 8);
  for (int i = 0; i < 5; ++i) sa.step();
  sb.load_state_dict(sa.state_dict());
  CHECK(sb.last_epoch() == 5);
  CHECK(b.param_groups()[0].lr == a.param_groups()[0].lr);
  sa.step();
  sb.step();
  CHECK(b.param_groups()[0].lr == a.param_groups()[0].lr);
}
