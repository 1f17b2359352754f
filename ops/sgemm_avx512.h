/// \file
/// Ember's own float32 GEMM, used by the CPU matmul kernel (ops/matmul_cpu.cpp)
/// in place of OpenBLAS for every float32 product, by the fused attention
/// kernels for one head's products, and by the convolutions' tiles.
///
/// Why: Debian's OpenBLAS 0.3.21 runs its Haswell (AVX2) SGEMM kernel on
/// AVX-512 CPUs, and at the models' shapes (the demo transformer's linear
/// layers, 12800 x 64 @ 64 x 192 and the like, and one attention head's
/// 50 x 50 x 16 products) it spends a large part of each call packing; at
/// GPT-2's (256 tokens against 768 x 50257) it reaches 70% of an AVX-512
/// core's peak where this kernel reaches 80-90% (docs/PERFORMANCE.md,
/// "Figures behind the code's comments").
///
/// How: op(B) is copied, 256 rows of the inner dim by 256 columns at a time,
/// into panels of at most 64 zero-padded columns (whole 16-float vectors);
/// every block of MR rows of C then accumulates in MR x NB AVX-512 registers
/// (NB <= 4 vectors, MR x NB <= 24), A's elements broadcast from wherever
/// they are (row- or column-major, so transposed operands are never copied).
/// Inner dims longer than 256 run slice after slice, accumulating into C.
///
/// Only with AVX-512 (EMBER_NATIVE on a machine that has it); elsewhere
/// sgemm_avx512_fits() is false and OpenBLAS does all the work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#if defined(__AVX512F__)
#include <immintrin.h>

#include <ember/ops/avx512_transpose.h>  // transpose16
#endif

namespace ember::cpu {

#if defined(__AVX512F__)

/// Whether this build has the kernel (AVX-512); without it every product goes to OpenBLAS.
constexpr bool kHaveSgemmAvx512 = true;

/// Whether sgemm_avx512 takes an m x n x k product.
inline bool sgemm_avx512_fits(int64_t m, int64_t n, int64_t k) { return m > 0 && n > 0 && k > 0; }

namespace sgemm_detail {

// op(B) is packed kPanelK rows of the inner dim by kChunkN columns at a time
// (256 KB: a quarter of a Zen 4 core's L2), as panels of kPanelN columns.
constexpr int64_t kPanelN = 64, kPanelK = 256, kChunkN = 256, kBlockM = 144;
// Products of at most kShortM rows, or whose A (m x k) fits in L3 (kTallA
// floats), sweep all their rows per panel; a transposed A with rows longer
// than kCopyLda floats (past a page apart) is copied; chunks are one panel
// wide where A (m x k) fits in L2 (kShortA floats).
constexpr int64_t kShortM = 512, kTallA = int64_t(1) << 21, kCopyLda = 1024, kShortA = int64_t(1) << 19;

struct FreeFloats {
  void operator()(float* p) const { std::free(p); }
};

// This thread's packing buffer, allocated on its first product (too large
// for the stack of any thread that may call a matmul): one chunk of op(B),
// then one block of a transposed A.
inline float* pack_buffer() {
  constexpr size_t kFloats = kPanelK * (kChunkN + kBlockM);
  thread_local std::unique_ptr<float, FreeFloats> buf(
      static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kFloats)));
  if (!buf) throw std::bad_alloc();
  return buf.get();
}

// MR rows by NB 16-wide column blocks of C = alpha A Bp + beta C (+ bias,
// one value per column, when not null). A's element (r, p) is a[r * ars + p *
// acs]; bp is the packed [k][16 NB] panel; `last` masks the columns of the
// final block that exist.
template <int MR, int NB>
inline void block(int64_t k, float alpha, float beta, const float* a, int64_t ars, int64_t acs, const float* bp,
                  float* c, int64_t ldc, __mmask16 last, const float* bias) {
  // The loops over rows and vectors are unrolled by pragma, as in
  // ops/bgemm_kernel_avx512.cpp: without it GCC 12 unrolls them only after its scalar
  // replacement of acc has given up, and the accumulators go through the
  // stack around the loop (a copy of all 24 per block: most of a block's time
  // at attention's k = 16).
  __m512 acc[MR][NB];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) bv[j] = _mm512_load_ps(bp + p * NB * 16 + j * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * ars + p * acs]);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const __mmask16 mask = j == NB - 1 ? last : static_cast<__mmask16>(0xFFFF);
      float* cp = c + r * ldc + j * 16;
      __m512 x = _mm512_mul_ps(al, acc[r][j]);
      // beta = 0 never reads C (it may hold NaN from an empty()).
      if (beta != 0.0f) x = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(mask, cp), x);
      if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, bias + j * 16));
      _mm512_mask_storeu_ps(cp, mask, x);
    }
}

