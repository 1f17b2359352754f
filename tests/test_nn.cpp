// nn::Module and the basic layers: names, modes, state dicts, defaults, and
// a small model trained end to end with an optimizer.
#include <doctest/doctest.h>

#include <cmath>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::contains;
using test::error_of;

namespace {
std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.5),
      std::make_shared<nn::Linear>(8, 2)});
}
std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("nn: parameters are named like PyTorch and counted") {
  auto m = mlp();
  CHECK(names(m->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"});
  CHECK(m->num_parameters() == 4 * 8 + 8 + 8 * 2 + 2);
  CHECK(m->parameters()[0].requires_grad());
  std::vector<std::string> mods;
  for (auto& [n, p] : m->named_modules()) mods.push_back(n + ":" + p->type_name());
  CHECK(mods == std::vector<std::string>{":Sequential", "0:Linear", "1:ReLU", "2:Dropout", "3:Linear"});
  nn::BatchNorm1d bn(3);
  CHECK(names(bn.state_dict()) ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
}

TEST_CASE("nn: train/eval reaches every child, dropout is off in eval") {
  auto m = mlp();
  m->eval();
  for (auto& [n, p] : m->named_modules()) CHECK(!p->is_training());
  const Tensor x = randn({5, 4});
  CHECK(allclose((*m)(x), (*m)(x), 0, 0));
  m->train();
  CHECK((*m)[2].is_training());
}

TEST_CASE("nn: state dict round trip and load errors by name") {
  auto a = mlp(), b = mlp();
  a->eval();
  b->eval();
  const Tensor x = randn({3, 4});
  CHECK(!allclose((*a)(x), (*b)(x)));
  const Tensor handle = b->parameters()[0];
  b->load_state_dict(a->state_dict());
  CHECK(allclose((*a)(x), (*b)(x), 0, 0));
  CHECK(handle.is_same(b->parameters()[0]));  // loaded in place: optimizers keep their handles

  nn::StateDict sd = a->state_dict();
  sd.erase(sd.begin() + 1);  // drop "0.bias"
  sd.emplace_back("head.weight", zeros({2}));
  const std::string msg = error_of<ValueError>([&] { b->load_state_dict(sd); });
  CHECK(contains(msg, "missing keys: \"0.bias\""));
  CHECK(contains(msg, "unexpected keys: \"head.weight\""));
  const nn::LoadResult r = b->load_state_dict(sd, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"0.bias"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"head.weight"});
  nn::StateDict bad = a->state_dict();
  bad[0].second = zeros({8, 5});
  const std::string shape_msg = error_of<ShapeError>([&] { b->load_state_dict(bad, false); });
  CHECK(contains(shape_msg, "0.weight"));
  CHECK(contains(shape_msg, "[8, 5]"));
  CHECK(contains(shape_msg, "[8, 4]"));
}

TEST_CASE("nn: default initialisation follows PyTorch") {
  manual_seed(1);
  nn::Linear lin(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);
  CHECK(amax(abs(lin.weight), {}).item<double>() <= bound);
  CHECK(amax(abs(lin.weight), {}).item<double>() > 0.9 * bound);
  CHECK(amax(abs(lin.bias), {}).item<double>() <= bound);
  nn::Embedding emb(10, 4, 0);
  CHECK(allclose(emb.weight[0], zeros({4})));
  nn::LayerNorm ln({4});
  CHECK(allclose(ln.weight, ones({4})));
  Tensor w = empty({300, 200});
  nn::init::xavier_uniform_(w);
  CHECK(amax(abs(w), {}).item<double>() <= std::sqrt(6.0 / 500.0));
  nn::init::trunc_normal_(w, 0.0, 1.0, -0.5, 0.5);
  CHECK(amax(abs(w), {}).item<double>() <= 0.5);
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::ReLU) == doctest::Approx(std::sqrt(2.0)));
}

