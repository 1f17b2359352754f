// Known answers for max_pool2d, avg_pool2d, adaptive_avg_pool2d and
// BatchNorm2d (values from PyTorch 1.13 via tools/reference_pool.py), the
// pooling ops' errors, and the small ResNet's names and a training step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_values;

namespace {

// ((i * 37) % 61) / 10 - 3 for i < 60 as (1, 2, 5, 6): distinct values, no ties.
Tensor pool_input() {
  std::vector<double> v(60);
  for (int i = 0; i < 60; ++i) v[i] = static_cast<double>((i * 37) % 61) / 10 - 3;
  return from_vector(v, {1, 2, 5, 6});
}

}  // namespace

TEST_CASE("max_pool2d: values and argmax indices as PyTorch, gradient to the winners") {
  Tensor x = pool_input().requires_grad_();
  auto [y, idx] = max_pool2d_with_indices(x, {3, 2}, {2, 2}, {1, 1});
  CHECK(y.shape() == Shape{1, 2, 3, 4});
  check_values(y, {0.9, 2.2, 2.0, 1.1, 2.6, 2.4, 1.5, 2.8, 2.6, 1.7, 3.0, 2.8,
                   2.1, 1.9, 1.0, 2.3, 2.1, 1.4, 2.7, 2.3, 1.6, 2.9, 2.7, 1.8});
  CHECK(idx.dtype() == DType::Int64);
  check_values(idx, {6, 8, 3, 11, 18, 13, 21, 23, 18, 26, 28, 23, 6, 1, 9, 11, 6, 19, 21, 11, 24, 26, 21, 29}, 0);
  sum(y).backward();
  // Each output's gradient lands on its argmax: x.grad counts the wins.
  std::vector<double> wins(60, 0);
  const std::vector<int64_t> ix = idx.to_vector<int64_t>();
  for (size_t o = 0; o < ix.size(); ++o) wins[(o / 12) * 30 + ix[o]] += 1;
  check_values(x.grad(), wins, 0);
  // Stride defaults to the kernel; padding at most half the kernel.
  CHECK(max_pool2d(pool_input(), {2, 2}).shape() == Shape{1, 2, 2, 3});
  CHECK(test::contains(test::error_of<ValueError>([] {
                         max_pool2d(pool_input(), {2, 2}, {1, 1}, {2, 0});
                       }),
                       "at most half"));
  CHECK(test::contains(test::error_of<ShapeError>([] { max_pool2d(zeros({2, 5, 6}), {2, 2}); }), "(N, C, H, W)"));
  CHECK_THROWS_AS(max_pool2d(pool_input(), {7, 2}), ShapeError);
  CHECK_THROWS_AS(max_pool2d(pool_input(), {0, 2}), ValueError);
  // NaN wins its window (PyTorch propagates it).
  const Tensor n = tensor({1.0, std::nan(""), 3.0, 2.0}).reshape({1, 1, 2, 2});
  CHECK(std::isnan(max_pool2d(n, {2, 2}).item<double>()));
}