// All m rows against one packed panel: blocks of MR rows, MR * NB
// accumulators staying within 24 of the 32 registers (the rest hold B's
// vectors and A's broadcast), then the leftover rows in one smaller block.
template <int NB>
void rows(int64_t m, int64_t k, float alpha, float beta, const float* a, int64_t ars, int64_t acs, const float* bp,
          float* c, int64_t ldc, __mmask16 last, const float* bias) {
  constexpr int MR = NB == 4 ? 6 : 8;
  int64_t i = 0;
  for (; i + MR <= m; i += MR) {
    // Rows of A far apart (a head of a packed projection, 768 bytes apart in
    // the demo transformer) each start with a miss; asking for the next
    // block's rows now overlaps those misses with this block's arithmetic.
    if (acs == 1)
      for (int64_t r = i + MR; r < std::min(m, i + 2 * MR); ++r)
        for (int64_t p = 0; p < std::min<int64_t>(k, 64); p += 16)
          _mm_prefetch(reinterpret_cast<const char*>(a + r * ars + p), _MM_HINT_T0);
    block<MR, NB>(k, alpha, beta, a + i * ars, ars, acs, bp, c + i * ldc, ldc, last, bias);
  }
  const float* ai = a + i * ars;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 7:
      block<7, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    case 6:
      block<6, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    case 5:
      block<5, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    case 4:
      block<4, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    case 3:
      block<3, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    case 2:
      block<2, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    case 1:
      block<1, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last, bias);
      break;
    default:
      break;
  }
}

// Copies op(B)'s rows [k0, k0 + kw) and columns [n0, n0 + nw) into bp[p][j]
// (row length np, the padding columns zero).
inline void pack_b(bool trans_b, const float* b, int64_t ldb, int64_t k0, int64_t kw, int64_t n0, int64_t nw,
                   int64_t np, float* bp) {
  if (!trans_b) {
    for (int64_t p = 0; p < kw; ++p) {
      const float* br = b + (k0 + p) * ldb + n0;
      float* o = bp + p * np;
      for (int64_t j = 0; j < nw; ++j) o[j] = br[j];
      for (int64_t j = nw; j < np; ++j) o[j] = 0.0f;
    }
  } else {
    // B's row n0 + j is op(B)'s column j, contiguous along p: 16 x 16 tiles
    // are loaded as rows and transposed in registers (one scalar load and
    // store per element cost more than the product itself at k = 16, one
    // attention head's scores). Missing rows and columns are zeros.
    for (int64_t j0 = 0; j0 < np; j0 += 16) {
      const int64_t jw = std::min<int64_t>(16, nw - j0);
      for (int64_t p0 = 0; p0 < kw; p0 += 16) {
        const int64_t pw = std::min<int64_t>(16, kw - p0);
        const auto pm = static_cast<__mmask16>((1u << pw) - 1);
        __m512 r[16];
        for (int64_t j = 0; j < 16; ++j)
          r[j] = j < jw ? _mm512_maskz_loadu_ps(pm, b + (n0 + j0 + j) * ldb + k0 + p0) : _mm512_setzero_ps();
        cpu::transpose16(r);
        for (int64_t p = 0; p < pw; ++p) _mm512_store_ps(bp + (p0 + p) * np + j0, r[p]);
      }
    }
  }
}

}  // namespace sgemm_detail

