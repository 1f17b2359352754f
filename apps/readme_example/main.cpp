#include <ember/ember.h>
#include <cmath>
#include <cstdio>
using namespace ember;

int main() {
  manual_seed(0);
  Tensor x = rand({100, 1});                          // 100 inputs in [0, 1)
  Tensor y = 3.0 * x + 2.0 + 0.01 * randn({100, 1});  // targets: y = 3x + 2 + noise

  Tensor w = zeros({1}).requires_grad_();  // parameters to learn
  Tensor b = zeros({1}).requires_grad_();
  for (int step = 0; step < 500; ++step) {
    Tensor loss = mean(square(w * x + b - y));  // mean squared error
    loss.backward();                            // fills w.grad() and b.grad()
    {
      NoGradGuard no_grad;  // the update is not recorded by autograd
      sub_(w, 0.5 * w.grad());
      sub_(b, 0.5 * b.grad());
    }
    w.zero_grad();
    b.zero_grad();
    if (step % 100 == 0) std::printf("step %3d  loss %.5f\n", step, loss.item());
  }
  std::printf("w = %.3f  b = %.3f  (true: 3, 2)\n", w.item(), b.item());
  return std::abs(w.item() - 3) < 0.05 && std::abs(b.item() - 2) < 0.05 ? 0 : 1;
}
