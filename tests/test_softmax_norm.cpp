// Known answers and errors for softmax, masked softmax, layer_norm,
// batch_norm and dropout.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <ember/ember.h>
#include <ember/ops/philox_cpu.h>  // the kernels' Philox blocks

#include "test_util.h"

using namespace ember;

using test::check_close;
using test::contains;

namespace {
std::string message_of(const std::function<void()>& f) { return test::error_of<Error>(f); }
}  // namespace

TEST_CASE("softmax: rows sum to one, stable for large inputs, matches PyTorch") {
  // torch.softmax(torch.tensor([[1.,2.,3.],[1000.,1001.,1002.]]), 1)
  const Tensor y = softmax(tensor({{1, 2, 3}, {1000, 1001, 1002}}), 1);
  check_close(y, {0.09003057, 0.24472847, 0.66524096, 0.09003057, 0.24472847, 0.66524096}, 1e-6);
  // log_softmax equals log(softmax)
  const Tensor x = randn({4, 7});
  CHECK(allclose(log_softmax(x, 1), log(softmax(x, 1)), 1e-5, 1e-6));
  // over a non-last dim: each (i, :, k) column sums to 1
  const Tensor z = softmax(randn({2, 5, 3}), 1);
  CHECK(allclose(sum(z, {1}), ones({2, 3}), 1e-6, 1e-6));
  const Tensor z0 = softmax(randn({2, 5, 3}), 0);
  CHECK(allclose(sum(z0, {0}), ones({5, 3}), 1e-6, 1e-6));
}

TEST_CASE("masked_softmax: valid lengths per batch and per query give exact zeros") {
  const Tensor x = rand({2, 2, 4});
  const Tensor y = masked_softmax(x, from_vector(std::vector<int64_t>{2, 3}));
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 2; ++q) {
      const int len = b == 0 ? 2 : 3;
      double s = 0;
      for (int k = 0; k < 4; ++k) {
        const float w = y.at<float>({b, q, k});
        if (k >= len)
          CHECK(w == 0.0f);
        else
          CHECK(w > 0.0f);
        s += w;
      }
      CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
    }
  const Tensor lens2 = from_vector(std::vector<int64_t>{1, 3, 2, 4}, {2, 2});
  const Tensor y2 = masked_softmax(x, lens2);
  const int64_t L[2][2] = {{1, 3}, {2, 4}};
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 2; ++q) {
      double s = 0;
      for (int k = 0; k < 4; ++k) {
        const float w = y2.at<float>({b, q, k});
        if (k >= L[b][q]) CHECK(w == 0.0f);
        s += w;
      }
      CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
    }
  // The kept weights are the softmax of the kept scores.
  CHECK(allclose(y2[0][1].narrow(0, 0, 3), softmax(x[0][1].narrow(0, 0, 3), 0), 1e-6, 1e-7));
}

TEST_CASE("masked_softmax: bool and causal masks, gradients skip masked positions") {
  const Tensor x = randn({3, 3}).requires_grad_();
  const Tensor y = masked_softmax(x, causal_mask(3, 3));
  CHECK(y.at<float>({0, 1}) == 0.0f);
  CHECK(y.at<float>({0, 0}) == 1.0f);
  CHECK(y.at<float>({1, 2}) == 0.0f);
  sum(mul(y, randn({3, 3}))).backward();
  CHECK(x.grad().at<float>({0, 2}) == 0.0f);
  CHECK(x.grad().at<float>({1, 2}) == 0.0f);
  // Every position masked: all-zero weights, no NaN.
  const Tensor all = masked_softmax(randn({2, 3}), full({2, 3}, 1.0, kBool));
  CHECK(allclose(all, zeros({2, 3})));
  CHECK(message_of([] {
          masked_softmax(randn({2, 3, 4}), from_vector(std::vector<int64_t>{1, 2, 3}));
        }).find("masked_softmax") != std::string::npos);
}

TEST_CASE("layer_norm and batch_norm: the worked example") {
  const Tensor x = tensor({{1, 2, 3}, {4, 5, 6}, {7, 9, 12}});
  check_close(layer_norm(x, {3}), {-1.2247, 0, 1.2247, -1.2247, 0, 1.2247, -1.1355, -0.1622, 1.2978}, 1e-4);
  check_close(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true),
              {-1.2247, -1.1625, -1.0690, 0, -0.1162, -0.2673, 1.2247, 1.2787, 1.3363}, 1e-4);
}

TEST_CASE("layer_norm: affine and gradients match the composed formula") {
  const Tensor x = randn({4, 6}, kFloat64).requires_grad_();
  const Tensor w = randn({6}, kFloat64).requires_grad_();
  const Tensor b = randn({6}, kFloat64).requires_grad_();
  const Tensor g = randn({4, 6}, kFloat64);
  sum(mul(layer_norm(x, {6}, w, b), g)).backward();
  const Tensor x2 = x.detach().requires_grad_(), w2 = w.detach().requires_grad_(), b2 = b.detach().requires_grad_();
  const Tensor mu = mean(x2, {1}, true);
  const Tensor var = mean(square(sub(x2, mu)), {1}, true);
  const Tensor ref = add(mul(div(sub(x2, mu), sqrt(add(var, 1e-5))), w2), b2);
  sum(mul(ref, g)).backward();
  CHECK(allclose(x.grad(), x2.grad(), 1e-9, 1e-10));
  CHECK(allclose(w.grad(), w2.grad(), 1e-9, 1e-10));
  CHECK(allclose(b.grad(), b2.grad(), 1e-9, 1e-10));
  CHECK(message_of([] { layer_norm(randn({2, 3}), {4}); }).find("normalized_shape [4]") != std::string::npos);
}

