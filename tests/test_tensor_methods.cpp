// The libtorch spellings a PyTorch user reaches for: reductions as tensor
// methods, floor / remainder / fmod with PyTorch's signs (values and
// gradients from torch 1.13), and the 2-D layers taking one number for
// kernel, stride and padding.
#include <doctest/doctest.h>

#include <array>
#include <memory>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

using test::check_close;
using test::contains;
using test::error_of;

TEST_CASE("tensor methods: sum, mean and argmax as libtorch's") {
  const Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}});
  CHECK(x.sum().item() == 21.0);
  check_close(x.sum({1}), {9, 12}, 0);
  CHECK(x.sum({0}, true).shape() == Shape({1, 3}));
  CHECK(x.mean().item() == 3.5);
  check_close(x.mean({0}), {2.5, 3.5, 4.5}, 0);
  CHECK(x.argmax().item<int64_t>() == 5);
  CHECK(x.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(x.argmax(0, true).shape() == Shape({1, 3}));
  // Differentiable, as the free functions.
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  mul(w, w).mean().backward();
  check_close(w.grad(), {1.0, 2.0}, 1e-7);
}

TEST_CASE("floor, remainder, fmod: PyTorch's values and signs") {
  check_close(floor(tensor({-1.5, -0.5, 0.5, 2.0})), {-2, -1, 0, 2}, 0);
  CHECK(floor(tensor({-3.0, 4.0}, kInt64)).dtype() == kInt64);
  const Tensor a = tensor({-3.0, -2.0, -1.0, 1.0, 2.0, 3.0});
  // torch.remainder(a, 2) and torch.fmod(a, 2).
  check_close(remainder(a, 2.0), {1, 0, 1, 1, 0, 1}, 0);
  check_close(fmod(a, 2.0), {-1, -0, -1, 1, 0, 1}, 0);
  // A negative divisor: remainder takes its sign, fmod the dividend's.
  const Tensor b = tensor({1.0, 2.0, 3.0, 4.0, 5.0});
  check_close(remainder(b, -1.5), {-0.5, -1, 0, -0.5, -1}, 1e-15);
  check_close(fmod(b, -1.5), {1, 0.5, 0, 1, 0.5}, 1e-15);
  // Tensor divisors, broadcast; integers stay integers.
  const Tensor ia = tensor({-7.0, 7.0, -7.0, 7.0}, kInt64), ib = tensor({3.0, 3.0, -3.0, -3.0}, kInt64);
  CHECK(remainder(ia, ib).to_vector<int64_t>() == std::vector<int64_t>{2, 1, -1, -2});
  CHECK(fmod(ia, ib).to_vector<int64_t>() == std::vector<int64_t>{-1, 1, -1, 1});
  CHECK(remainder(ia, 3.0).dtype() == kInt64);
  check_close(remainder(tensor({5.5, -5.5}).reshape({2, 1}), tensor({2.0, -2.0})), {1.5, -0.5, 0.5, -1.5}, 1e-15);
  // A number with a fraction makes an integer input float32: 7 % 2.5 = 2.
  const Tensor r = remainder(tensor({7.0}, kInt64), 2.5);
  CHECK(r.dtype() == kFloat32);
  CHECK(r.item() == 2.0);
  // An integer division by zero throws, as in PyTorch.
  CHECK(contains(error_of<ValueError>([&] { (void)remainder(ia, tensor({0.0}, kInt64)); }), "remainder"));
  CHECK(contains(error_of<ValueError>([&] { (void)fmod(ia, 0.0); }), "fmod"));
  // Floating division by zero is NaN, as C's fmod.
  CHECK(std::isnan(fmod(tensor({1.0}), 0.0).item()));
}

TEST_CASE("floor, remainder, fmod: PyTorch's gradients") {
  // remainder(a, b) = a - floor(a / b) b: d/da = 1, d/db = -floor(a / b).
  Tensor a = tensor({5.5, -5.5}, kFloat64).requires_grad_(), b = tensor({2.0, 2.0}, kFloat64).requires_grad_();
  remainder(a, b).sum().backward();
  check_close(a.grad(), {1, 1}, 0);
  check_close(b.grad(), {-2, 3}, 0);
  // fmod(a, b) = a - trunc(a / b) b: d/db = -trunc(a / b).
  Tensor c = tensor({5.5, -5.5}, kFloat64).requires_grad_(), d = tensor({2.0, 2.0}, kFloat64).requires_grad_();
  fmod(c, d).sum().backward();
  check_close(c.grad(), {1, 1}, 0);
  check_close(d.grad(), {-2, 2}, 0);
  Tensor e = tensor({1.25, -0.5}, kFloat64).requires_grad_();
  add(floor(e), fmod(e, 0.5)).sum().backward();
  check_close(e.grad(), {1, 1}, 0);  // floor's gradient is zero
}

TEST_CASE("Conv2d and pools: one number for kernel, stride and padding, as PyTorch") {
  manual_seed(0);
  nn::Conv2d conv(3, 8, 3);  // torch.nn.Conv2d(3, 8, 3)
  CHECK(conv.weight.shape() == Shape({8, 3, 3, 3}));
  CHECK(conv.kernel_size == std::array<int64_t, 2>{3, 3});
  CHECK(conv.stride == std::array<int64_t, 2>{1, 1});
  CHECK(conv.padding == std::array<int64_t, 2>{0, 0});
  const Tensor x = randn({2, 3, 10, 10});
  CHECK(conv.forward(x).shape() == Shape({2, 8, 8, 8}));
  nn::Conv2d strided(3, 4, 3, 2, 1, false);
  CHECK(strided.forward(x).shape() == Shape({2, 4, 5, 5}));
  CHECK_FALSE(strided.bias.defined());
  nn::Conv2d rect(3, 4, {1, 3}, {1, 2});
  CHECK(rect.forward(x).shape() == Shape({2, 4, 10, 4}));
  nn::Conv2d from_array(3, 4, std::array{3, 3});  // the spelling that used to be required
  CHECK(from_array.weight.shape() == Shape({4, 3, 3, 3}));
  auto shared = std::make_shared<nn::Conv2d>(3, 2, 5);
  CHECK(shared->weight.shape() == Shape({2, 3, 5, 5}));

  CHECK(nn::MaxPool2d(2).forward(x).shape() == Shape({2, 3, 5, 5}));  // stride = kernel
  CHECK(nn::MaxPool2d(3, 2, 1).forward(x).shape() == Shape({2, 3, 5, 5}));
  CHECK(nn::AvgPool2d(2).forward(x).shape() == Shape({2, 3, 5, 5}));
  CHECK(nn::AdaptiveAvgPool2d(1).forward(x).shape() == Shape({2, 3, 1, 1}));
  // The same values as the pair spelling.
  CHECK(equal(nn::AvgPool2d(2).forward(x), nn::AvgPool2d({2, 2}, {2, 2}).forward(x)));
}
