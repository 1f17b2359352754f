/// \file
/// A 16 x 16 transpose of 32-bit elements in AVX-512 registers, shared by the
/// GEMM kernels' packing: ops/sgemm_avx512.h (a transposed float32 B) and
/// ops/bgemm_kernel_avx512.cpp (a transposed bf16 B, whose pairs are 32-bit words,
/// and float32 operands rounded to bf16 while packed).
///
/// Compiled for AVX-512 by a function attribute, not by the build's flags:
/// the bf16 kernel is built into every x86-64 build and chosen at run time
/// (CPUID), so its helpers cannot depend on -march. A caller compiled with
/// AVX-512 (-march=native here, or the same attribute) inlines it.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/// The attribute that compiles one function for AVX-512 (F, BW, VL, DQ) whatever the build's -march.
#define EMBER_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace ember::cpu {

// r[i] becomes column i of the 16 x 16 tile whose rows were r[0..15]:
// pairs interleaved, then 4 x 4 blocks within each 128-bit lane, then the
// lanes themselves. (GCC 12's unpack intrinsics pass an "undefined" vector
// as their unused merge source, which -Wmaybe-uninitialized reports, and
// -Wuninitialized at -O1.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
EMBER_TARGET_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace ember::cpu

#endif
