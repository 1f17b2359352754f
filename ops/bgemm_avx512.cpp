// The bf16 GEMM's entry point and its float32 fallback; the interface and
// the layouts are described in ops/bgemm_avx512.h. Here: the argument checks,
// the choice of path (CPUID, EMBER_NO_AVX512_BF16, bgemm_force_fallback), the
// scalar bf16 conversions, and the fallback through the float32 GEMM. The
// kernel is in ops/bgemm_kernel_avx512.cpp, the peak loops in
// ops/bgemm_peak.cpp.
#include <ember/ops/bgemm_avx512.h>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <ember/core/error.h>
#include <ember/core/parallel.h>
#include <ember/ops/bgemm_detail.h>
#include <ember/ops/sgemm_avx512.h>

namespace ember::cpu {

uint16_t bf16_from_float(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  // Round to nearest even: add 0x7FFF, plus 1 when the kept part is odd.
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

namespace {

using bgemm_detail::ceil_div;
using bgemm_detail::kParallelWork;
using bgemm_detail::Scratch;

// bgemm_force_fallback's switch; EMBER_NO_AVX512_BF16 is read once, apart.
std::atomic<bool> g_force_fallback{false};
bool env_disables_kernel() {
  static const bool off = [] {
    const char* e = std::getenv("EMBER_NO_AVX512_BF16");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return off;
}

// ---- the fallback: float32 operands through the float32 GEMM ------------------

// The operand's value as the kernel multiplies it: a float32 element
// rounded to bf16 (as the kernel packs it), a bf16 one as it is.
inline float operand(uint16_t h) { return bf16_to_float(h); }
inline float operand(float x) { return bf16_to_float(bf16_from_float(x)); }

// Rows [i0, i0 + ni) of op(X) (X stored [rows][ld], or transposed), all nj
// columns, as float32 into dst[ni][nj]. The type and the transpose are
// chosen outside the loops, so the row-major one vectorises.
template <class T>
void load_op(const T* x, bool trans, int64_t ld, int64_t i0, int64_t ni, int64_t nj, float* dst) {
  for (int64_t i = 0; i < ni; ++i) {
    float* d = dst + i * nj;
    if (trans) {
      for (int64_t j = 0; j < nj; ++j) d[j] = operand(x[j * ld + i0 + i]);
    } else {
      const T* r = x + (i0 + i) * ld;
      for (int64_t j = 0; j < nj; ++j) d[j] = operand(r[j]);
    }
  }
}
void load_op(const void* x, GemmElem t, bool trans, int64_t ld, int64_t i0, int64_t ni, int64_t nj, float* dst) {
  if (t == GemmElem::kBFloat16)
    load_op(static_cast<const uint16_t*>(x), trans, ld, i0, ni, nj, dst);
  else
    load_op(static_cast<const float*>(x), trans, ld, i0, ni, nj, dst);
}

// Per-thread float32 copies of the fallback's operands (no allocation per
// call: attention makes thousands of small products per step).
thread_local Scratch t_fall_b, t_fall_a, t_fall_c;

void bgemm_fallback(const BgemmArgs& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  // op(B) as a row-major float32 [k][n], shared by every row block.
  auto* bf = static_cast<float*>(t_fall_b.get(sizeof(float) * std::max<int64_t>(1, k * n)));
  parallel_for(0, k, std::max<int64_t>(1, kParallelWork / std::max<int64_t>(1, n * 64)),
               [&](int64_t lo, int64_t hi) { load_op(g.b, g.b_type, g.trans_b, g.ldb, lo, hi - lo, n, bf + lo * n); });
  const int64_t rows = std::max<int64_t>(16, ceil_div(kParallelWork, std::max<int64_t>(1, n * k)));
  parallel_for(0, ceil_div(m, rows), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t r0 = blk * rows, mr = std::min(rows, m - r0);
      auto* af = static_cast<float*>(t_fall_a.get(sizeof(float) * std::max<int64_t>(1, mr * k)));
      auto* t = static_cast<float*>(t_fall_c.get(sizeof(float) * std::max<int64_t>(1, mr * n)));
      load_op(g.a, g.a_type, g.trans_a, g.lda, r0, mr, k, af);
      // t = alpha op(A) op(B), then C = t + beta C + bias in the kernel's order.
      if (k == 0) {
        std::fill(t, t + mr * n, 0.0f);
      } else if (sgemm_avx512_fits(mr, n, k)) {
        sgemm_avx512(false, false, mr, n, k, g.alpha, af, k, bf, n, 0.0f, t, n);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mr), static_cast<int>(n),
                    static_cast<int>(k), g.alpha, af, static_cast<int>(k), bf, static_cast<int>(n), 0.0f, t,
                    static_cast<int>(n));
      }
      // C = t + beta C + bias, each step a loop of its own (one branch per
      // row, not per element, so that each vectorises).
      for (int64_t r = 0; r < mr; ++r) {
        float* x = t + r * n;
        const int64_t c0 = (r0 + r) * g.ldc;
        if (g.beta != 0.0f) {
          if (g.c_type == GemmElem::kFloat32) {
            const float* c = static_cast<const float*>(g.c) + c0;
            for (int64_t j = 0; j < n; ++j) x[j] = std::fma(g.beta, c[j], x[j]);
          } else {
            const uint16_t* c = static_cast<const uint16_t*>(g.c) + c0;
            for (int64_t j = 0; j < n; ++j) x[j] = std::fma(g.beta, bf16_to_float(c[j]), x[j]);
          }
        }
        if (g.bias) {
          if (g.bias_type == GemmElem::kFloat32) {
            const float* bias = static_cast<const float*>(g.bias);
            for (int64_t j = 0; j < n; ++j) x[j] += bias[j];
          } else {
            const uint16_t* bias = static_cast<const uint16_t*>(g.bias);
            for (int64_t j = 0; j < n; ++j) x[j] += bf16_to_float(bias[j]);
          }
        }
        if (g.c_type == GemmElem::kFloat32) {
          std::copy(x, x + n, static_cast<float*>(g.c) + c0);
        } else {
          uint16_t* c = static_cast<uint16_t*>(g.c) + c0;
          for (int64_t j = 0; j < n; ++j) c[j] = bf16_from_float(x[j]);
        }
      }
    }
    t_fall_a.trim();
    t_fall_c.trim();
  });
  t_fall_b.trim();
}

