// The matrix-vector product of ops/gemv_avx512.h: the argument checks, x's
// float32 copy, the AVX-512 loops and their portable twins, the split over
// the pool, and gemv_gemm, the GEMM kernel's hook for products of one row.
#include <ember/ops/gemv_avx512.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/parallel.h>
#include <ember/ops/matmul.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define EMBER_GEMV_AVX512 1
// GCC 12 warns that the masked loads' pass-through operand "may be used
// uninitialized" (it is the zero vector) where they are inlined into the
// loops below, as in ops/avx512_bf16_round.h; for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#else
#define EMBER_GEMV_AVX512 0
#endif

namespace ember::cpu {

namespace {

std::atomic<bool> g_force_fallback{false};

// Outputs per task block and per pass of the row-major loop: 8 vectors of y.
constexpr int64_t kBlock = 128;
// Products below this many multiply-adds run on the caller (as the GEMM's
// kParallelWork, ops/matmul_cpu.cpp).
constexpr int64_t kParallelWork = int64_t(1) << 19;

// How B's elements become float32: float32 as they are, float32 rounded to
// bfloat16 first (a bf16 product with a float32 B), or bfloat16 widened.
enum class BKind { kF32, kF32Rounded, kBF16 };

template <BKind K>
using BElem = std::conditional_t<K == BKind::kBF16, uint16_t, float>;

template <BKind K>
inline float b_value(const BElem<K>* b, int64_t i) {
  if constexpr (K == BKind::kBF16) return bf16_to_float(b[i]);
  if constexpr (K == BKind::kF32Rounded) return bf16_to_float(bf16_from_float(b[i]));
  return b[i];
}

// ---- portable loops -----------------------------------------------------------

// dot[i] = sum_p x[p] b[(j0 + i) ldb + p] for i < nj: transposed B.
template <BKind K>
void dots_portable(const BElem<K>* b, int64_t ldb, const float* x, int64_t k, int64_t j0, int64_t nj, float* dot) {
  for (int64_t i = 0; i < nj; ++i) {
    const BElem<K>* row = b + (j0 + i) * ldb;
    float s = 0;
    for (int64_t p = 0; p < k; ++p) s += x[p] * b_value<K>(row, p);
    dot[i] = s;
  }
}

// dot[i] = sum_p x[p] b[p ldb + j0 + i] for i < nj: row-major B.
template <BKind K>
void axpys_portable(const BElem<K>* b, int64_t ldb, const float* x, int64_t k, int64_t j0, int64_t nj, float* dot) {
  std::fill(dot, dot + nj, 0.0f);
  for (int64_t p = 0; p < k; ++p) {
    const BElem<K>* row = b + p * ldb + j0;
    for (int64_t i = 0; i < nj; ++i) dot[i] += x[p] * b_value<K>(row, i);
  }
}

// ---- AVX-512 loops ------------------------------------------------------------

#if EMBER_GEMV_AVX512

// 16 elements of B from p as float32: all of them (Full), or the lanes of m
// with the others 0.
template <BKind K, bool Full = false>
inline __m512 load16(const BElem<K>* p, __mmask16 m) {
  if constexpr (K == BKind::kBF16) {
    const __m256i h = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    const __m512 v = Full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
    if constexpr (K == BKind::kF32) return v;
    // Round to nearest even on the bits (bf16_from_float's formula), NaN to 0x7FC0.
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd);
    r = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(r);
  }
}

inline __mmask16 lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1);
}

