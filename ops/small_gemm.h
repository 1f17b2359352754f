/// \file
/// A float32 GEMM for the small products of attention (one head's scores
/// L x D @ D x L, weights times values L x L @ L x D, and their backward), used
/// by the CPU matmul kernel (ops/matmul.cpp) in place of OpenBLAS when the
/// output is at most 64 columns wide and the inner dim at most 64.
///
/// Why: OpenBLAS packs both operands and sets up its blocking on every call,
/// which at 50 x 50 x 16 costs as much as the arithmetic: one head's products
/// ran at 35-60 GFLOP/s on one core (the demo transformer's attention, 1,024
/// of them per bmm), 26-40 at the ViT's 17 tokens. Here B is copied once into
/// a zero-padded [k][16 * NB] panel (NB <= 4 vectors of 16 columns) and every
/// block of MR rows of C is accumulated in MR * NB AVX-512 registers, with A's
/// elements broadcast from wherever they are (row- or column-major): measured
/// 100-125 GFLOP/s at L = 50 and 45-110 at L = 17 on one core.
///
/// Only with AVX-512 (EMBER_NATIVE on a machine that has it); elsewhere
/// small_gemm_fits() is false and OpenBLAS does the work.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ember::cpu {

/// Largest n and k the small kernel takes, and the largest m (beyond that the
/// packing is amortised and OpenBLAS's blocking wins).
constexpr int64_t kSmallGemmMaxNK = 64, kSmallGemmMaxM = 256;

#if defined(__AVX512F__)

inline bool small_gemm_fits(int64_t m, int64_t n, int64_t k) {
  return m <= kSmallGemmMaxM && n <= kSmallGemmMaxNK && k <= kSmallGemmMaxNK && n > 0 && k > 0;
}

namespace small_gemm_detail {

// MR rows by NB 16-wide column blocks of C = alpha A Bp + beta C. A's element
// (r, p) is a[r * ars + p * acs]; bp is the packed [k][16 NB] panel; `last`
// masks the columns of the final block that exist.
template <int MR, int NB>
inline void block(int64_t k, float alpha, float beta, const float* a, int64_t ars, int64_t acs, const float* bp,
                  float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NB];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NB];
    for (int j = 0; j < NB; ++j) bv[j] = _mm512_load_ps(bp + p * NB * 16 + j * 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * ars + p * acs]);
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_fmadd_ps(av, bv[j], acc[r][j]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NB; ++j) {
      const __mmask16 mask = j == NB - 1 ? last : static_cast<__mmask16>(0xFFFF);
      float* cp = c + r * ldc + j * 16;
      __m512 x = _mm512_mul_ps(al, acc[r][j]);
      // beta = 0 never reads C (it may hold NaN from an empty()).
      if (beta != 0.0f) x = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(mask, cp), x);
      _mm512_mask_storeu_ps(cp, mask, x);
    }
}

// All m rows for one NB: blocks of MR rows, MR * NB accumulators staying
// within 24 of the 32 registers (the rest hold B's vectors and A's broadcast),
// then the leftover rows in one smaller block.
template <int NB>
void rows(int64_t m, int64_t k, float alpha, float beta, const float* a, int64_t ars, int64_t acs, const float* bp,
          float* c, int64_t ldc, __mmask16 last) {
  constexpr int MR = NB == 4 ? 6 : 8;
  int64_t i = 0;
  for (; i + MR <= m; i += MR) {
    // Rows of A far apart (a head of a packed projection, 768 bytes apart in
    // the demo transformer) each start with a miss; asking for the next
    // block's rows now overlaps those misses with this block's arithmetic.
    if (acs == 1)
      for (int64_t r = i + MR; r < std::min(m, i + 2 * MR); ++r)
        for (int64_t p = 0; p < k; p += 16) _mm_prefetch(reinterpret_cast<const char*>(a + r * ars + p), _MM_HINT_T0);
    block<MR, NB>(k, alpha, beta, a + i * ars, ars, acs, bp, c + i * ldc, ldc, last);
  }
  const float* ai = a + i * ars;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 7: block<7, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    case 6: block<6, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    case 5: block<5, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    case 4: block<4, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    case 3: block<3, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    case 2: block<2, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    case 1: block<1, NB>(k, alpha, beta, ai, ars, acs, bp, ci, ldc, last); break;
    default: break;
  }
}

}  // namespace small_gemm_detail

/// C[m x n] (row stride ldc) = alpha * op(A)[m x k] @ op(B)[k x n] + beta * C,
/// with op(A)(r, p) = trans_a ? a[p * lda + r] : a[r * lda + p] and op(B)(p, j)
/// likewise. Requires small_gemm_fits(m, n, k).
inline void small_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  using namespace small_gemm_detail;
  alignas(64) float bp[kSmallGemmMaxNK * kSmallGemmMaxNK];
  const int64_t nb = (n + 15) / 16, np = nb * 16;
  // Pack op(B) into bp[p][j], the padding columns zero.
  if (!trans_b) {
    for (int64_t p = 0; p < k; ++p) {
      const float* br = b + p * ldb;
      float* o = bp + p * np;
      for (int64_t j = 0; j < n; ++j) o[j] = br[j];
      for (int64_t j = n; j < np; ++j) o[j] = 0.0f;
    }
  } else {
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = n; j < np; ++j) bp[p * np + j] = 0.0f;
    for (int64_t j = 0; j < n; ++j) {  // B's row j is op(B)'s column j, contiguous
      const float* bc = b + j * ldb;
      for (int64_t p = 0; p < k; ++p) bp[p * np + j] = bc[p];
    }
  }
  const int64_t ars = trans_a ? 1 : lda, acs = trans_a ? lda : 1;
  const auto last = static_cast<__mmask16>((1u << (n - (nb - 1) * 16)) - 1);
  switch (nb) {
    case 1: rows<1>(m, k, alpha, beta, a, ars, acs, bp, c, ldc, last); break;
    case 2: rows<2>(m, k, alpha, beta, a, ars, acs, bp, c, ldc, last); break;
    case 3: rows<3>(m, k, alpha, beta, a, ars, acs, bp, c, ldc, last); break;
    default: rows<4>(m, k, alpha, beta, a, ars, acs, bp, c, ldc, last); break;
  }
}

#else

inline bool small_gemm_fits(int64_t, int64_t, int64_t) { return false; }
inline void small_gemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                       float, float*, int64_t) {}

#endif

}  // namespace ember::cpu