/// C[m x n] (row stride ldc) = alpha * op(A)[m x k] @ op(B)[k x n] + beta * C
/// (+ bias[j] in every row, when bias is not null: linear's bias, added as C
/// is written, with no pass of its own), with op(A)(r, p) = trans_a ? a[p *
/// lda + r] : a[r * lda + p] and op(B)(p, j) likewise. Requires
/// sgemm_avx512_fits(m, n, k).
inline void sgemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                         int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                         const float* bias = nullptr) {
  using namespace sgemm_detail;
  float* const bp = pack_buffer();
  float* const ap = bp + kPanelK * kChunkN;
  const int64_t ars = trans_a ? 1 : lda, acs = trans_a ? lda : 1;
  // Rows per sweep: a short product (a batch of tokens) sweeps all its rows
  // past each packed panel; a tall one (a weight's gradient, m = the vocab)
  // goes kBlockM rows at a time over every panel of the chunk, so its slice
  // of A stays in L2 instead of coming from memory once per panel. A tall
  // transposed A (the vocab's gradient: rows of 50257 floats) is copied per
  // block into kw rows of mw floats: read in place, each step of the inner
  // dim would start a new page and a new cache line for every block.
  const bool tall = m > kShortM && m * k > kTallA;
  const int64_t mc = tall ? kBlockM : m;
  const bool copy_a = tall && trans_a && lda > kCopyLda;
  // Columns per chunk: a short product whose A fits in L2 goes one panel at
  // a time (its part of C stays in L1 and L2 over the slices of the inner
  // dim); where A comes from memory (GPT-2's 256 x 50257 logits' gradient)
  // a chunk of four panels reads it a quarter as often.
  const int64_t chunk = tall || m * k > kShortA ? kChunkN : kPanelN;
  for (int64_t n0 = 0; n0 < n; n0 += chunk) {
    const int64_t ncw = std::min(chunk, n - n0);
    for (int64_t k0 = 0; k0 < k; k0 += kPanelK) {
      const int64_t kw = std::min(kPanelK, k - k0);
      // A tall product packs the chunk's panels first, as every block of rows
      // goes over all of them; a short one packs each panel just before its
      // one sweep, which then finds it in L1 and L2.
      auto pack = [&](int64_t j0) {
        const int64_t nw = std::min(kPanelN, ncw - j0);
        pack_b(trans_b, b, ldb, k0, kw, n0 + j0, nw, (nw + 15) / 16 * 16, bp + j0 * kPanelK);
      };
      if (tall)
        for (int64_t j0 = 0; j0 < ncw; j0 += kPanelN) pack(j0);
      // Later slices of the inner dim add onto what the first one wrote
      // (which holds beta C and the bias already).
      const float be = k0 == 0 ? beta : 1.0f;
      for (int64_t m0 = 0; m0 < m; m0 += mc) {
        const int64_t mw = std::min(mc, m - m0);
        const float* ak = a + m0 * ars + k0 * acs;
        int64_t acs_k = acs;
        if (copy_a) {
          for (int64_t p = 0; p < kw; ++p) std::copy(ak + p * lda, ak + p * lda + mw, ap + p * mw);
          ak = ap;
          acs_k = mw;
        }
        for (int64_t j0 = 0; j0 < ncw; j0 += kPanelN) {
          if (!tall) pack(j0);
          const int64_t nw = std::min(kPanelN, ncw - j0), nb = (nw + 15) / 16;
          const auto last = static_cast<__mmask16>((1u << (nw - (nb - 1) * 16)) - 1);
          const float* bs = k0 == 0 && bias ? bias + n0 + j0 : nullptr;
          const float* pj = bp + j0 * kPanelK;
          float* cj = c + m0 * ldc + n0 + j0;
          switch (nb) {
            case 1:
              rows<1>(mw, kw, alpha, be, ak, ars, acs_k, pj, cj, ldc, last, bs);
              break;
            case 2:
              rows<2>(mw, kw, alpha, be, ak, ars, acs_k, pj, cj, ldc, last, bs);
              break;
            case 3:
              rows<3>(mw, kw, alpha, be, ak, ars, acs_k, pj, cj, ldc, last, bs);
              break;
            default:
              rows<4>(mw, kw, alpha, be, ak, ars, acs_k, pj, cj, ldc, last, bs);
              break;
          }
        }
      }
    }
  }
}

#else

/// Without AVX-512: no kernel.
constexpr bool kHaveSgemmAvx512 = false;
/// Without AVX-512: never (OpenBLAS does every product).
inline bool sgemm_avx512_fits(int64_t, int64_t, int64_t) { return false; }
/// Without AVX-512: never called (sgemm_avx512_fits is false).
inline void sgemm_avx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                         float, float*, int64_t, const float* = nullptr) {}

#endif

}  // namespace ember::cpu
