// Tests of the one-row product (ops/gemv_avx512.h): gemv on raw arrays in
// every combination of layouts and element types, odd sizes (row and column
// tails of its blocks, inner dims off the vector width), alpha, beta, both
// bias types and a strided x, against a float64 product of the operands as
// the product multiplies them; the portable loops the same way; the GEMM
// kernel's hook through linear and matmul against the same products run as
// two rows (the GEMM kernels' path).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <ember/ember.h>
#include <ember/ops/gemv_avx512.h>

#include "test_util.h"

using namespace ember;
using namespace ember::cpu;

namespace {

float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

// An array of one element type: float32 values, or their bf16 bits.
struct Array {
  GemmElem type;
  std::vector<float> f;
  std::vector<uint16_t> h;
  Array(GemmElem t, const std::vector<float>& v) : type(t), f(v) {
    if (t == GemmElem::kBFloat16)
      for (float x : v) h.push_back(bf16_from_float(x));
  }
  void* data() { return type == GemmElem::kBFloat16 ? static_cast<void*>(h.data()) : static_cast<void*>(f.data()); }
  // The element as the product multiplies it (rounded to bf16 in a bf16 product).
  double value(size_t i, bool bf16) const {
    return type == GemmElem::kBFloat16 ? bf16_to_float(h[i]) : bf16 ? round_bf16(f[i]) : f[i];
  }
  double stored(size_t i) const { return type == GemmElem::kBFloat16 ? bf16_to_float(h[i]) : f[i]; }
};

std::vector<float> randoms(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// One product checked against float64: |got - want| within float32
// accumulation's bound (k ulps of the sum of magnitudes), plus one bf16
// rounding of y where y is bf16.
void check_gemv(int64_t n, int64_t k, bool tb, GemmElem xt, GemmElem bt, GemmElem yt, GemmElem biast, bool with_bias,
                float alpha, float beta, int64_t incx, std::mt19937& rng) {
  const bool bf16 = xt == GemmElem::kBFloat16 || bt == GemmElem::kBFloat16 || yt == GemmElem::kBFloat16;
  const int64_t ldb = (tb ? k : n) + 3;  // a padded leading dimension
  Array x(xt, randoms(static_cast<size_t>(std::max<int64_t>(1, k * incx)), rng));
  Array b(bt, randoms(static_cast<size_t>(std::max<int64_t>(1, (tb ? n : k) * ldb)), rng));
  Array y(yt, randoms(static_cast<size_t>(n), rng));
  Array bias(biast, randoms(static_cast<size_t>(n), rng));
  const Array y0 = y;
  GemvArgs g;
  g.trans_b = tb, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
  g.x = x.data(), g.incx = incx, g.x_type = xt;
  g.b = b.data(), g.ldb = ldb, g.b_type = bt;
  g.y = y.data(), g.y_type = yt;
  if (with_bias) g.bias = bias.data(), g.bias_type = biast;
  gemv(g);
  for (int64_t j = 0; j < n; ++j) {
    double want = 0, mag = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double xb = x.value(static_cast<size_t>(p * incx), bf16);
      const double bv = b.value(static_cast<size_t>(tb ? j * ldb + p : p * ldb + j), bf16);
      want += xb * bv;
      mag += std::abs(xb * bv);
    }
    want *= alpha;
    mag *= std::abs(alpha);
    if (beta != 0) want += beta * y0.stored(static_cast<size_t>(j)), mag += std::abs(beta * y0.stored(j));
    if (with_bias) want += bias.stored(static_cast<size_t>(j)), mag += std::abs(bias.stored(j));
    double tol = (static_cast<double>(k) + 4) * 6e-8 * mag + 1e-30;
    if (yt == GemmElem::kBFloat16) tol += std::abs(want) * 0x1.0p-8;
    const double got = y.stored(static_cast<size_t>(j));
    INFO("n=", n, " k=", k, " tb=", tb, " j=", j, " bf16=", bf16);
    CHECK(std::abs(got - want) <= tol);
  }
}

void sweep(std::mt19937& rng) {
  const GemmElem F = GemmElem::kFloat32, H = GemmElem::kBFloat16;
  struct Types {
    GemmElem x, b, y, bias;
  };
  for (const Types& t : std::vector<Types>{{F, F, F, F}, {F, H, F, F}, {H, H, H, H}, {F, H, H, F}, {H, F, F, H}})
    for (bool tb : {true, false})
      for (int64_t n : {1, 3, 17, 130, 257})
        for (int64_t k : {0, 1, 15, 33, 200}) {
          check_gemv(n, k, tb, t.x, t.b, t.y, t.bias, false, 1.0f, 0.0f, 1, rng);
          check_gemv(n, k, tb, t.x, t.b, t.y, t.bias, true, 0.5f, 0.75f, 3, rng);
        }
  // Products past the inline size (2^19 multiply-adds) split their blocks
  // of 128 outputs across the pool, the last block partial.
  for (const Types& t : std::vector<Types>{{F, F, F, F}, {H, H, H, H}})
    for (bool tb : {true, false}) {
      check_gemv(1000, 777, tb, t.x, t.b, t.y, t.bias, true, 0.5f, 0.75f, 1, rng);
      check_gemv(300, 3072, tb, t.x, t.b, t.y, t.bias, false, 1.0f, 0.0f, 2, rng);
    }
}

struct FallbackGuard {
  ~FallbackGuard() { gemv_force_fallback(false); }
};

}  // namespace

