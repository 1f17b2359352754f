/// \file
/// The bf16 GEMM's packing (ops/bgemm_kernel_avx512.cpp includes it; not
/// part of the API): float32 and bfloat16 loads and stores of 16 lanes, and
/// the pair-interleaved copies of op(A) and op(B) whose layouts the
/// kernel's register blocks address (described in ops/bgemm_avx512.h).
/// Inline, so the compiler folds it into the kernel's tasks; every function
/// carries EMBER_TARGET_BF16 and runs only where CPUID reports AVX512_BF16.
#pragma once

#include <ember/ops/bgemm_detail.h>

#if EMBER_BGEMM_X86
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include <ember/ops/avx512_bf16_round.h>  // round_to_bf16
#include <ember/ops/avx512_transpose.h>   // transpose16
// GCC 12's AVX-512 intrinsics pass an "undefined" vector as the unused merge
// source of shifts, unpacks and extracts, which -Wmaybe-uninitialized reports
// (as in ops/avx512_transpose.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace ember::cpu::bgemm_detail {

// Packing asks for each row's elements this far ahead of the ones it reads
// (two panels' worth of a row-major B, four 32-element steps of a transposed
// one). Packing reads a weight that a training step has left in memory, 32
// (row-major) or 16 (transposed) rows at once; left to the hardware
// prefetchers, GPT-2's c_fc weight came in at 9-11 GB/s (docs/PERFORMANCE.md,
// "The bf16 GEMM").
constexpr int64_t kPrefetchAhead = 128;

// 16 floats -> their bf16 bits (core/half.h's rounding) in the low halves of 32-bit lanes.
EMBER_TARGET_BF16 inline __m512i round_bf16(__m512 x) { return _mm512_cvtepu16_epi32(round_to_bf16(x)); }

// 16 elements (those in `mask`, the rest zero) as bf16 bits in the low halves of 32-bit lanes.
EMBER_TARGET_BF16 inline __m512i load_bf16(const uint16_t* p, __mmask16 mask) {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
}
EMBER_TARGET_BF16 inline __m512i load_bf16(const float* p, __mmask16 mask) {
  return round_bf16(_mm512_maskz_loadu_ps(mask, p));
}

// 16 float32 values from bf16 or float32 storage.
EMBER_TARGET_BF16 inline __m512 load_f32(const uint16_t* p, __mmask16 mask) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(load_bf16(p, mask), 16));
}
EMBER_TARGET_BF16 inline __m512 load_f32(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }

EMBER_TARGET_BF16 inline void store(float* p, __mmask16 mask, __m512 x) { _mm512_mask_storeu_ps(p, mask, x); }
EMBER_TARGET_BF16 inline void store(uint16_t* p, __mmask16 mask, __m512 x) {
  _mm256_mask_storeu_epi16(p, mask, round_to_bf16(x));
}

inline __mmask16 first_lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1);
}

