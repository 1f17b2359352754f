// Known answers and errors for cat/stack/split/chunk/pad, unfold and conv2d
// (conv values from PyTorch via tools/reference_conv.py).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_close;

TEST_CASE("cat and stack: values, shapes, gradients, errors") {
  const Tensor a = tensor({{1, 2}, {3, 4}}), b = tensor({{5, 6}});
  const Tensor c = cat({a, b}, 0);
  CHECK(c.shape() == Shape{3, 2});
  check_close(c, {1, 2, 3, 4, 5, 6}, 0);
  check_close(cat({a, a}, -1), {1, 2, 1, 2, 3, 4, 3, 4}, 0);
  const Tensor s = stack({a, a}, 1);
  CHECK(s.shape() == Shape{2, 2, 2});
  check_close(s, {1, 2, 1, 2, 3, 4, 3, 4}, 0);
  CHECK(cat({a, tensor({{7, 8}}, kFloat64)}).dtype() == kFloat64);
  Tensor x = tensor({1, 2}).requires_grad_(), y = tensor({3, 4, 5}).requires_grad_();
  sum(mul(cat({x, y}), tensor({1, 2, 3, 4, 5}))).backward();
  check_close(x.grad(), {1, 2}, 0);
  check_close(y.grad(), {3, 4, 5}, 0);
  try {
    cat({a, zeros({1, 3})}, 0);
    FAIL("no exception");
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    CHECK(m.find("cat") != std::string::npos);
    CHECK(m.find("[1, 3]") != std::string::npos);
    CHECK(m.find("[2, 2]") != std::string::npos);
  }
  CHECK_THROWS_AS(cat({}, 0), ValueError);
  CHECK_THROWS_AS(stack({a, b}), ShapeError);
}

TEST_CASE("split, chunk and pad") {
  const Tensor x = arange(0, 10, 1, kFloat32);
  const auto parts = chunk(x, 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].numel() == 4);
  CHECK(parts[1].numel() == 4);
  CHECK(parts[2].numel() == 2);
  CHECK(parts[2].storage().get() == x.storage().get());
  const auto sp = split(x, std::vector<int64_t>{3, 7});
  check_close(sp[0], {0, 1, 2}, 0);
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{3, 3}), ShapeError);
  const Tensor p = pad(tensor({{1, 2}, {3, 4}}), {1, 0, 0, 1}, -1.0);
  CHECK(p.shape() == Shape{3, 3});
  check_close(p, {-1, 1, 2, -1, 3, 4, -1, -1, -1}, 0);
  Tensor q = tensor({{1, 2}, {3, 4}}).requires_grad_();
  sum(mul(pad(q, {1, 1}), 2.0)).backward();
  check_close(q.grad(), {2, 2, 2, 2}, 0);
  CHECK_THROWS_AS(pad(q, {-1, 0}), ValueError);
}

