// The tensor layer (core/ and ops/, target ember_ops) on its own: this
// program links Ember::ember_ops and nothing above it, so a call from core/
// or ops/ into optim/ or nn/ would be an undefined reference here. It runs
// what touches the most of the layer's inside (views, copies, broadcasting,
// a reduction, the engine's gradient sums) and checks the numbers.
#include <cstdio>

#include <ember/core/autograd.h>
#include <ember/core/tensor.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/matmul.h>
#include <ember/ops/reduce.h>

using namespace ember;

int main() {
  // w: [2, 3] = 1..6; x: [3] = (1, 2, 3) broadcast over w's rows.
  Tensor w = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, kFloat64).requires_grad_();
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  // loss = sum((w * x)^T transposed back and made contiguous) = sum_ij w_ij x_j
  Tensor y = mul(w, x).t().contiguous().t();
  Tensor loss = sum(y);
  loss.backward();
  // d loss / d w_ij = x_j; d loss / d x_j = sum_i w_ij = (5, 7, 9).
  const double want_loss = 1 * 1 + 2 * 2 + 3 * 3 + 4 * 1 + 5 * 2 + 6 * 3;
  const Tensor gx = x.grad(), gw = w.grad();
  const bool ok = loss.item<double>() == want_loss && gx.at<double>({0}) == 5 && gx.at<double>({1}) == 7 &&
                  gx.at<double>({2}) == 9 && gw.at<double>({1, 2}) == 3 && gw.at<double>({0, 0}) == 1;
  std::printf("ember_ops alone: loss %g, x.grad (%g, %g, %g): %s\n", loss.item<double>(), gx.at<double>({0}),
              gx.at<double>({1}), gx.at<double>({2}), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