TEST_CASE("nn: init modes are enums, parsed from PyTorch's strings") {
  using nn::init::FanMode;
  using nn::init::Nonlinearity;
  CHECK(nn::init::nonlinearity("relu") == Nonlinearity::ReLU);
  CHECK(nn::init::nonlinearity("conv_transpose2d") == Nonlinearity::ConvTranspose2d);
  CHECK(std::string(nn::init::nonlinearity_name(Nonlinearity::LeakyReLU)) == "leaky_relu");
  CHECK_THROWS_WITH_AS(nn::init::nonlinearity("swish"), doctest::Contains("unsupported nonlinearity 'swish'"),
                       ValueError);
  CHECK(nn::init::fan_mode("fan_out") == FanMode::FanOut);
  CHECK(std::string(nn::init::fan_mode_name(FanMode::FanIn)) == "fan_in");
  CHECK_THROWS_WITH_AS(nn::init::fan_mode("fan_avg"), doctest::Contains("fan_in or fan_out"), ValueError);
  CHECK(nn::init::calculate_gain(Nonlinearity::Tanh) == doctest::Approx(5.0 / 3.0));
  CHECK(nn::init::calculate_gain(Nonlinearity::LeakyReLU, 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)));
  CHECK(nn::init::calculate_gain(Nonlinearity::Conv2d) == 1.0);
  // kaiming_normal_(fan_out, relu) on a (64, 32, 3, 3) conv weight: std = sqrt(2 / (64 * 9)).
  Generator g(7);
  Tensor w = empty({64, 32, 3, 3});
  nn::init::kaiming_normal_(w, 0, FanMode::FanOut, Nonlinearity::ReLU, &g);
  const double sd = std::sqrt(mean(square(w)).item<double>());
  CHECK(sd == doctest::Approx(std::sqrt(2.0 / 576.0)).epsilon(0.03));
}

TEST_CASE("nn: BatchNorm1d uses batch statistics in training and running ones in eval") {
  nn::BatchNorm1d bn(2);
  const Tensor x = tensor({{1, 2}, {3, 6}, {5, 7}});
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  test::check_close(bn.running_mean, {0.3, 0.5}, 1e-6);
  bn.eval();
  const Tensor y = bn(x);
  CHECK(y.at<float>({0, 0}) == doctest::Approx((1 - 0.3) / std::sqrt(1.3 + 1e-5)).epsilon(1e-5));
}

TEST_CASE("nn: a small MLP learns a nonlinear function with AdamW") {
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(1, 32), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(32, 1)});
  optim::AdamW opt(model->parameters(), optim::AdamWOptions{0.01, 0.9, 0.999, 1e-8, 0.0});
  const Tensor x = linspace(-2, 2, 64).unsqueeze(1);
  const Tensor y = sin(mul(x, 2.0));
  double first = 0, last = 0;
  for (int step = 0; step < 500; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss((*model)(x), y);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  CHECK(last < 0.02);
  CHECK(last < first / 10);
}

TEST_CASE("init: SkipInitGuard leaves tensors and the generator as they are") {
  Tensor t = full({4, 3}, 7.0);
  const uint64_t seed = 1234;
  manual_seed(seed);
  const std::vector<float> draws = randn({8}).to_vector<float>();
  manual_seed(seed);
  {
    nn::init::SkipInitGuard skip;
    { nn::init::SkipInitGuard nested; }
    CHECK(nn::init::SkipInitGuard::active());
    nn::init::normal_(t);
    nn::init::kaiming_uniform_(t, std::sqrt(5.0));
    nn::init::trunc_normal_(t);
    nn::init::zeros_(t);
    nn::Linear built(3, 4);  // its init is skipped too
    (void)built;
  }
  CHECK(!nn::init::SkipInitGuard::active());
  CHECK(t.to_vector<float>() == std::vector<float>(12, 7.0f));
  CHECK(randn({8}).to_vector<float>() == draws);  // nothing drawn under the guard
  nn::init::zeros_(t);
  CHECK(t.to_vector<float>() == std::vector<float>(12, 0.0f));
}
