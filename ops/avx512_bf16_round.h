/// \file
/// float32 -> bfloat16 rounding of 16 lanes, exactly as core/half.h rounds
/// (PyTorch's round to nearest even), on AVX512_BF16's vcvtneps2bf16. Shared
/// by the bulk conversion (ops/convert.cpp) and the bf16 GEMM's packing and
/// stores (ops/bgemm_kernel_avx512.cpp).
///
/// vcvtneps2bf16 is one instruction where the integer formula takes seven,
/// but it differs from PyTorch on two kinds of input: it treats float32
/// subnormals as zero (PyTorch rounds them into bfloat16's subnormals) and
/// keeps a NaN's sign and payload (PyTorch gives 0x7FC0). Those lanes are
/// patched from the integer formula; on ordinary data the patch costs one
/// mask test per 16 elements.
///
/// Compiled by a function attribute (as ops/avx512_transpose.h): callers run
/// it only where CPUID reports AVX512_BF16.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/// The attributes that compile one function for AVX-512 (F, BW, VL), and
/// with the bf16 instructions, whatever -march. (A function inlines only
/// into callers whose targets include its own.)
#define EMBER_TARGET_AVX512_ROUND __attribute__((target("avx512f,avx512bw,avx512vl")))
#define EMBER_TARGET_AVX512_BF16_ROUND __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace ember::cpu {

/// Lanes of u (float32 bits) that are NaN.
EMBER_TARGET_AVX512_ROUND inline __mmask16 nan_lanes(__m512i u) {
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  return _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000));
}

/// core/half.h's bf16_bits_from_float on 16 lanes: add 0x7FFF plus the kept
/// part's lowest bit, keep the high half; NaN -> 0x7FC0.
EMBER_TARGET_AVX512_ROUND inline __m256i bf16_integer_rounding(__m512i u, __mmask16 nan) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

/// 16 floats -> their bfloat16 bits, rounded as core/half.h rounds.
EMBER_TARGET_AVX512_BF16_ROUND inline __m256i round_to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  __m256i r = (__m256i)_mm512_cvtneps_pbh(x);
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = nan_lanes(u);
  const __mmask16 subnormal = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x00800000)) & _mm512_test_epi32_mask(a, a);
  if (nan | subnormal) r = _mm256_mask_blend_epi16(nan | subnormal, r, bf16_integer_rounding(u, nan));
  return r;
}

}  // namespace ember::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif
