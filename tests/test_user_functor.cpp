// A user's pointwise op through the public functor registration
// (ops/pointwise_register.h, tests/user_functor.h): a known answer, a float64
// gradcheck, and on device "cuda" (the emulated backend, whose kernels
// tests/cuda/user_functor.cu registered) the CPU's values and gradients.
#include <doctest/doctest.h>

#include <cmath>

#include <ember/ember.h>

#include "test_util.h"
#include "user_functor.h"

using namespace ember;
using test::check_close;

namespace {

// The op: forward and backward each one registered functor.
Tensor swish(const Tensor& x, double beta) {
  Tensor y = unary_forward<user_functor::Swish>(x, beta);
  if (autograd::needs_grad({x}))
    autograd::record("test_swish", {x}, y, [sx = autograd::SavedTensor(x), beta](autograd::BackwardContext& ctx) {
      ctx.set_grad(0, binary_forward<user_functor::SwishBackward>(ctx.grad_output(), sx.get(), beta));
    });
  return y;
}

bool have_cuda() {
  try {
    (void)empty({1}, TensorOptions(Device("cuda")));
    return true;
  } catch (const DeviceError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("user functor: registered with one line, known answer and gradcheck on the CPU") {
  // swish(x; 2) = x / (1 + exp(-2x)).
  const Tensor x = tensor({-1.0, 0.0, 0.5, 3.0}, kFloat64);
  std::vector<double> want;
  for (double v : {-1.0, 0.0, 0.5, 3.0}) want.push_back(v / (1 + std::exp(-2 * v)));
  check_close(swish(x, 2.0), want, 1e-15);
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return swish(in[0], 1.5); },
                                      {randn({3, 4}, kFloat64).requires_grad_()});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("user functor: the CUDA kernel the same line registered gives the CPU's values") {
  if (!have_cuda()) {
    MESSAGE("skipped: no device cuda in this program");
    return;
  }
  REQUIRE(unary_kernel<user_functor::Swish>().has(DeviceType::CUDA));
  REQUIRE(binary_kernel<user_functor::SwishBackward>().has(DeviceType::CUDA));
  manual_seed(5);
  const Tensor x = randn({5, 33});
  const Tensor xc = x.clone().requires_grad_(), xd = x.to(Device("cuda")).requires_grad_();
  const Tensor yc = swish(xc, 0.7), yd = swish(xd, 0.7);
  CHECK(yd.device().is_cuda());
  sum(yc).backward();
  sum(yd).backward();
  CHECK(allclose(yd.cpu(), yc, 1e-6, 1e-6));
  CHECK(allclose(xd.grad().cpu(), xc.grad(), 1e-6, 1e-6));
}
