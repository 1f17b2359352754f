// The optim layer (target ember_optim) on top of ember_ops only: this program
// links Ember::ember_optim and not nn/, so an optimizer reaching into nn/
// would be an undefined reference here. One Adam step on f(p) = sum(p^2)
// must give the closed form: after the bias corrections the first step's
// m / sqrt(v) is g / |g|, so each element moves by lr against the sign of
// its gradient (eps = 0).
#include <cmath>
#include <cstdio>

#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/reduce.h>
#include <ember/optim/optimizer.h>

using namespace ember;

int main() {
  Tensor p = tensor({1.0, -2.0}, kFloat64).requires_grad_();
  optim::Adam adam({p}, optim::AdamOptions{.lr = 0.1, .eps = 0});
  sum(square(p)).backward();
  adam.step();
  const double a = p.at<double>({0}), b = p.at<double>({1});
  const bool ok = std::abs(a - 0.9) < 1e-12 && std::abs(b + 1.9) < 1e-12;
  std::printf("ember_optim alone: p after one Adam step (%.15g, %.15g), want (0.9, -1.9): %s\n", a, b,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