TEST_CASE("batch_norm: running statistics follow PyTorch's update, eval uses them") {
  const Tensor x = tensor({{1, 2}, {3, 6}, {5, 7}});
  Tensor rm = zeros({2}), rv = ones({2});
  batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1);
  // mean = [3, 5], unbiased var = [4, 7]
  check_close(rm, {0.3, 0.5}, 1e-6);
  check_close(rv, {0.9 + 0.4, 0.9 + 0.7}, 1e-6);
  const Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), false);
  CHECK(y.at<float>({0, 0}) == doctest::Approx((1 - 0.3) / std::sqrt(1.3 + 1e-5)).epsilon(1e-5));
}

TEST_CASE("dropout: reproducible mask, expected scale, identity in eval") {
  const Tensor x = ones({100000});
  Generator g1(7), g2(7);
  const Tensor a = dropout(x, 0.3, true, &g1), b = dropout(x, 0.3, true, &g2);
  CHECK(allclose(a, b, 0, 0));
  const double kept = sum(gt(a, 0.0).to(kInt64)).item<double>() / 100000.0;
  CHECK(kept == doctest::Approx(0.7).epsilon(0.015));
  CHECK(mean(a).item<double>() == doctest::Approx(1.0).epsilon(0.02));
  CHECK(dropout(x, 0.3, false).is_same(x));
  const Tensor xg = ones({1000}).requires_grad_();
  Generator g3(9);
  const Tensor y = dropout(xg, 0.5, true, &g3);
  sum(y).backward();
  CHECK(allclose(xg.grad(), y.detach(), 0, 0));  // d/dx of x * mask / (1-p) is mask / (1-p)
  CHECK_THROWS_AS(dropout(x, 1.5), ValueError);
}

TEST_CASE("dropout: the mask is rand(shape) >= p from the same generator stream, for any length") {
  for (int64_t n : {1, 7, 63, 64, 65, 1000, 40000 + 3}) {
    Generator g1(11), g2(11);
    const Tensor x = add(arange(static_cast<double>(n), TensorOptions(kFloat32)), 1.0);  // no zeros: 0 marks dropped
    const Tensor y = dropout(x, 0.25, true, &g1);
    const Tensor keep = ge(rand({n}, TensorOptions(kFloat32), &g2), 0.25);
    CHECK(equal(gt(y, 0.0), keep));
    CHECK(allclose(y, div(mul(x, keep.to(kFloat32)), 0.75), 1e-6, 0));
    CHECK(g1.offset() == g2.offset());  // both consumed ceil(n / 4) counters
  }
  // Float64 inputs use the same float uniforms.
  Generator g3(5), g4(5);
  const Tensor y64 = dropout(ones({333}, TensorOptions(kFloat64)), 0.5, true, &g3);
  CHECK(equal(gt(y64, 0.0), ge(rand({333}, TensorOptions(kFloat32), &g4), 0.5)));
}

TEST_CASE("philox: the vector lanes give the same words as one counter at a time") {
  uint32_t r[4][16];
  philox_lanes(0x123456789ABCDEFull, 0xFFFFFFF8ull, r);  // crosses the 32-bit counter boundary
  for (int l = 0; l < 16; ++l) {
    const Philox4x32 one = Philox4x32::generate(0x123456789ABCDEFull, 0xFFFFFFF8ull + l);
    for (int w = 0; w < 4; ++w) CHECK(r[w][l] == one.v[w]);
  }
  uint32_t block[64];  // element order: word w of counter l at 4l + w
  philox_block<16>(0x123456789ABCDEFull, 0xFFFFFFF8ull, block);
  for (int l = 0; l < 16; ++l)
    for (int w = 0; w < 4; ++w) CHECK(block[4 * l + w] == r[w][l]);
  // 64 counters (dropout's block), by the portable loop and by the kernels'
  // version (four interleaved AVX-512 chains where the CPU has AVX-512).
  uint32_t wide[256], kernels[256];
  philox_block<64>(0x123456789ABCDEFull, 0xFFFFFFE0ull, wide);
  cpu::philox_block64(0x123456789ABCDEFull, 0xFFFFFFE0ull, kernels);
  for (int l = 0; l < 64; ++l) {
    const Philox4x32 one = Philox4x32::generate(0x123456789ABCDEFull, 0xFFFFFFE0ull + l);
    for (int w = 0; w < 4; ++w) {
      CHECK(wide[4 * l + w] == one.v[w]);
      CHECK(kernels[4 * l + w] == one.v[w]);
    }
  }
  uint32_t kernels16[64];
  cpu::philox_block16(0x123456789ABCDEFull, 0xFFFFFFF8ull, kernels16);
  for (int i = 0; i < 64; ++i) CHECK(kernels16[i] == block[i]);
}