TEST_CASE("gemv: every layout and element type, odd sizes, alpha, beta, bias and a strided x, against float64") {
  std::mt19937 rng(7);
  sweep(rng);
}

TEST_CASE("gemv: the portable loops give the same products") {
  const FallbackGuard restore;
  gemv_force_fallback(true);
  CHECK_FALSE(gemv_uses_avx512());
  std::mt19937 rng(8);
  sweep(rng);
}

TEST_CASE("gemv: beta = 0 never reads y, and bad arguments are refused") {
  std::vector<float> x(4, 1.0f), b(8, 2.0f), y(2, std::nanf(""));
  GemvArgs g;
  g.trans_b = true, g.n = 2, g.k = 4, g.x = x.data(), g.b = b.data(), g.ldb = 4, g.y = y.data();
  gemv(g);
  CHECK(y[0] == 8.0f);
  CHECK(y[1] == 8.0f);
  g.ldb = 3;
  CHECK_THROWS_WITH_AS(gemv(g), doctest::Contains("gemv: ldb 3"), ValueError);
  g.ldb = 4, g.incx = 0;
  CHECK_THROWS_AS(gemv(g), ValueError);
}

TEST_CASE("gemv: one-row linear and matmul equal the GEMM kernels' two-row products") {
  // A row alone takes the GEMV hook; the same row twice goes to the GEMM
  // kernels. float32: the same up to the order of the sums; bfloat16: both
  // round the operands the same way and accumulate in float32.
  Generator gen(3);
  for (int64_t in : {1, 31, 768})
    for (int64_t out : {1, 19, 300}) {
      const Tensor w = randn({out, in}, TensorOptions(), &gen), bias = randn({out}, TensorOptions(), &gen);
      const Tensor x = randn({1, in}, TensorOptions(), &gen);
      const Tensor x2 = cat({x, x}, 0);
      INFO("in=", in, " out=", out);
      // float32, with and without bias, and matmul without the transpose.
      CHECK(allclose(linear(x, w, bias), linear(x2, w, bias).narrow(0, 0, 1), 1e-5, 1e-5));
      CHECK(allclose(linear(x, w), linear(x2, w).narrow(0, 0, 1), 1e-5, 1e-5));
      const Tensor wt = w.t().contiguous();
      CHECK(allclose(matmul(x, wt), matmul(x2, wt).narrow(0, 0, 1), 1e-5, 1e-5));
      // A transposed x (a column's view) is read with its stride.
      const Tensor xc = randn({in, 1}, TensorOptions(), &gen);
      CHECK(allclose(matmul(xc.t(), wt), matmul(cat({xc, xc}, 1).t(), wt).narrow(0, 0, 1), 1e-5, 1e-5));
      // bfloat16 weights and activations, float32 bias: the bf16 product.
      const Tensor wb = w.to(kBFloat16), xb = x.to(kBFloat16);
      const Tensor yb = linear(xb, wb, bias.to(kBFloat16)).to(kFloat32);
      const Tensor yb2 = linear(cat({xb, xb}, 0), wb, bias.to(kBFloat16)).narrow(0, 0, 1).to(kFloat32);
      CHECK(allclose(yb, yb2, 1e-2, 1e-2));
      // Under bf16 autocast with float32 weights (rounded as they are read).
      AutocastGuard region(DeviceType::CPU, kBFloat16);
      const Tensor ya = linear(x, w, bias).to(kFloat32);
      const Tensor ya2 = linear(x2, w, bias).narrow(0, 0, 1).to(kFloat32);
      CHECK(allclose(ya, ya2, 1e-2, 1e-2));
    }
}
