// Linear regression by gradient descent, with the gradient from autograd.
//
// The worked example: three points on the line y = x, a model y = θ0 + θ1·x
// written as Xθ with a column of ones in X, and the loss
//   J(θ) = (1/2m) · Σ (Xθ − y)²,   m = 3,
// minimised by 1000 steps of θ ← θ − lr·∇J with lr = 0.01 from θ = 0. The
// gradient ∇J = (1/m)·Xᵀ(Xθ − y) is never written here: loss.backward()
// computes it. After 1000 steps θ = [[0.1107], [0.9513]] (not yet the exact
// fit [0, 1]: plain gradient descent with this small rate is slow along the
// intercept direction). The program exits non-zero if it ends elsewhere. It
// takes no flags; apps/common's main() refuses any with one line and exit 2.
#include <cmath>
#include <cstdio>

#include <ember/ember.h>

#include "app.h"

using namespace ember;

namespace {

int run() {
  const Tensor X = tensor({{1, 1}, {1, 2}, {1, 3}}, kFloat64);
  const Tensor y = tensor({1, 2, 3}, kFloat64).reshape({3, 1});  // column [[1], [2], [3]]
  const double m = static_cast<double>(X.size(0));
  const double lr = 0.01;
  const int steps = 1000;

  Tensor theta = zeros({2, 1}, kFloat64).requires_grad_();

  auto loss_of = [&](const Tensor& th) {
    const Tensor pred = matmul(X, th);  // (3, 2) · (2, 1) -> (3, 1)
    return div(sum(square(sub(pred, y))), 2.0 * m);
  };

  for (int step = 0; step < steps; ++step) {
    Tensor loss = loss_of(theta);
    if (step % 100 == 0) std::printf("step %4d  loss %.6f\n", step, loss.item());
    loss.backward();  // theta.grad() = (1/m)·Xᵀ(Xθ − y)
    {
      NoGradGuard no_grad;  // the update itself is not part of any graph
      sub_(theta, mul(theta.grad(), lr));
    }
    theta.zero_grad();
  }

  Tensor final_loss;
  {
    NoGradGuard no_grad;
    final_loss = loss_of(theta);
  }
  const double t0 = theta.at({0, 0}), t1 = theta.at({1, 0});
  std::printf("step %4d  loss %.6f\n", steps, final_loss.item());
  std::printf("theta = [[%.4f], [%.4f]]\n", t0, t1);

  const bool ok = std::abs(t0 - 0.1107) < 5e-5 && std::abs(t1 - 0.9513) < 5e-5;
  if (!ok) {
    std::fprintf(stderr, "linear_regression: expected theta = [[0.1107], [0.9513]]\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"Linear regression by gradient descent, the gradient from autograd (a worked example)"};
  return app::run_main("linear_regression", cli, argc, argv, run);
}
