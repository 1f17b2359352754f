// Known answers for activations and the reductions beyond sum/mean; values
// from PyTorch via tools/reference_activation_reduce.py.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_close;

namespace {
const Tensor kX = tensor({-2.0, -0.5, 0.0, 1.0, 3.0}, kFloat64);
}  // namespace

TEST_CASE("activations: known answers") {
  CHECK(std::round(sigmoid(tensor({0.2})).item<double>() * 1e4) / 1e4 == doctest::Approx(0.5498));
  check_close(gelu(kX), {-0.04550026389635842, -0.15426876936299344, 0.0, 0.841344746068543, 2.99595030590511}, 1e-12);
  check_close(gelu(kX, "tanh"),
              {-0.04540230591222494, -0.15428599017485606, 0.0, 0.8411919906082768, 2.996362607918227}, 1e-12);
  check_close(softplus(kX),
              {0.1269280110429725, 0.4740769841801067, 0.6931471805599453, 1.3132616875182228, 3.048587351573742},
              1e-12);
  check_close(softplus(kX, 2, 1), {0.009074963958904869, 0.15663084375911143, 0.34657359027997264, 1.0, 3.0}, 1e-12);
  check_close(silu(kX), {-0.2384058440442351, -0.1887703343990727, 0.0, 0.7310585786300049, 2.8577223804672998}, 1e-12);
  check_close(relu(kX), {0, 0, 0, 1, 3}, 0);
  check_close(tanh(tensor({0.5}, kFloat64)), {std::tanh(0.5)}, 1e-15);
  // sigmoid is stable for large |x|
  check_close(sigmoid(tensor({-1000.0, 1000.0})), {0.0, 1.0}, 0);
  CHECK_THROWS_AS(gelu(kX, "fast"), ValueError);
}

TEST_CASE("activations: GELU's form as an enum and as PyTorch's string") {
  CHECK(gelu_approximation("none") == GeluApproximation::None);
  CHECK(gelu_approximation("tanh") == GeluApproximation::Tanh);
  CHECK(std::string(gelu_approximation_name(GeluApproximation::Tanh)) == "tanh");
  CHECK_THROWS_WITH_AS(gelu_approximation("fast"), doctest::Contains("\"none\" or \"tanh\""), ValueError);
  check_close(gelu(kX, GeluApproximation::Tanh), gelu(kX, "tanh").to_vector<double>(), 0);
  check_close(gelu(kX, GeluApproximation::None), gelu(kX).to_vector<double>(), 0);
  nn::GELU exact, tanh_form(GeluApproximation::Tanh), from_string("tanh");
  CHECK(exact.approximate == GeluApproximation::None);
  CHECK(from_string.approximate == GeluApproximation::Tanh);
  check_close(tanh_form(kX), gelu(kX, "tanh").to_vector<double>(), 0);
  CHECK_THROWS_AS(nn::GELU("fast"), ValueError);
}

TEST_CASE("reductions: var, std, logsumexp") {
  const Tensor m = tensor({{1, 2, 3}, {4, 5, 7}}, kFloat64);
  check_close(var(m, {1}), {1.0, 2.333333333333334}, 1e-12);
  check_close(var(m, {1}, 0), {0.6666666666666666, 1.555555555555556}, 1e-12);
  CHECK(ember::std(m, {}).item<double>() == doctest::Approx(2.160246899469287).epsilon(1e-12));
  check_close(logsumexp(m, {1}), {3.4076059644443806, 7.169846019556286}, 1e-12);
  CHECK(var(m, {1}, 1, true).shape() == Shape{2, 1});
  const double big = logsumexp(tensor({1000.0, 1000.0}), {0}).item<double>();
  CHECK(big == doctest::Approx(1000.0 + std::log(2.0)));
}

TEST_CASE("reductions: max/min with indices, ties, NaN, argmax") {
  const Tensor t = tensor({{1, 5, 5}, {7, 2, 7}});
  const ValuesIndices mx = max(t, 1);
  check_close(mx.values, {5, 7}, 0);
  CHECK(mx.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});  // first occurrence
  const ValuesIndices mn = min(t, 0, true);
  CHECK(mn.values.shape() == Shape{1, 3});
  check_close(mn.values, {1, 2, 5}, 0);
  CHECK(argmax(t).item<int64_t>() == 3);
  CHECK(argmin(t, 1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(max(t).item<float>() == 7.0f);
  CHECK(std::isnan(max(tensor({1.0, NAN, 3.0})).item<float>()));
  // amax splits the gradient between ties; max along a dim sends it to the index.
  Tensor x = tensor({1, 3, 3}).requires_grad_();
  amax(x, {0}).backward();
  check_close(x.grad(), {0, 0.5, 0.5}, 0);
  Tensor y = tensor({1, 3, 3}).requires_grad_();
  max(y, 0).values.backward();
  check_close(y.grad(), {0, 1, 0}, 0);
  // non-adjacent dims
  const Tensor c = randn({2, 3, 4});
  const Tensor s = sum(c, {0, 2});
  double manual = 0;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) manual += c.at<double>({i, 1, k});
  CHECK(s.at<double>({1}) == doctest::Approx(manual).epsilon(1e-6));
  CHECK(std::string(([] {
          try {
            max(randn({2, 3}), 2);
          } catch (const IndexError& e) {
            return std::string(e.what());
          }
          return std::string();
        })())
            .find("max: dim 2") != std::string::npos);
}
