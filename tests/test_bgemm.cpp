// Tests of the bf16 GEMM (ops/bgemm_avx512.h) on raw arrays: every row and
// column tail of its blocks and panels, odd and panel-crossing inner dims,
// both layouts of A and B, bf16 and float32 inputs, float32 and bf16 outputs,
// alpha, beta and both bias types, against a float64 product of the same
// bf16-rounded inputs, with a bound that only float32 accumulation can use
// up; the same sweep on the float32 fallback; the rounding (nearest even, NaN,
// infinities, subnormals) through the packing and the store; threads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/ops/bgemm_avx512.h>

#include "test_util.h"

using namespace ember;
using namespace ember::cpu;

namespace {

using bf16 = uint16_t;

float bits_to_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

// x as an operand of the product on the path in use: bf16-rounded, and on
// the kernel's path a subnormal is zero (vdpbf16ps: DAZ/FTZ).
float as_operand(float x) {
  const float r = round_bf16(x);
  return bgemm_uses_kernel() && std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}

// Restores the fallback switch and the thread count a test changed.
struct ModeGuard {
  int threads = num_threads();
  ~ModeGuard() {
    bgemm_force_fallback(false);
    set_num_threads(threads);
  }
};

// One product's operands, stored in the layouts and types under test, and
// their bf16-rounded values as float64 for the reference.
struct Case {
  int64_t m, n, k;
  bool ta, tb;
  GemmElem at, bt, ct, biast;
  float alpha, beta;
  bool with_bias;
};

struct Data {
  std::vector<bf16> a16, b16, c16, bias16;
  std::vector<float> a32, b32, c32, bias32;
  std::vector<double> ar, br;     // op(A) [m][k], op(B) [k][n] as the kernel multiplies them
  std::vector<double> c0, biasr;  // C before the call, the bias, as the kernel reads them
  int64_t lda, ldb, ldc;
};

Data make(const Case& t, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Data d;
  // Leading dimensions with padding, so that rows never touch.
  d.lda = (t.ta ? t.m : t.k) + 3;
  d.ldb = (t.tb ? t.k : t.n) + 5;
  d.ldc = t.n + 2;
  const int64_t asz = (t.ta ? t.k : t.m) * d.lda, bsz = (t.tb ? t.n : t.k) * d.ldb, csz = t.m * d.ldc;
  d.a32.resize(asz);
  d.b32.resize(bsz);
  for (float& x : d.a32) x = nd(rng);
  for (float& x : d.b32) x = nd(rng);
  // Padding holds NaN: the kernel must never multiply it (odd k reads a pair).
  for (int64_t i = 0; i < asz; ++i)
    if (i % d.lda >= (t.ta ? t.m : t.k)) d.a32[i] = std::nanf("");
  for (int64_t i = 0; i < bsz; ++i)
    if (i % d.ldb >= (t.tb ? t.k : t.n)) d.b32[i] = std::nanf("");
  for (float x : d.a32) d.a16.push_back(bf16_from_float(x));
  for (float x : d.b32) d.b16.push_back(bf16_from_float(x));
  d.ar.resize(t.m * t.k);
  d.br.resize(t.k * t.n);
  for (int64_t r = 0; r < t.m; ++r)
    for (int64_t p = 0; p < t.k; ++p) d.ar[r * t.k + p] = round_bf16(d.a32[t.ta ? p * d.lda + r : r * d.lda + p]);
  for (int64_t p = 0; p < t.k; ++p)
    for (int64_t j = 0; j < t.n; ++j) d.br[p * t.n + j] = round_bf16(d.b32[t.tb ? j * d.ldb + p : p * d.ldb + j]);
  d.c32.resize(csz);
  for (float& x : d.c32) x = nd(rng);
  for (float x : d.c32) d.c16.push_back(bf16_from_float(x));
  d.c0.resize(csz);
  for (int64_t i = 0; i < csz; ++i) d.c0[i] = t.ct == GemmElem::kBFloat16 ? bf16_to_float(d.c16[i]) : d.c32[i];
  d.bias32.resize(t.n);
  for (float& x : d.bias32) x = nd(rng);
  for (float x : d.bias32) d.bias16.push_back(bf16_from_float(x));
  for (int64_t j = 0; j < t.n; ++j)
    d.biasr.push_back(t.biast == GemmElem::kBFloat16 ? bf16_to_float(d.bias16[j]) : d.bias32[j]);
  return d;
}

BgemmArgs args(const Case& t, Data& d) {
  BgemmArgs g;
  g.trans_a = t.ta;
  g.trans_b = t.tb;
  g.m = t.m;
  g.n = t.n;
  g.k = t.k;
  g.alpha = t.alpha;
  g.beta = t.beta;
  g.a = t.at == GemmElem::kBFloat16 ? static_cast<const void*>(d.a16.data()) : d.a32.data();
  g.a_type = t.at;
  g.lda = d.lda;
  g.b = t.bt == GemmElem::kBFloat16 ? static_cast<const void*>(d.b16.data()) : d.b32.data();
  g.b_type = t.bt;
  g.ldb = d.ldb;
  g.c = t.ct == GemmElem::kBFloat16 ? static_cast<void*>(d.c16.data()) : d.c32.data();
  g.c_type = t.ct;
  g.ldc = d.ldc;
  if (t.with_bias)
    g.bias = t.biast == GemmElem::kBFloat16 ? static_cast<const void*>(d.bias16.data()) : d.bias32.data();
  g.bias_type = t.biast;
  return g;
}

// Runs the case and checks every element of C against the float64 product of
// the bf16-rounded operands: within (k + 3) float32 roundings of the sum of
// the magnitudes of its terms (float32 accumulation in any order), plus half
// a bf16 unit when C is bf16. The padding between C's rows stays untouched.
// Returns C as float64, for comparisons between paths.
std::vector<double> run_and_check(const Case& t, uint32_t seed) {
  std::mt19937 rng(seed);
  Data d = make(t, rng);
  bgemm(args(t, d));
  std::vector<double> got(t.m * t.n);
  int bad = 0;
  for (int64_t r = 0; r < t.m; ++r) {
    for (int64_t j = 0; j < t.n; ++j) {
      double s = 0, mag = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double v = d.ar[r * t.k + p] * d.br[p * t.n + j];
        s += v;
        mag += std::fabs(v);
      }
      const double c0 = t.beta != 0 ? d.c0[r * d.ldc + j] : 0.0;
      const double bias = t.with_bias ? d.biasr[j] : 0.0;
      const double want = t.alpha * s + t.beta * c0 + bias;
      const double scale = std::fabs(t.alpha) * mag + std::fabs(t.beta * c0) + std::fabs(bias);
      double tol = (static_cast<double>(t.k) + 3) * std::ldexp(1.0, -24) * scale;
      const int64_t ci = r * d.ldc + j;
      const double g = t.ct == GemmElem::kBFloat16 ? bf16_to_float(d.c16[ci]) : d.c32[ci];
      if (t.ct == GemmElem::kBFloat16) tol = tol * (1 + std::ldexp(1.0, -8)) + std::ldexp(std::fabs(want), -8);
      got[r * t.n + j] = g;
      if (!(std::fabs(g - want) <= tol + 1e-30) && bad++ < 3)
        FAIL_CHECK("C(", r, ", ", j, ") = ", g, ", want ", want, " (tolerance ", tol, ")");
    }
    for (int64_t j = t.n; j < d.ldc; ++j) {  // padding of C: never written
      const int64_t ci = r * d.ldc + j;
      if (t.ct == GemmElem::kBFloat16)
        CHECK(d.c16[ci] == bf16_from_float(d.c32[ci]));
      else
        CHECK(d.c32[ci] == d.c32[ci]);  // not NaN: make() wrote normal values there
    }
  }
  CHECK(bad == 0);
  return got;
}

