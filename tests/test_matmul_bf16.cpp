// bfloat16 products through the ops (ops/matmul.cpp on Ember's bf16 GEMM,
// ops/bgemm_avx512.h): matmul, mm, bmm and linear on bfloat16 tensors against
// a float64 reference of the same operands, autocast's bfloat16 form (float32
// inputs rounded inside the GEMM) against the explicit casts PyTorch's
// autocast makes, the gradients' dtypes and values, and the public ops still
// refusing mixed dtypes. Named "bgemm: ..." so that CTest runs them a second
// time on the float32 fallback (EMBER_NO_AVX512_BF16=1, tests/CMakeLists.txt).
#include "test_util.h"

using namespace ember;

namespace {

Tensor r(const Shape& s, DType dt = kFloat32) { return randn(s).to(dt); }

// The product of the bf16 values in float64, rounded to bfloat16 once: what
// a bf16 GEMM with float32 accumulation returns up to the accumulation order.
// The comparison allows one bfloat16 ulp (2^-8 relative) plus the float32
// accumulation error of a k-term sum.
void check_bf16_product(const Tensor& got, const Tensor& ref64, int64_t k) {
  REQUIRE(got.dtype() == kBFloat16);
  REQUIRE(got.shape() == ref64.shape());
  const Tensor g = got.to(kFloat64).contiguous(), want = ref64.contiguous();
  const double* pg = static_cast<const double*>(g.data_ptr());
  const double* pw = static_cast<const double*>(want.data_ptr());
  int bad = 0;
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::abs(pg[i] - pw[i]) > std::abs(pw[i]) * (1.0 / 256) + 1e-6 * static_cast<double>(k)) ++bad;
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("bgemm: matmul, mm and bmm of bfloat16 tensors, every shape case") {
  manual_seed(3);
  struct Case {
    Shape a, b;
  };
  for (const Case& c : std::vector<Case>{{{7, 5}, {5, 9}},
                                         {{3, 33, 70}, {70, 17}},
                                         {{2, 1, 6, 4}, {3, 4, 5}},
                                         {{65}, {65, 3}},
                                         {{4, 65}, {65}},
                                         {{130, 257}, {257, 66}}}) {
    const Tensor a = r(c.a, kBFloat16), b = r(c.b, kBFloat16);
    const Tensor out = matmul(a, b);
    check_bf16_product(out, matmul(a.to(kFloat64), b.to(kFloat64)), c.a.back());
  }
  // Transposed and strided views are read in place.
  const Tensor at = r({40, 24}, kBFloat16), bt = r({31, 40}, kBFloat16);
  check_bf16_product(mm(at.t(), bt.t()), mm(at.to(kFloat64).t(), bt.to(kFloat64).t()), 40);
  const Tensor a3 = r({4, 9, 12}, kBFloat16), b3 = r({4, 12, 10}, kBFloat16);
  check_bf16_product(bmm(a3, b3), bmm(a3.to(kFloat64), b3.to(kFloat64)), 12);
}

TEST_CASE("bgemm: linear on bfloat16 tensors, with and without a bias, and its gradients") {
  manual_seed(4);
  const Tensor x = r({5, 7, 48}, kBFloat16).requires_grad_();
  const Tensor w = r({20, 48}, kBFloat16).requires_grad_();
  const Tensor b = r({20}, kBFloat16).requires_grad_();
  const Tensor y = linear(x, w, b);
  const Tensor x64 = x.detach().to(kFloat64), w64 = w.detach().to(kFloat64), b64 = b.detach().to(kFloat64);
  check_bf16_product(y, linear(x64, w64, b64), 48);
  check_bf16_product(linear(x.detach(), w.detach()), linear(x64, w64), 48);
  // d(sum(y * gy)): dx = gy W, dW = gy^T x, db = sum of gy; all bfloat16.
  const Tensor gy = r({5, 7, 20}, kBFloat16);
  sum(mul(y, gy)).backward();
  REQUIRE(x.grad().dtype() == kBFloat16);
  REQUIRE(w.grad().dtype() == kBFloat16);
  REQUIRE(b.grad().dtype() == kBFloat16);
  const Tensor g64 = gy.to(kFloat64);
  check_bf16_product(x.grad(), matmul(g64, w64), 20);
  check_bf16_product(w.grad(), matmul(g64.reshape({35, 20}).t(), x64.reshape({35, 48})), 35);
  CHECK(allclose(b.grad().to(kFloat64), sum(g64, {0, 1}), 1.0 / 128, 1e-2));
}

TEST_CASE("bgemm: autocast's bfloat16 linear equals linear of the cast operands, gradients in float32") {
  manual_seed(5);
  const Tensor x = r({6, 3, 40}).requires_grad_();
  const Tensor w = r({24, 40}).requires_grad_();
  const Tensor b = r({24}).requires_grad_();
  Tensor y;
  {
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    y = linear(x, w, b);
  }
  // What PyTorch's autocast runs: the operands cast to bfloat16 first. The
  // GEMM rounds float32 operands the same way as it packs them, so the
  // forward results are the same bits.
  const Tensor xc = x.detach().to(kBFloat16), wc = w.detach().to(kBFloat16), bc = b.detach().to(kBFloat16);
  const Tensor want = linear(xc, wc, bc);
  REQUIRE(y.dtype() == kBFloat16);
  CHECK(equal(y, want));
  // Gradients reach the float32 leaves as float32, from bf16 products of the
  // bf16 gradient with the bf16-rounded operands (unrounded: Ember writes
  // them in float32 directly, where PyTorch rounds them to bfloat16 and then
  // casts; docs/PRECISION.md).
  const Tensor gy = r({6, 3, 24}, kBFloat16);
  sum(mul(y, gy)).backward();
  REQUIRE(x.grad().dtype() == kFloat32);
  REQUIRE(w.grad().dtype() == kFloat32);
  REQUIRE(b.grad().dtype() == kFloat32);
  const Tensor g64 = gy.to(kFloat64);
  const Tensor dx = matmul(g64, wc.to(kFloat64));
  const Tensor dw = matmul(g64.reshape({18, 24}).t(), xc.to(kFloat64).reshape({18, 40}));
  CHECK(allclose(x.grad().to(kFloat64), dx, 1e-5, 1e-5));
  CHECK(allclose(w.grad().to(kFloat64), dw, 1e-5, 1e-5));
  CHECK(allclose(b.grad().to(kFloat64), sum(g64, {0, 1}), 1.0 / 128, 1e-2));
}

TEST_CASE("bgemm: autocast's bfloat16 matmul and bmm, mixed float32/bfloat16 inputs, gradients in each input's dtype") {
  manual_seed(6);
  const Tensor a = r({2, 5, 16}).requires_grad_();             // float32
  const Tensor b = r({2, 16, 7}, kBFloat16).requires_grad_();  // already bfloat16
  Tensor y;
  {
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    y = bmm(a, b);
  }
  REQUIRE(y.dtype() == kBFloat16);
  CHECK(equal(y, bmm(a.detach().to(kBFloat16), b.detach())));
  sum(y).backward();
  REQUIRE(a.grad().dtype() == kFloat32);
  REQUIRE(b.grad().dtype() == kBFloat16);
  // d sum(a b) / da = 1 b^T; d / db = a^T 1.
  const Tensor ones64 = ones({2, 5, 7}, TensorOptions(kFloat64));
  CHECK(allclose(a.grad().to(kFloat64), matmul(ones64, b.detach().to(kFloat64).transpose(1, 2)), 1e-5, 1e-5));
  check_bf16_product(b.grad(), matmul(a.detach().to(kBFloat16).to(kFloat64).transpose(1, 2), ones64), 5);
  // float64 is never cast, inside a region or out.
  {
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    CHECK(matmul(r({3, 4}).to(kFloat64), r({4, 2}).to(kFloat64)).dtype() == kFloat64);
  }
}

TEST_CASE("bgemm: the public ops still refuse operands of two dtypes") {
  CHECK(test::contains(test::error_of<DTypeError>([] { linear(r({2, 4}, kBFloat16), r({3, 4})); }), "same dtype"));
  CHECK(test::contains(test::error_of<DTypeError>([] { matmul(r({2, 4}), r({4, 3}, kBFloat16)); }), "same dtype"));
  CHECK(test::contains(test::error_of<DTypeError>([] {
                         linear(r({2, 4}, kBFloat16), r({3, 4}, kBFloat16), r({3}));
                       }),
                       "bias"));
}

TEST_CASE("bgemm: multi-head self-attention on bfloat16 inputs (the composed path's bf16 form) against float32") {
  manual_seed(7);
  // 17 tokens (the ViT's): the composed path, whose products read the bf16
  // projection in place; a mask and dropout take the same path.
  for (const bool masked : {false, true}) {
    const Tensor qkv = r({3, 17, 48}, kBFloat16).requires_grad_();
    const Tensor q32 = qkv.detach().to(kFloat32).requires_grad_();
    const Tensor mask = masked ? gt(rand({17, 17}), 0.7) : Tensor();
    const Tensor y = multi_head_self_attention(qkv, 4, mask);
    const Tensor y32 = multi_head_self_attention(q32, 4, mask);
    REQUIRE(y.dtype() == kBFloat16);
    CHECK(allclose(y.to(kFloat32), y32, 1.0 / 64, 2e-2));
    const Tensor gy = r({3, 17, 16});
    sum(mul(y, gy.to(kBFloat16))).backward();
    sum(mul(y32, gy.to(kBFloat16).to(kFloat32))).backward();
    REQUIRE(qkv.grad().dtype() == kBFloat16);
    CHECK(allclose(qkv.grad().to(kFloat32), q32.grad(), 1.0 / 32, 5e-2));
  }
  // Dropout draws the same masks as the float32 path for the same seed.
  const Tensor x = r({2, 17, 24}, kBFloat16);
  Generator g1(11), g2(11);
  const Tensor a = multi_head_self_attention(x, 2, Tensor(), 0.3, &g1);
  const Tensor b = multi_head_self_attention(x.to(kFloat32), 2, Tensor(), 0.3, &g2);
  CHECK(allclose(a.to(kFloat32), b, 1.0 / 64, 2e-2));
}