// Pair-interleaved packing. Both write dst[q * dld + i] (32-bit words) for
// pairs q < ceil(kw / 2) and i < ipad (a multiple of 16): the low half is
// element (2q, i), the high half (2q + 1, i); elements past kw or iw are zero.
//
// pack_kmajor: element (p, i) = src[p * ld + i] (two rows of the inner dim
// are interleaved: a row-major B, a transposed A).
template <class T>
EMBER_TARGET_BF16 void pack_kmajor(const T* src, int64_t ld, int64_t kw, int64_t iw, int64_t ipad, uint32_t* dst,
                                   int64_t dld) {
  for (int64_t q = 0; 2 * q < kw; ++q) {
    const T* r0 = src + 2 * q * ld;
    const bool has1 = 2 * q + 1 < kw;
    uint32_t* o = dst + q * dld;
    for (int64_t i = 0; i < ipad; i += 16) {
      const __mmask16 mask = first_lanes(iw - i);
      _mm_prefetch(reinterpret_cast<const char*>(r0 + i + kPrefetchAhead), _MM_HINT_T0);
      if (has1) _mm_prefetch(reinterpret_cast<const char*>(r0 + ld + i + kPrefetchAhead), _MM_HINT_T0);
      const __m512i lo = load_bf16(r0 + i, mask);
      const __m512i hi = has1 ? load_bf16(r0 + ld + i, mask) : _mm512_setzero_si512();
      _mm512_store_si512(o + i, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// 32 elements of a row (pw of them, the rest zero) as 16 words of bf16
// pairs: loaded as they are, or rounded from float32.
EMBER_TARGET_BF16 inline __m512 row_pairs(const uint16_t* s, int64_t pw) {
  const __mmask32 pm = pw >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << pw) - 1);
  return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(pm, s));
}
EMBER_TARGET_BF16 inline __m512 row_pairs(const float* s, int64_t pw) {
  const __m256i lo = round_to_bf16(_mm512_maskz_loadu_ps(first_lanes(pw), s));
  const __m256i hi = round_to_bf16(_mm512_maskz_loadu_ps(first_lanes(pw - 16), s + 16));
  return _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

// pack_kminor: element (p, i) = src[i * ld + p] (the inner dim is contiguous:
// a transposed B, a row-major float32 A). 16 rows i at a time: 32 elements
// along p of each are 16 words (a float32 source rounded first), and a
// 16 x 16 transpose of words gives word column w = pair p0 / 2 + w across
// the 16 rows (transposing the floats instead took two transposes per 32).
template <class T>
EMBER_TARGET_BF16 void pack_kminor(const T* src, int64_t ld, int64_t kw, int64_t iw, int64_t ipad, uint32_t* dst,
                                   int64_t dld) {
  for (int64_t i0 = 0; i0 < ipad; i0 += 16) {
    const int64_t rows = std::min<int64_t>(16, iw - i0);
    for (int64_t p0 = 0; p0 < kw; p0 += 32) {
      const int64_t pw = std::min<int64_t>(32, kw - p0);
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j) {
        if (j >= rows) {
          r[j] = _mm512_setzero_ps();
          continue;
        }
        const T* s = src + (i0 + j) * ld + p0;
        for (size_t b = 0; b < 32 * sizeof(T); b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetchAhead) + b, _MM_HINT_T0);
        r[j] = row_pairs(s, pw);
      }
      transpose16(r);
      for (int64_t w = 0; w < (pw + 1) / 2; ++w)
        _mm512_store_si512(dst + (p0 / 2 + w) * dld + i0, _mm512_castps_si512(r[w]));
    }
  }
}

// Packs op(X)'s inner-dim rows [0, kw) and outer indices [0, iw) (X already
// offset to the block's corner) for the kernel: kmajor when X's inner dim is
// its slow one.
EMBER_TARGET_BF16 inline void pack(const void* x, GemmElem t, bool kmajor, int64_t ld, int64_t kw, int64_t iw,
                                   int64_t ipad, uint32_t* dst, int64_t dld) {
  if (t == GemmElem::kBFloat16) {
    const auto* s = static_cast<const uint16_t*>(x);
    kmajor ? pack_kmajor(s, ld, kw, iw, ipad, dst, dld) : pack_kminor(s, ld, kw, iw, ipad, dst, dld);
  } else {
    const auto* s = static_cast<const float*>(x);
    kmajor ? pack_kmajor(s, ld, kw, iw, ipad, dst, dld) : pack_kminor(s, ld, kw, iw, ipad, dst, dld);
  }
}

// Rows [0, rows) of a row-major float32 A, inner-dim elements [0, kw),
// rounded to bf16 into dst as rows of (kw + 1) / 2 * 2 elements (a lone last
// element's partner zero): the kernel reads a pair of A as one 32-bit word
// anywhere, so a row-major copy needs no transpose.
EMBER_TARGET_BF16 inline void pack_rows(const float* src, int64_t ld, int64_t kw, int64_t rows, uint16_t* dst) {
  const int64_t kp = (kw + 1) / 2 * 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * kp;
    for (int64_t p = 0; p < kp; p += 16) {
      const __mmask16 in = first_lanes(kw - p), out = first_lanes(kp - p);
      _mm256_mask_storeu_epi16(d + p, out, round_to_bf16(_mm512_maskz_loadu_ps(in, s + p)));
    }
  }
}

}  // namespace ember::cpu::bgemm_detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
