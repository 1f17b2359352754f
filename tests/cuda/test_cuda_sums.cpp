// Sums on device "cuda" against the CPU at shapes that take the two-pass
// paths: many rows and few columns (cuda/column_sum.cuh: the bias and
// layer_norm weight gradients of a training step), and a few long rows
// (cuda/reduce.cu: a whole-tensor sum). Linked into the emulated
// test binary and into ember_gpu_tests (real CUDA), where it skips with a
// message on a machine without a GPU.
#include <doctest/doctest.h>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {
const Device kCuda("cuda");
}  // namespace

TEST_CASE("cuda sums: columns split over slices of the rows equal the CPU's (bias and layer_norm gradients)") {
  if (!test::cuda_usable()) return;
  // Shapes with many rows and few columns take the two-pass path of
  // cuda/column_sum.cuh (blocks of 32 columns by slices of 64+ rows, then
  // the slices summed); ragged column tiles (40, 33, 48 columns) included.
  Generator g(21);
  SUBCASE("sum over dim 0 and over a middle dim, float64 and int64") {
    const Tensor x = randn({5000, 40}, TensorOptions(kFloat64), &g);
    CHECK(allclose(sum(x.to(kCuda), {0}).cpu(), sum(x, {0}), 1e-12, 1e-12));
    const Tensor y = randn({3, 700, 33}, TensorOptions(kFloat64), &g);
    CHECK(allclose(sum(y.to(kCuda), {1}).cpu(), sum(y, {1}), 1e-12, 1e-12));
    const Tensor k = randint(-1000, 1000, {4096, 40}, TensorOptions(kInt64), &g);
    CHECK(equal(sum(k.to(kCuda), {0}).cpu(), sum(k, {0})));
  }
  SUBCASE("bfloat16: float32 partial sums, one rounding") {
    const Tensor x = randn({3000, 64}, TensorOptions(kFloat32), &g);
    const Tensor want = sum(x.to(kBFloat16).to(kFloat64), {0}).to(kFloat32);
    const Tensor got = sum(x.to(kBFloat16).to(kCuda), {0}).cpu();
    CHECK(got.dtype() == kBFloat16);
    CHECK(allclose(got.to(kFloat32), want, 1.0 / 128, 1e-3));  // one bf16 rounding of the exact sum
  }
  SUBCASE("layer_norm's dw and db over 3000 rows") {
    const Tensor x = randn({3000, 48}, TensorOptions(kFloat64), &g), c = randn({3000, 48}, TensorOptions(kFloat64), &g);
    const Tensor w0 = randn({48}, TensorOptions(kFloat64), &g), b0 = randn({48}, TensorOptions(kFloat64), &g);
    Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor wd = w0.to(kCuda).requires_grad_(), bd = b0.to(kCuda).requires_grad_();
    sum(mul(layer_norm(x, {48}, w, b), c)).backward();
    sum(mul(layer_norm(x.to(kCuda), {48}, wd, bd), c.to(kCuda))).backward();
    CHECK(allclose(wd.grad().cpu(), w.grad(), 1e-10, 1e-10));
    CHECK(allclose(bd.grad().cpu(), b.grad(), 1e-10, 1e-10));
  }
}

TEST_CASE("cuda sums: a few long rows split into slices equal the CPU's (whole-tensor sums)") {
  if (!test::cuda_usable()) return;
  Generator g(22);
  const Tensor x = randn({300000}, TensorOptions(kFloat64), &g);
  CHECK(allclose(sum(x.to(kCuda)).cpu(), sum(x), 1e-12, 1e-12));  // one row: 73 slices
  const Tensor y = randn({3, 50000}, TensorOptions(kFloat64), &g);
  CHECK(allclose(sum(y.to(kCuda), {1}).cpu(), sum(y, {1}), 1e-12, 1e-12));  // 12 slices a row
  const Tensor k = randint(-1000, 1000, {2, 40000}, TensorOptions(kInt64), &g);
  CHECK(equal(sum(k.to(kCuda), {1}).cpu(), sum(k, {1})));
  const Tensor b = randn({100000}, TensorOptions(kFloat32), &g).to(kBFloat16);
  const Tensor got = sum(b.to(kCuda)).cpu();
  CHECK(got.dtype() == kBFloat16);
  CHECK(allclose(got.to(kFloat32), sum(b.to(kFloat64)).to(kFloat32), 1.0 / 128, 1e-2));  // one rounding
}