// Whether the CPU (and OS) can run the kernel, from CPUID.
#if EMBER_BGEMM_X86
bool cpu_has_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
#else
bool cpu_has_bf16() { return false; }
#endif

}  // namespace

bool bgemm_cpu_has_avx512_bf16() {
  static const bool has = cpu_has_bf16();
  return has;
}

bool bgemm_uses_kernel() {
  return bgemm_cpu_has_avx512_bf16() && !env_disables_kernel() && !g_force_fallback.load(std::memory_order_relaxed);
}

void bgemm_force_fallback(bool on) { g_force_fallback.store(on); }

void bgemm(const BgemmArgs& g) {
  EMBER_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, ValueError, "bgemm: negative size (m=", g.m, ", n=", g.n, ", k=", g.k,
              ")");
  if (g.m == 0 || g.n == 0) return;
  // op(A) is m x k: stored [m][k] (row stride >= k) or, transposed, [k][m].
  const int64_t a_row = g.trans_a ? g.m : g.k, b_row = g.trans_b ? g.k : g.n;
  EMBER_CHECK(g.lda >= std::max<int64_t>(1, a_row) && g.ldb >= std::max<int64_t>(1, b_row) && g.ldc >= g.n, ValueError,
              "bgemm: leading dimension too small (m=", g.m, ", n=", g.n, ", k=", g.k, ", lda=", g.lda, ", ldb=", g.ldb,
              ", ldc=", g.ldc, ")");
  EMBER_CHECK(g.c && (g.k == 0 || (g.a && g.b)), ValueError, "bgemm: null operand (m=", g.m, ", n=", g.n, ", k=", g.k,
              ")");
  if (bgemm_uses_kernel())
    bgemm_detail::bgemm_kernel(g);
  else
    bgemm_fallback(g);
}

}  // namespace ember::cpu