TEST_CASE("split: one backward node, pieces that get no gradient contribute zeros") {
  const Tensor x = arange(0, 12, 1, kFloat64).reshape({2, 6}).requires_grad_();
  const auto parts = chunk(x, 3, -1);  // three (2, 2) views, last dim stride 1, row stride 6
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].grad_fn() == parts[2].grad_fn());
  CHECK(parts[1].strides() == Shape{6, 1});
  // Use the first piece twice and the last once; the middle one not at all.
  sum(add(mul(parts[0], 3.0), parts[2])).backward();
  check_close(x.grad(), {3, 3, 0, 0, 1, 1, 3, 3, 0, 0, 1, 1}, 0);
  // The views share x's storage, as in PyTorch.
  CHECK(parts[1].storage().get() == x.storage().get());
  const Tensor xin = randn({3, 6}, kFloat64).requires_grad_();
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& in) {
        const auto p = split(in[0], std::vector<int64_t>{1, 3, 2}, 1);
        return add(sum(mul(p[0], p[2].narrow(1, 0, 1))), sum(square(p[1])));
      },
      {xin});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("unfold and conv2d match PyTorch") {
  const Tensor x = sub(div(arange(0, 40, 1, kFloat64).reshape({1, 2, 5, 4}), 10.0), 1.0);
  const Tensor w = sub(div(arange(0, 36, 1, kFloat64).reshape({3, 2, 3, 2}), 20.0), 0.8);
  const Tensor b = tensor({0.1, -0.2, 0.3}, kFloat64);
  const Tensor y = conv2d(x, w, b, {2, 1}, {1, 0});
  CHECK(y.shape() == Shape{1, 3, 3, 3});
  check_close(y, {0.44, 0.06, -0.32, -3.12, -3.75, -4.38, -5.28, -5.74, -6.2,  1.34,  1.44, 1.54, 2.7, 2.79,
                  2.88, 1.38, 1.4,   1.42,  3.04,  3.62,  4.2,   9.32,  10.13, 10.94, 8.84, 9.34, 9.84},
              1e-9);
  const Tensor u = unfold(x, {3, 2}, {2, 1}, {1, 0});
  CHECK(u.shape() == Shape{1, 12, 9});
  check_close(u[0][7], {0.0, 0.0, 0.0, 1.5, 1.6, 1.7, 2.3, 2.4, 2.5}, 1e-12);
  // A ViT patch embedding: stride = kernel, non-square image and patches.
  const Tensor img = randn({2, 3, 8, 6});
  CHECK(conv2d(img, randn({16, 3, 4, 3}), Tensor(), {4, 3}).shape() == Shape{2, 16, 2, 2});
  try {
    conv2d(img, randn({16, 2, 4, 3}));
    FAIL("no exception");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("conv2d") != std::string::npos);
  }
}

// conv2d's CPU kernel (ops/conv2d_cpu.cpp: GEMMs over tiles of im2col
// columns, images split over the pool) against the convolution written as
// unfold and a matrix product, forward and all three gradients, at a
// ResNet's shapes: several tiles per image (ragged last tile), stride 2, a
// batch that does not divide among the threads, and zero channels. (Windows
// that do not overlap, e.g. patch embeddings, take the composed path.)
TEST_CASE("conv2d's CPU kernel equals unfold and a matrix product") {
  struct Case {
    Shape x, w;
    std::array<int64_t, 2> stride, padding;
  };
  for (const Case& c :
       {Case{{5, 6, 28, 28}, {8, 6, 3, 3}, {1, 1}, {1, 1}}, Case{{3, 4, 28, 28}, {6, 4, 3, 3}, {2, 2}, {1, 1}},
        Case{{4, 5, 7, 9}, {3, 5, 2, 2}, {1, 1}, {0, 0}}, Case{{2, 3, 11, 13}, {4, 3, 5, 3}, {1, 2}, {2, 1}}}) {
    CAPTURE(c.x.str());
    manual_seed(7);
    const Tensor x = randn(c.x).requires_grad_(), w = randn(c.w).requires_grad_(), b = randn({c.w[0]}).requires_grad_();
    const Tensor y = conv2d(x, w, b, c.stride, c.padding);
    const Tensor gy = randn(y.shape());
    sum(mul(y, gy)).backward();
    // Reference: y[n, o, l] = sum_k W[o, k] cols[n, k, l] + b[o].
    const Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_(), br = b.detach().requires_grad_();
    const Tensor cols = unfold(xr, {c.w[2], c.w[3]}, c.stride, c.padding);
    const Tensor yr = add(matmul(wr.reshape({c.w[0], -1}), cols).reshape(y.shape()), br.reshape({1, c.w[0], 1, 1}));
    sum(mul(yr, gy)).backward();
    CHECK(allclose(y.detach(), yr.detach(), 1e-4, 1e-4));
    CHECK(allclose(x.grad(), xr.grad(), 1e-4, 1e-4));
    CHECK(allclose(w.grad(), wr.grad(), 1e-4, 1e-3));
    CHECK(allclose(b.grad(), br.grad(), 1e-4, 1e-3));
  }
  // Zero input channels: the output is the bias, and the bias's gradient the sum of gy.
  const Tensor b = tensor({0.5f, -1.0f}).requires_grad_();
  const Tensor y = conv2d(zeros({2, 0, 4, 4}), zeros({2, 0, 3, 3}), b, {1, 1}, {1, 1});
  CHECK(allclose(y, add(zeros({2, 2, 4, 4}), b.detach().reshape({1, 2, 1, 1}))));
  sum(y).backward();
  CHECK(allclose(b.grad(), tensor({32.0f, 32.0f})));
}

