// Bulk float32 <-> bfloat16 / float16 conversion (ops/convert.h).
//
// The vector bodies are compiled with target attributes, so they exist
// whatever -march the library is built with, and run only when CPUID says
// the instructions are there; the scalar loops of core/half.h are the
// fallback and the reference.
//
// Where the instructions round differently from PyTorch, the differing lanes
// are patched from the integer formula of core/half.h (rare lanes, so the
// patch costs a mask test per 16 elements on ordinary data):
// - vcvtneps2bf16: ops/avx512_bf16_round.h says how;
// - vcvtps2ph keeps a NaN's payload (PyTorch, through the FP16 library,
//   gives sign | 0x7E00).
#include <ember/ops/convert.h>

#include <ember/core/parallel.h>
#include <ember/core/tensor.h>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start vectors from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined here (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)  // GCC's name; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <ember/ops/avx512_bf16_round.h>  // round_to_bf16, nan_lanes, the target attributes
#define EMBER_CONVERT_X86 1
#endif

namespace ember::cpu {

ConvertPaths convert_paths() {
#if EMBER_CONVERT_X86
  static const ConvertPaths p = [] {
    const bool avx512 =
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return ConvertPaths{avx512 && __builtin_cpu_supports("avx512bf16"), avx512};
  }();
  return p;
#else
  return ConvertPaths{false, false};
#endif
}

namespace {

#if EMBER_CONVERT_X86

EMBER_TARGET_AVX512_BF16_ROUND void float_to_bf16_avx512(const float* src, bfloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r = round_to_bf16(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), r);
  }
  for (; i < n; ++i) dst[i] = bfloat16(src[i]);
}

EMBER_TARGET_AVX512_ROUND void float_to_f16_avx512(const float* src, float16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    const __m512i u = _mm512_castps_si512(x);
    __m256i r = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = nan_lanes(u);
    if (nan) {
      // sign | 0x7E00
      const __m256i sign = _mm512_cvtepi32_epi16(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)));
      r = _mm256_mask_blend_epi16(nan, r, _mm256_or_si256(sign, _mm256_set1_epi16(0x7E00)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), r);
  }
  for (; i < n; ++i) dst[i] = float16(src[i]);
}

EMBER_TARGET_AVX512_ROUND void bf16_to_float_avx512(const bfloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

EMBER_TARGET_AVX512_ROUND void f16_to_float_avx512(const float16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
#endif

}  // namespace

void float_to_bf16(const float* src, bfloat16* dst, int64_t n, bool use_vector) {
#if EMBER_CONVERT_X86
  if (use_vector && convert_paths().avx512_bf16) return float_to_bf16_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16(src[i]);
}

void float_to_f16(const float* src, float16* dst, int64_t n, bool use_vector) {
#if EMBER_CONVERT_X86
  if (use_vector && convert_paths().avx512_f16) return float_to_f16_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float16(src[i]);
}

void bf16_to_float(const bfloat16* src, float* dst, int64_t n, bool use_vector) {
#if EMBER_CONVERT_X86
  if (use_vector && convert_paths().avx512_f16) return bf16_to_float_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void f16_to_float(const float16* src, float* dst, int64_t n, bool use_vector) {
#if EMBER_CONVERT_X86
  if (use_vector && convert_paths().avx512_f16) return f16_to_float_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

bool copy_convert_contiguous(const Tensor& src, Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous() || src.shape() != dst.shape()) return false;
  const DType s = src.dtype(), d = dst.dtype();
  const bool to_half = s == DType::Float32 && is_half(d), from_half = is_half(s) && d == DType::Float32;
  if (!to_half && !from_half) return false;
  const void* sp = src.data_ptr();
  void* dp = dst.data_ptr();
  // 16384 elements: a few microseconds of work per chunk.
  parallel_for(0, dst.numel(), 16384, [&](int64_t lo, int64_t hi) {
    const int64_t n = hi - lo;
    if (d == DType::BFloat16)
      float_to_bf16(static_cast<const float*>(sp) + lo, static_cast<bfloat16*>(dp) + lo, n);
    else if (d == DType::Float16)
      float_to_f16(static_cast<const float*>(sp) + lo, static_cast<float16*>(dp) + lo, n);
    else if (s == DType::BFloat16)
      bf16_to_float(static_cast<const bfloat16*>(sp) + lo, static_cast<float*>(dp) + lo, n);
    else
      f16_to_float(static_cast<const float16*>(sp) + lo, static_cast<float*>(dp) + lo, n);
  });
  return true;
}

}  // namespace ember::cpu