std::string describe(const Case& t) {
  auto ty = [](GemmElem e) { return e == GemmElem::kBFloat16 ? "bf16" : "f32"; };
  return std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k) + (t.ta ? " A^T" : " A") +
         (t.tb ? " B^T" : " B") + " a:" + ty(t.at) + " b:" + ty(t.bt) + " c:" + ty(t.ct) +
         (t.with_bias ? std::string(" bias:") + ty(t.biast) : std::string()) + " alpha " + std::to_string(t.alpha) +
         " beta " + std::to_string(t.beta);
}

// The sweep every path must pass.
void sweep() {
  uint32_t seed = 1;
  const GemmElem B = GemmElem::kBFloat16, F = GemmElem::kFloat32;
  // Row tails of the 6- and 8-row blocks, column tails of the 16-wide
  // vectors and 64-wide panels, odd and short inner dims, every layout.
  for (int64_t m : {1, 5, 6, 7, 8, 9, 13, 50})
    for (int64_t n : {1, 15, 16, 17, 33, 64, 65, 130})
      for (int64_t k : {1, 2, 3, 31, 64})
        for (int lay = 0; lay < 4; ++lay) {
          const Case t{m, n, k, (lay & 1) != 0, (lay & 2) != 0, B, B, F, F, 1.0f, 0.0f, false};
          INFO(describe(t));
          run_and_check(t, seed++);
        }
  // Inner dims across the 512-long passes (the float32 workspace), with both
  // output types, alpha, beta, and bias of both types.
  for (int64_t k : {511, 512, 513, 1025, 1100})
    for (int64_t m : {7, 13})
      for (int64_t n : {17, 64, 130})
        for (int lay = 0; lay < 4; ++lay)
          for (GemmElem ct : {F, B}) {
            const Case t{m, n, k, (lay & 1) != 0, (lay & 2) != 0, B, B, ct, (lay & 1) ? B : F, 0.5f, -1.25f, true};
            INFO(describe(t));
            run_and_check(t, seed++);
          }
  // float32 inputs (autocast's master weights), rounded as they are packed:
  // A, B or both, each layout, odd k, bf16 and float32 outputs.
  for (GemmElem at : {B, F})
    for (GemmElem bt : {B, F})
      for (int lay = 0; lay < 4; ++lay)
        for (int64_t k : {33, 600}) {
          const Case t{29, 70, k, (lay & 1) != 0, (lay & 2) != 0, at, bt, (lay & 2) ? B : F, F, 2.0f, 0.5f, true};
          INFO(describe(t));
          run_and_check(t, seed++);
        }
}

}  // namespace