TEST_CASE("avg_pool2d: count_include_pad both ways, gradient, as PyTorch") {
  Tensor x = pool_input().requires_grad_();
  const Tensor y = avg_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  CHECK(y.shape() == Shape{1, 2, 3, 3});
  check_values(y,
               {-0.3222222222, 0.1666666667, -0.3222222222, 0.3666666667, 0.0, -0.0555555556, 0.1333333333,
                -0.1666666667, 0.7, 0.2111111111, -0.3888888889, -0.2, -0.1888888889, -0.1555555556, 0.4666666667,
                -0.0111111111, 0.6333333333, 0.1444444444},
               1e-9);
  check_values(avg_pool2d(pool_input(), {3, 3}, {2, 2}, {1, 1}, false),
               {-0.725, 0.25, -0.4833333333, 0.55, 0.0, -0.0555555556, 0.3, -0.25, 1.05, 0.475, -0.5833333333, -0.3,
                -0.2833333333, -0.1555555556, 0.4666666667, -0.025, 0.95, 0.2166666667},
               1e-9);
  test::weighted_backward(y);
  check_values(
      x.grad(),
      {0.0111111111, 0.0333333333, 0.0222222222, 0.0555555556, 0.0333333333, 0.0333333333, 0.0555555556, 0.1333333333,
       0.0777777778, 0.1777777778, 0.1,          0.1,          0.0444444444, 0.1,          0.0555555556, 0.1222222222,
       0.0666666667, 0.0666666667, 0.1222222222, 0.2666666667, 0.1444444444, 0.3111111111, 0.1666666667, 0.1666666667,
       0.0777777778, 0.1666666667, 0.0888888889, 0.1888888889, 0.1,          0.1,          0.1111111111, 0.2333333333,
       0.1222222222, 0.2555555556, 0.1333333333, 0.1333333333, 0.2555555556, 0.5333333333, 0.2777777778, 0.5777777778,
       0.3,          0.3,          0.1444444444, 0.3,          0.1555555556, 0.3222222222, 0.1666666667, 0.1666666667,
       0.3222222222, 0.6666666667, 0.3444444444, 0.7111111111, 0.3666666667, 0.3666666667, 0.1777777778, 0.3666666667,
       0.1888888889, 0.3888888889, 0.2,          0.2},
      1e-9);
  CHECK_THROWS_AS(avg_pool2d(pool_input(), {2, 2}, {-1, 1}), ValueError);
  CHECK_THROWS_AS(avg_pool2d(tensor({1, 2}), {1, 1}), ShapeError);
}

TEST_CASE("adaptive_avg_pool2d: PyTorch's start/end windows, global pool, errors") {
  check_values(
      adaptive_avg_pool2d(pool_input(), {3, 4}),
      {-0.725, -0.075, -0.3,   -1.175, 0.55,          0.1833333333, -0.55, 0.1,          0.3,    -0.575, 0.725, 1.375,
       0.475,  -0.4,   -0.625, 0.025,  -0.2833333333, -0.65,        0.65,  0.2833333333, -0.025, 0.625,  0.4,   -0.475},
      1e-9);
  check_values(adaptive_avg_pool2d(pool_input(), {1, 1}), {0.02, 0.0}, 1e-9);
  // Output larger than the input: windows of one pixel, repeated.
  const Tensor up = adaptive_avg_pool2d(arange(0, 4, 1, TensorOptions(kFloat64)).reshape({1, 1, 2, 2}), {4, 4});
  check_values(up, {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3}, 0);
  CHECK_THROWS_AS(adaptive_avg_pool2d(pool_input(), {0, 1}), ValueError);
  CHECK_THROWS_AS(adaptive_avg_pool2d(zeros({1, 1, 0, 3}), {1, 1}), ShapeError);
}

