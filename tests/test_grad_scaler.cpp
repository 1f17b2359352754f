// GradScaler (optim/grad_scaler.h) against torch.cuda.amp.GradScaler's
// semantics: defaults, scaled backward and exact unscaling, a planted Inf or
// NaN skipping the step and backing the scale off, growth after
// growth_interval clean steps, state dicts, and misuse errors.
#include <limits>

#include "test_util.h"

using namespace ember;
using test::contains;
using test::error_of;

namespace {
// One SGD step's setup: y = sum(x W^T + b) for a fixed x.
struct Setup {
  nn::Linear lin{3, 2};
  optim::SGD opt{lin.parameters(), optim::SGDOptions{0.5}};
  Tensor x = tensor({{1.0, 2.0, -1.0}, {0.5, -0.5, 2.0}});
  Tensor loss() { return sum(lin.forward(x)); }
};
}  // namespace

TEST_CASE("GradScaler: PyTorch's defaults, scaled backward, exact unscale, the step of plain SGD") {
  optim::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.is_enabled());
  Setup s;
  const std::vector<float> w0 = s.lin.weight.to_vector<float>();
  scaler.scale(s.loss()).backward();
  // d sum(x W^T) / dW[o, i] = sum over rows of x[:, i]: (1.5, 1.5, 1), scaled.
  CHECK(s.lin.weight.grad().to_vector<float>() ==
        std::vector<float>{1.5f * 65536, 1.5f * 65536, 65536, 1.5f * 65536, 1.5f * 65536, 65536});
  CHECK(scaler.step(s.opt));
  const std::vector<float> w1 = s.lin.weight.to_vector<float>();
  const float dw[3] = {1.5f, 1.5f, 1.0f};
  for (int i = 0; i < 6; ++i) CHECK(w1[i] == w0[i] - 0.5f * dw[i % 3]);  // unscaled by a power of two: exact
  scaler.update();
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.growth_tracker() == 1);
}

TEST_CASE("GradScaler: a planted Inf or NaN skips the step and halves the scale") {
  for (const double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    optim::GradScaler scaler;
    Setup s;
    const std::vector<float> w0 = s.lin.weight.to_vector<float>(), b0 = s.lin.bias.to_vector<float>();
    scaler.scale(s.loss()).backward();
    {
      NoGradGuard no_grad;
      s.lin.bias.mutable_grad().narrow(0, 1, 1).fill_(bad);  // one element of one gradient
    }
    CHECK_FALSE(scaler.step(s.opt));
    CHECK(s.lin.weight.to_vector<float>() == w0);  // no parameter moved
    CHECK(s.lin.bias.to_vector<float>() == b0);
    scaler.update();
    CHECK(scaler.get_scale() == 32768.0);
    CHECK(scaler.growth_tracker() == 0);
  }
}

TEST_CASE("GradScaler: the scale grows after growth_interval clean steps, state dict round trip") {
  optim::GradScaler scaler({1024.0, 2.0, 0.5, 3, true});
  Setup s;
  for (int i = 0; i < 3; ++i) {
    s.opt.zero_grad();
    scaler.scale(s.loss()).backward();
    CHECK(scaler.step(s.opt));
    scaler.update();
  }
  CHECK(scaler.get_scale() == 2048.0);
  CHECK(scaler.growth_tracker() == 0);
  s.opt.zero_grad();
  scaler.scale(s.loss()).backward();
  scaler.step(s.opt);
  scaler.update();
  optim::GradScaler other;
  other.load_state_dict(scaler.state_dict());
  CHECK(other.get_scale() == 2048.0);
  CHECK(other.growth_tracker() == 1);
  // A float16 loss is scaled in float32: 65504 * 2048 would be Inf in float16.
  CHECK(scaler.scale(tensor({65504.0}, kFloat16)).dtype() == kFloat32);
  CHECK(std::isfinite(scaler.scale(tensor({65504.0}, kFloat16)).item<double>()));
}

TEST_CASE("GradScaler: misuse is an error, disabled is a pass-through") {
  optim::GradScaler scaler;
  Setup s;
  scaler.scale(s.loss()).backward();
  scaler.unscale_(s.opt);
  CHECK(contains(error_of<ValueError>([&] { scaler.unscale_(s.opt); }), "already been called"));
  scaler.step(s.opt);
  CHECK(contains(error_of<ValueError>([&] { scaler.step(s.opt); }), "already been called"));
  scaler.update();
  CHECK(contains(error_of<ValueError>([&] { scaler.update(); }), "no inf checks"));
  CHECK(contains(error_of<ValueError>([] { optim::GradScaler bad({0.0}); }), "init_scale"));
  optim::GradScaler off({65536.0, 2.0, 0.5, 2000, false});
  CHECK(off.get_scale() == 1.0);
  const Tensor l = s.loss();
  CHECK(off.scale(l).is_same(l));
}