TEST_CASE("bgemm: bf16 rounding is nearest even, NaN canonical, as PyTorch") {
  CHECK(bf16_from_float(1.0f) == 0x3F80);
  CHECK(bf16_from_float(bits_to_float(0x3F808000)) == 0x3F80);  // tie, even below: down
  CHECK(bf16_from_float(bits_to_float(0x3F818000)) == 0x3F82);  // tie, odd below: up
  CHECK(bf16_from_float(bits_to_float(0x3F808001)) == 0x3F81);  // above the tie: up
  CHECK(bf16_from_float(bits_to_float(0x3F807FFF)) == 0x3F80);
  CHECK(bf16_from_float(-2.5f) == 0xC020);
  CHECK(bf16_from_float(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bf16_from_float(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(bf16_from_float(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(bf16_from_float(std::nanf("")) == 0x7FC0);
  CHECK(bf16_from_float(bits_to_float(0xFFC00001)) == 0x7FC0);
  CHECK(bf16_from_float(bits_to_float(0x00018000)) == 0x0002);  // subnormal tie: kept, to even
  CHECK(bf16_from_float(bits_to_float(0x80008000)) == 0x8000);  // tie to -0
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(bf16_to_float(0x0001) == bits_to_float(0x00010000));
  CHECK(std::isnan(bf16_to_float(0x7FC0)));
}

TEST_CASE("bgemm: every edge against a float64 reference") {
  ModeGuard guard;
  set_num_threads(1);
  INFO("kernel in use: ", bgemm_uses_kernel());
  sweep();
}

TEST_CASE("bgemm: the float32 fallback passes the same sweep and agrees with the kernel") {
  ModeGuard guard;
  bgemm_force_fallback(true);
  CHECK_FALSE(bgemm_uses_kernel());
  sweep();
  // Both paths on the same product: within float32 accumulation order.
  const GemmElem B = GemmElem::kBFloat16, F = GemmElem::kFloat32;
  for (int lay = 0; lay < 4; ++lay) {
    const Case t{37, 150, 777, (lay & 1) != 0, (lay & 2) != 0, B, (lay & 2) ? F : B, F, B, 1.0f, 0.0f, true};
    INFO(describe(t));
    bgemm_force_fallback(true);
    const std::vector<double> fb = run_and_check(t, 99);
    bgemm_force_fallback(false);
    const std::vector<double> kr = run_and_check(t, 99);
    double worst = 0;
    for (size_t i = 0; i < fb.size(); ++i) worst = std::max(worst, std::fabs(fb[i] - kr[i]));
    CHECK(worst < 1e-3);
  }
  bgemm_force_fallback(false);
  // EMBER_NO_AVX512_BF16=1 (the CTest entry "bgemm: fallback by environment")
  // keeps the fallback whatever the switch; otherwise the CPU decides.
  const char* env = std::getenv("EMBER_NO_AVX512_BF16");
  if (env && std::string(env) == "1")
    CHECK_FALSE(bgemm_uses_kernel());
  else
    CHECK(bgemm_uses_kernel() == bgemm_cpu_has_avx512_bf16());
}

TEST_CASE("bgemm: rounding of float32 inputs (packing) and of a bf16 C (store), special values included") {
  ModeGuard guard;
  for (bool fallback : {false, true}) {
    bgemm_force_fallback(fallback);
    INFO("fallback ", fallback);
    // Float32 values of every kind: normal, subnormal, ties, infinities, NaN
    // (bf16 subnormals count as zero on the kernel's path, see as_operand).
    std::vector<float> vals;
    std::mt19937 rng(5);
    for (uint32_t hi : {0x0000u, 0x0001u, 0x007Fu, 0x0080u, 0x3F80u, 0x3F81u, 0x7F7Fu, 0x7F80u, 0x7FC0u, 0x8001u,
                        0xBF80u, 0xFF80u, 0x1234u})
      for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
        vals.push_back(bits_to_float(hi << 16 | lo));
    for (int i = 0; i < 50; ++i) vals.push_back(bits_to_float(static_cast<uint32_t>(rng())));
    const int64_t N = static_cast<int64_t>(vals.size()), k = 33;
    // A float32 [N x k] (row-major, then transposed) holding value r at
    // (r, r % k) and zeros elsewhere, times a bf16 column of ones: C = bf16(A)
    // exactly (x + zeros is exact in float32, infinities and NaN included).
    std::vector<float> a(N * k, 0.0f), bt(k * N, 0.0f);
    for (int64_t r = 0; r < N; ++r) a[r * k + r % k] = vals[r];
    for (int64_t p = 0; p < k; ++p)
      for (int64_t r = 0; r < N; ++r) bt[p * N + r] = a[r * k + p];  // its transpose, [k][N]
    const std::vector<bf16> ones(k, 0x3F80);
    for (bool trans : {false, true}) {
      INFO("transposed ", trans);
      BgemmArgs g;
      g.trans_a = trans;
      g.m = N;
      g.n = 1;
      g.k = k;
      g.a = trans ? bt.data() : a.data();
      g.a_type = GemmElem::kFloat32;
      g.lda = trans ? N : k;
      g.b = ones.data();
      g.ldb = 1;
      std::vector<float> c(N);
      g.c = c.data();
      g.ldc = 1;
      bgemm(g);
      for (int64_t i = 0; i < N; ++i) {
        INFO("A value bits ", std::hex, bf16_from_float(vals[i]));
        const float want = as_operand(vals[i]);
        CHECK((std::isnan(want) ? std::isnan(c[i]) : c[i] == want));
      }
      // The same values as a float32 B (op(B) = the [k x N] transpose) against a row of ones.
      BgemmArgs h;
      h.m = 1;
      h.n = N;
      h.k = k;
      h.a = ones.data();
      h.lda = k;
      h.trans_b = trans;
      h.b = trans ? a.data() : bt.data();
      h.b_type = GemmElem::kFloat32;
      h.ldb = trans ? k : N;
      std::fill(c.begin(), c.end(), 0.0f);
      h.c = c.data();
      h.ldc = N;
      bgemm(h);
      for (int64_t i = 0; i < N; ++i) {
        INFO("B value bits ", std::hex, bf16_from_float(vals[i]));
        const float want = as_operand(vals[i]);
        CHECK((std::isnan(want) ? std::isnan(c[i]) : c[i] == want));
      }
    }
    // A bf16 C is the float32 result rounded once: with A B = 0, C = bias,
    // every float32 bias value rounded as bf16_from_float rounds it.
    std::vector<bf16> zero(N, 0), c16(N, 0x1234);
    BgemmArgs g;
    g.m = 1;
    g.n = N;
    g.k = 1;
    g.a = zero.data();
    g.lda = 1;
    g.b = zero.data();
    g.ldb = N;
    g.c = c16.data();
    g.c_type = GemmElem::kBFloat16;
    g.ldc = N;
    g.bias = vals.data();
    bgemm(g);
    for (int64_t i = 0; i < N; ++i) {
      INFO("bias bits ", std::hex, bf16_from_float(vals[i]));
      CHECK(c16[i] == (vals[i] == 0.0f ? bf16_from_float(0.0f) : bf16_from_float(vals[i])));
    }
  }
}

TEST_CASE("bgemm: a bf16 C equals the float32 C rounded once, whatever the passes") {
  // The same product into a float32 and a bf16 C (beta reading the same
  // bf16-exact values): each bf16 element is the float32 one, rounded.
  ModeGuard guard;
  for (bool fallback : {false, true}) {
    bgemm_force_fallback(fallback);
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    const int64_t m = 23, n = 77, k = 1300;  // three passes of the inner dim
    std::vector<bf16> a(m * k), b(k * n), bias(n), c16(m * n);
    for (auto& x : a) x = bf16_from_float(nd(rng));
    for (auto& x : b) x = bf16_from_float(nd(rng));
    for (auto& x : bias) x = bf16_from_float(nd(rng));
    for (auto& x : c16) x = bf16_from_float(nd(rng));
    std::vector<float> c32(m * n);
    for (int64_t i = 0; i < m * n; ++i) c32[i] = bf16_to_float(c16[i]);
    BgemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = 0.75f;
    g.beta = 2.0f;
    g.a = a.data();
    g.lda = k;
    g.b = b.data();
    g.ldb = n;
    g.ldc = n;
    g.bias = bias.data();
    g.bias_type = GemmElem::kBFloat16;
    g.c = c32.data();
    bgemm(g);
    g.c = c16.data();
    g.c_type = GemmElem::kBFloat16;
    bgemm(g);
    int bad = 0;
    for (int64_t i = 0; i < m * n; ++i) bad += c16[i] != bf16_from_float(c32[i]);
    CHECK_MESSAGE(bad == 0, "fallback ", fallback);
  }
}

TEST_CASE("bgemm: split across the pool, the same bits as on one thread") {
  // Every element's sum runs in the same order whatever the split. The
  // shapes: two inner-dim passes; a packed A (transposed, as a weight
  // gradient's dY^T) in one pass, whose tasks take several column groups
  // (m = 200) or all the panels (m = 1000); the short path (at most 512
  // rows: panel by panel, A copied once) with a float32 A over three passes
  // and odd k, and with 16384 columns; and a taller product whose packed
  // op(B) is larger than a thread's kept scratch (16384 x 600: 19.7 MB),
  // twice, so the second call reuses the caching allocator's block.
  ModeGuard guard;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  struct Shape {
    bool ta, tb;
    int64_t m, n, k;
    bool a32 = false;  // A in float32 (its values bf16's)
  };
  for (const Shape sh :
       {Shape{false, false, 1000, 300, 700}, Shape{false, true, 1000, 300, 700}, Shape{true, false, 200, 700, 256},
        Shape{true, true, 1000, 700, 300}, Shape{false, true, 300, 700, 1100, true},
        Shape{false, false, 256, 600, 1025, true}, Shape{true, true, 256, 600, 1025, true},
        Shape{false, true, 4, 16384, 600}, Shape{false, true, 600, 16384, 600}, Shape{false, true, 600, 16384, 600}}) {
    const int64_t m = sh.m, n = sh.n, k = sh.k;
    INFO("m ", m, " n ", n, " k ", k, sh.ta ? " A^T" : " A", sh.tb ? " B^T" : " B", sh.a32 ? " float32 A" : "");
    std::vector<bf16> a(m * k), b(k * n);
    for (auto& x : a) x = bf16_from_float(nd(rng));
    for (auto& x : b) x = bf16_from_float(nd(rng));
    std::vector<float> a32(sh.a32 ? m * k : 0);
    for (size_t i = 0; i < a32.size(); ++i) a32[i] = bf16_to_float(a[i]);
    std::vector<float> c1(m * n), c2(m * n);
    BgemmArgs g;
    g.trans_a = sh.ta;
    g.trans_b = sh.tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = sh.a32 ? static_cast<const void*>(a32.data()) : a.data();
    g.a_type = sh.a32 ? GemmElem::kFloat32 : GemmElem::kBFloat16;
    g.lda = sh.ta ? m : k;
    g.b = b.data();
    g.ldb = sh.tb ? k : n;
    g.ldc = n;
    set_num_threads(1);
    g.c = c1.data();
    bgemm(g);
    set_num_threads(2);
    g.c = c2.data();
    bgemm(g);
    CHECK(c1 == c2);
    // And against the reference at a few places.
    for (int64_t r : {int64_t(0), m / 2, m - 1})
      for (int64_t j : {int64_t(0), n / 2, n - 1}) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double v =
              double(bf16_to_float(a[sh.ta ? p * m + r : r * k + p])) * bf16_to_float(b[sh.tb ? j * k + p : p * n + j]);
          s += v;
          mag += std::fabs(v);
        }
        CHECK(std::fabs(c2[r * n + j] - s) <= (k + 3) * std::ldexp(1.0, -24) * mag);
      }
  }
}

TEST_CASE("bgemm: beta 0 never reads C, k = 0 gives beta C + bias") {
  ModeGuard guard;
  for (bool fallback : {false, true}) {
    bgemm_force_fallback(fallback);
    const std::vector<bf16> a = {0x3F80, 0x4000, 0x4040, 0x4080};  // 1 2 3 4 as [2 x 2]
    std::vector<float> c(4, std::nanf(""));
    BgemmArgs g;
    g.m = g.n = g.k = 2;
    g.a = a.data();
    g.lda = 2;
    g.b = a.data();
    g.ldb = 2;
    g.c = c.data();
    g.ldc = 2;
    bgemm(g);
    CHECK(c == std::vector<float>{7, 10, 15, 22});
    const std::vector<float> bias = {0.5f, -1.0f};
    g.k = 0;
    g.beta = 2.0f;
    g.bias = bias.data();
    bgemm(g);
    CHECK(c == std::vector<float>{14.5f, 19, 30.5f, 43});
  }
}

TEST_CASE("bgemm: bad arguments are a ValueError naming bgemm") {
  std::vector<bf16> a(16);
  std::vector<float> c(16);
  BgemmArgs g;
  g.m = 4;
  g.n = 4;
  g.k = 4;
  g.a = a.data();
  g.lda = 4;
  g.b = a.data();
  g.ldb = 4;
  g.c = c.data();
  g.ldc = 4;
  g.m = -1;
  CHECK(test::contains(test::error_of<ValueError>([&] { bgemm(g); }), "bgemm: negative size"));
  g.m = 4;
  g.lda = 3;
  CHECK(test::contains(test::error_of<ValueError>([&] { bgemm(g); }), "bgemm: leading dimension too small"));
  g.lda = 4;
  g.b = nullptr;
  CHECK(test::contains(test::error_of<ValueError>([&] { bgemm(g); }), "bgemm: null operand"));
}

TEST_CASE("bgemm: register peaks are measured where the CPU has AVX512_BF16") {
  if (!bgemm_cpu_has_avx512_bf16()) {
    CHECK(bf16_peak_gflops(0.001) == 0);
    return;
  }
  CHECK(bf16_peak_gflops(0.001) > 0);
  CHECK(fp32_peak_gflops(0.001) > 0);
}