TEST_CASE("BatchNorm2d: batch statistics, running statistics and eval as PyTorch") {
  nn::BatchNorm2d bn(3, 1e-5, 0.1, true, true, TensorOptions(kFloat64));
  {
    NoGradGuard no_grad;
    bn.weight.copy_(tensor({1.5, -0.5, 2.0}, TensorOptions(kFloat64)));
    bn.bias.copy_(tensor({0.1, 0.2, -0.3}, TensorOptions(kFloat64)));
  }
  std::vector<double> av(48);
  for (int i = 0; i < 48; ++i) av[i] = static_cast<double>((i * 13) % 17) / 4 - 1;
  const Tensor a = from_vector(av, {2, 3, 2, 4});
  const Tensor b = add(mul(cat({a.narrow(0, 1, 1), a.narrow(0, 0, 1)}, 0), 2.0), 0.5);  // a.flip(0) * 2 + 0.5
  check_values(bn.forward(a),
               {-2.3505454041, 1.5703272425,  0.3639048897, -0.8425174631, -2.0489398159, 1.8719328307, 0.6655104779,
                -0.5409118749, 0.79999808,    -0.49999776,  -0.09999904,   0.29999968,    0.6999984,    -0.59999744,
                -0.19999872,   0.2,           -1.858295539, -3.4668586761, 1.7609715194,  0.1524083823, -1.4561547548,
                -3.0647178918, 2.1631123036,  0.5545491666, -0.5409118749, -1.7473342277, 2.1735384189, 0.9671160661,
                -0.2393062867, -1.4457286395, 2.4751440071, 1.2687216543,  0.2,           0.59999872,   0.99999744,
                -0.2999984,    0.10000032,    0.49999904,   0.89999776,    -0.39999808,   0.5545491666, -1.0540139705,
                -2.6625771076, 2.5652530879,  0.9566899508, -0.6518731862, -2.2604363233, 2.9673938722},
               1e-9);
  bn.forward(b);
  check_values(bn.running_mean, {0.3490625, 0.34, 0.3309375}, 1e-9);
  check_values(bn.running_var, {1.6179895833, 1.6266666667, 1.6179895833}, 1e-9);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  bn.eval();
  check_values(bn.forward(a),
               {-1.4908679286, 2.3416607851,  1.1624211809,  -0.0168184233, -1.1960580275, 2.6364706862, 1.457231082,
                0.2779914778,  0.5293052631,  -0.744792481,  -0.3527624059, 0.0392676692,  0.4312977443, -0.8427999998,
                -0.4507699247, -0.0587398496, -0.8203394754, -2.3926589476, 2.7173793373,  1.145059865,  -0.4272596073,
                -1.9995790796, 3.1104592053,  1.5381397331,  0.2779914778,  -0.9012481265, 2.9312805872, 1.752040983,
                0.5728013788,  -0.6064382254, 3.2260904883,  2.0468508841,  -0.0587398496, 0.3332902255, 0.7253203006,
                -0.5487774435, -0.1567473683, 0.2352827068,  0.6273127819,  -0.6467849622, 1.5381397331, -0.0341797392,
                -1.6064992115, 3.5035390734,  1.9312196011,  0.3589001289,  -1.2134193434, 3.8966189415},
               1e-9);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.type_name() == "BatchNorm2d");
  CHECK(test::contains(test::error_of<ShapeError>([&] {
                         bn.forward(zeros({2, 3}, TensorOptions(kFloat64)));
                       }),
                       "(N, C, H, W)"));
  CHECK_THROWS_AS(bn.forward(zeros({2, 4, 2, 2}, TensorOptions(kFloat64))), ShapeError);
}

TEST_CASE("batch_norm on (N, C, H, W): gradcheck through the batch statistics") {
  const Tensor x = randn({3, 2, 2, 3}, TensorOptions(kFloat64)).requires_grad_();
  const Tensor w = tensor({1.5, -0.7}, TensorOptions(kFloat64)).requires_grad_();
  const Tensor b = tensor({0.2, 0.1}, TensorOptions(kFloat64)).requires_grad_();
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2]); }, {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("ResNet: torchvision's names, shapes, and a few training steps") {
  manual_seed(7);
  nn::ResNet net(nn::ResNetOptions{1, 10, {8, 16}, {1, 1}});
  std::vector<std::string> names;
  for (const auto& [name, t] : net.state_dict()) names.push_back(name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("conv1.weight"));
  CHECK(has("bn1.running_var"));
  CHECK(has("layer1.0.conv2.weight"));
  CHECK(has("layer2.0.downsample.0.weight"));
  CHECK(has("layer2.0.downsample.1.num_batches_tracked"));
  CHECK(has("fc.bias"));
  CHECK_FALSE(has("layer1.0.downsample.0.weight"));  // same width and stride 1: identity shortcut
  const Tensor x = randn({4, 1, 28, 28});
  const Tensor y = net.forward(x);
  CHECK(y.shape() == Shape{4, 10});
  const Tensor target = tensor({1, 2, 3, 4}, TensorOptions(DType::Int64));
  optim::SGD opt(net.parameters(), optim::SGDOptions{0.05});
  const double loss0 = cross_entropy(y, target).item<double>();
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    cross_entropy(net.forward(x), target).backward();
    opt.step();
  }
  CHECK(net.conv1->weight.grad().defined());
  CHECK(cross_entropy(net.forward(x), target).item<double>() < loss0);
  net.eval();
  CHECK(net.forward(x).shape() == Shape{4, 10});
  CHECK_THROWS_AS(net.forward(zeros({1, 3, 28, 28})), ShapeError);
  CHECK_THROWS_AS(nn::ResNet(nn::ResNetOptions{1, 10, {8}, {1, 1}}), ValueError);
}