// One row of transposed B against x, in four accumulators (64 elements a
// step, enough to cover the FMA latency), summed across lanes at the end.
// Rows one after the other: B is read as one sequential stream. Eight rows
// in flight (each its own stream, a row apart) read bf16 weights at a third
// of that speed on this CPU (5 against 14.5 GB/s on one core, GPT-2's
// 768-wide rows; docs/PERFORMANCE.md).
template <BKind K>
inline float dot_row(const BElem<K>* b, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const __mmask16 all = 0xFFFF;
  int64_t p = 0;
  for (; p + 64 <= k; p += 64) {
    a0 = _mm512_fmadd_ps(load16<K, true>(b + p, all), _mm512_loadu_ps(x + p), a0);
    a1 = _mm512_fmadd_ps(load16<K, true>(b + p + 16, all), _mm512_loadu_ps(x + p + 16), a1);
    a2 = _mm512_fmadd_ps(load16<K, true>(b + p + 32, all), _mm512_loadu_ps(x + p + 32), a2);
    a3 = _mm512_fmadd_ps(load16<K, true>(b + p + 48, all), _mm512_loadu_ps(x + p + 48), a3);
  }
  for (; p < k; p += 16) {
    const __mmask16 m = lanes(k - p);
    a0 = _mm512_fmadd_ps(load16<K>(b + p, m), _mm512_maskz_loadu_ps(m, x + p), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

template <BKind K>
void dots_avx512(const BElem<K>* b, int64_t ldb, const float* x, int64_t k, int64_t j0, int64_t nj, float* dot) {
  for (int64_t i = 0; i < nj; ++i) dot[i] = dot_row<K>(b + (j0 + i) * ldb, x, k);
}

// Up to 128 columns of row-major B: each row p adds x[p] times its columns
// into eight vectors (the missing ones masked off).
template <BKind K>
void axpys_avx512(const BElem<K>* b, int64_t ldb, const float* x, int64_t k, int64_t j0, int64_t nj, float* dot) {
  __mmask16 m[8];
  __m512 acc[8];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    m[v] = lanes(std::max<int64_t>(0, nj - 16 * v));
    acc[v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m512 xp = _mm512_set1_ps(x[p]);
    const BElem<K>* row = b + p * ldb + j0;
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) acc[v] = _mm512_fmadd_ps(xp, load16<K>(row + 16 * v, m[v]), acc[v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) _mm512_mask_storeu_ps(dot + 16 * v, m[v], acc[v]);
}

#endif  // EMBER_GEMV_AVX512

// ---- one product --------------------------------------------------------------

inline float read(const void* p, GemmElem t, int64_t i) {
  return t == GemmElem::kBFloat16 ? bf16_to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// y[j0 .. j0 + nj) = alpha dot + beta y + bias, rounded once to y's type.
void finish(const GemvArgs& g, int64_t j0, int64_t nj, const float* dot) {
  for (int64_t i = 0; i < nj; ++i) {
    const int64_t j = j0 + i;
    float v = g.alpha * dot[i];
    if (g.beta != 0.0f) v += g.beta * read(g.y, g.y_type, j);  // beta = 0 never reads y
    if (g.bias) v += read(g.bias, g.bias_type, j);
    if (g.y_type == GemmElem::kBFloat16)
      static_cast<uint16_t*>(g.y)[j] = bf16_from_float(v);
    else
      static_cast<float*>(g.y)[j] = v;
  }
}

template <BKind K>
void run(const GemvArgs& g, const float* x) {
  const auto* b = static_cast<const BElem<K>*>(g.b);
  const bool simd = EMBER_GEMV_AVX512 && !g_force_fallback.load(std::memory_order_relaxed);
  const int64_t blocks = (g.n + kBlock - 1) / kBlock;
  // One block a chunk once the product is worth splitting at all: it is
  // memory-bound, so each thread should stream an equal share of B. (A grain
  // of kParallelWork multiply-adds would run GPT-2's 768 x 768 weights on one
  // thread and its 2304 x 768 ones two to one.)
  const int64_t grain = g.n * g.k < kParallelWork ? blocks : 1;
  parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
    float dot[kBlock];
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t j0 = blk * kBlock, nj = std::min(kBlock, g.n - j0);
#if EMBER_GEMV_AVX512
      if (simd) {
        if (g.trans_b)
          dots_avx512<K>(b, g.ldb, x, g.k, j0, nj, dot);
        else
          axpys_avx512<K>(b, g.ldb, x, g.k, j0, nj, dot);
        finish(g, j0, nj, dot);
        continue;
      }
#endif
      if (g.trans_b)
        dots_portable<K>(b, g.ldb, x, g.k, j0, nj, dot);
      else
        axpys_portable<K>(b, g.ldb, x, g.k, j0, nj, dot);
      finish(g, j0, nj, dot);
    }
  });
  (void)simd;
}

}  // namespace

void gemv_force_fallback(bool on) { g_force_fallback.store(on); }
bool gemv_uses_avx512() { return EMBER_GEMV_AVX512 && !g_force_fallback.load(); }

void gemv(const GemvArgs& g) {
  EMBER_CHECK(g.n >= 0 && g.k >= 0, ValueError, "gemv: negative size (n=", g.n, ", k=", g.k, ")");
  EMBER_CHECK(g.incx >= 1, ValueError, "gemv: incx must be >= 1, got ", g.incx);
  if (g.n == 0) return;
  EMBER_CHECK(g.y, ValueError, "gemv: null y");
  EMBER_CHECK(g.k == 0 || (g.x && g.b), ValueError, "gemv: null x or B");
  EMBER_CHECK(g.k == 0 || g.ldb >= (g.trans_b ? g.k : g.n), ValueError, "gemv: ldb ", g.ldb, " is below B's ",
              g.trans_b ? "k " : "n ", g.trans_b ? g.k : g.n);
  // The bf16 product when any of x, B, y is bfloat16 (the bias does not
  // decide: as in the GEMM kernel's choice, ops/matmul_cpu.cpp).
  const bool bf16 =
      g.x_type == GemmElem::kBFloat16 || g.b_type == GemmElem::kBFloat16 || g.y_type == GemmElem::kBFloat16;
  // x as float32, rounded through bfloat16 in a bf16 product. One buffer per
  // calling thread, kept: a decoding step calls this some fifty times.
  thread_local std::vector<float> xbuf;
  if (static_cast<int64_t>(xbuf.size()) < g.k) xbuf.resize(static_cast<size_t>(g.k));
  for (int64_t p = 0; p < g.k; ++p) {
    const float v = read(g.x, g.x_type, p * g.incx);
    xbuf[p] = bf16 && g.x_type == GemmElem::kFloat32 ? bf16_to_float(bf16_from_float(v)) : v;
  }
  if (g.b_type == GemmElem::kBFloat16)
    run<BKind::kBF16>(g, xbuf.data());
  else if (bf16)
    run<BKind::kF32Rounded>(g, xbuf.data());
  else
    run<BKind::kF32>(g, xbuf.data());
}

namespace {
GemmElem elem_of(const Tensor& t) { return t.dtype() == DType::BFloat16 ? GemmElem::kBFloat16 : GemmElem::kFloat32; }
bool f32_or_bf16(const Tensor& t) { return t.dtype() == DType::Float32 || t.dtype() == DType::BFloat16; }
}  // namespace

bool gemv_gemm(const GemmDesc& d) {
  if (!gemv_uses_avx512() || d.m != 1 || d.batch.numel() != 1 || !f32_or_bf16(d.a) || !f32_or_bf16(d.b) ||
      !f32_or_bf16(d.c) || (d.bias.defined() && !f32_or_bf16(d.bias)))
    return false;
  GemvArgs g;
  g.trans_b = d.trans_b;
  g.n = d.n;
  g.k = d.k;
  g.alpha = static_cast<float>(d.alpha);
  g.beta = static_cast<float>(d.beta);
  g.x = d.a.data_ptr();
  g.incx = d.trans_a ? d.lda : 1;  // A(0, p): a[p lda] transposed, a[p] not
  g.x_type = elem_of(d.a);
  g.b = d.b.data_ptr();
  g.ldb = d.ldb;
  g.b_type = elem_of(d.b);
  g.y = d.c.data_ptr();
  g.y_type = elem_of(d.c);
  if (d.bias.defined()) {
    g.bias = d.bias.data_ptr();
    g.bias_type = elem_of(d.bias);
  }
  gemv(g);
  return true;
}

}  // namespace ember::cpu
