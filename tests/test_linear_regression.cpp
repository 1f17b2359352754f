// The worked linear-regression example (apps/linear_regression) as a test:
// 1000 steps of gradient descent, lr = 0.01, on J(θ) = (1/2m)·Σ(Xθ − y)² with
// the gradient from autograd, must end at θ = [[0.1107], [0.9513]].
// Reference (PyTorch 1.13, float64 and float32 agree to 4 decimals):
//   X = torch.tensor([[1.,1],[1,2],[1,3]], dtype=torch.float64); y = torch.tensor([[1.],[2],[3]], dtype=torch.float64)
//   t = torch.zeros(2, 1, dtype=torch.float64, requires_grad=True)
//   for _ in range(1000):
//       ((X @ t - y) ** 2).sum().div(6).backward()
//       with torch.no_grad(): t -= 0.01 * t.grad
//       t.grad = None
//   # t = [[0.110715209], [0.951296189]], final loss 0.000879233
#include <doctest/doctest.h>

#include <ember/ember.h>

using namespace ember;

TEST_CASE("linear regression: 1000 gradient-descent steps reach the worked answer") {
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    const Tensor X = tensor({{1, 1}, {1, 2}, {1, 3}}, dt);
    const Tensor y = tensor({1, 2, 3}, dt).reshape({3, 1});
    Tensor theta = zeros({2, 1}, dt).requires_grad_();
    auto loss_of = [&](const Tensor& th) {
      const Tensor pred = matmul(X, th);  // X·θ, shape (3, 1)
      return div(sum(square(sub(pred, y))), 6.0);
    };

    CHECK(loss_of(theta).item() == doctest::Approx(7.0 / 3.0));  // (1 + 4 + 9) / 6 at θ = 0
    for (int step = 0; step < 1000; ++step) {
      Tensor loss = loss_of(theta);
      loss.backward();
      {
        NoGradGuard no_grad;
        sub_(theta, mul(theta.grad(), 0.01));
      }
      theta.zero_grad();
    }
    CHECK(theta.shape() == Shape{2, 1});
    CHECK(std::abs(theta.at({0, 0}) - 0.1107) < 5e-5);
    CHECK(std::abs(theta.at({1, 0}) - 0.9513) < 5e-5);
    CHECK(theta.at({0, 0}) == doctest::Approx(0.110715209).epsilon(1e-4));
    CHECK(theta.at({1, 0}) == doctest::Approx(0.951296189).epsilon(1e-4));
    NoGradGuard no_grad;
    CHECK(loss_of(theta).item() == doctest::Approx(0.000879233).epsilon(1e-3));
  }
}