TEST_CASE("conv2d: bfloat16 patches run on the bf16 GEMM without float32 copies") {
  // A ViT's patch embedding (stride = kernel, no padding) in bfloat16 on the
  // CPU: im2row and row2im move bf16 elements, the product is the bf16 GEMM
  // with float32 sums. Against one float32 convolution of the same values,
  // rounded once: within a bf16 rounding (the sums' order differs).
  Generator gen(3);
  const Tensor x = randn({3, 4, 15, 16}, TensorOptions(DType::BFloat16), &gen);  // a ragged edge: 15 = 2 * 7 + 1
  const Tensor w = randn({8, 4, 7, 7}, TensorOptions(DType::BFloat16), &gen);
  const Tensor b = randn({8}, TensorOptions(DType::BFloat16), &gen);
  const Tensor gout = randn({3, 8, 2, 2}, TensorOptions(DType::BFloat16), &gen);
  std::vector<Tensor> outs, dxs, dws, dbs;
  for (DType dt : {DType::BFloat16, DType::Float32}) {
    const Tensor xi = x.to(dt).detach().requires_grad_(), wi = w.to(dt).detach().requires_grad_(),
                 bi = b.to(dt).detach().requires_grad_();
    profiler::reset();
    Tensor out;
    {
      profiler::Guard on;
      out = conv2d(xi, wi, bi, {7, 7});
    }
    if (dt == DType::BFloat16) {
      CHECK(out.dtype() == DType::BFloat16);
      // One copy: the channels-last product to NCHW (float32 copies of x, w
      // and b and the output's rounding would be four more).
      int64_t copies = 0, im2row = 0;
      for (const profiler::Row& r : profiler::rows()) {
        if (r.name == "copy") copies = r.calls;
        if (r.name == "conv2d_im2row") im2row = r.calls;
      }
      CHECK(copies == 1);
      CHECK(im2row == 1);
    }
    sum(mul(out, gout.to(dt))).backward();
    CHECK(xi.grad().dtype() == dt);
    outs.push_back(out.to(DType::Float32));
    dxs.push_back(xi.grad().to(DType::Float32));
    dws.push_back(wi.grad().to(DType::Float32));
    dbs.push_back(bi.grad().to(DType::Float32));
  }
  auto close = [](const Tensor& a, const Tensor& ref) {
    // |a - ref| <= 2^-8 |ref| + a small absolute term for sums near zero
    return max(sub(abs(sub(a, ref)), add(mul(abs(ref), 1.0 / 256), 0.05))).item<double>() <= 0;
  };
  CHECK(close(outs[0], outs[1]));
  CHECK(close(dxs[0], dxs[1]));
  CHECK(close(dws[0], dws[1]));
  CHECK(close(dbs[0], dbs[1]));
  // The last row and column are in no patch: their gradient is exactly zero.
  CHECK(max(abs(dxs[0].narrow(2, 14, 1))).item<double>() == 0.0);
  CHECK(max(abs(dxs[0].narrow(3, 14, 2))).item<double>() == 0.0);
  CHECK(max(abs(dxs[1])).item<double>() > 0.5);  // not vacuous
}
