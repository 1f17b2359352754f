/// \file
/// Bulk float32 <-> bfloat16 / float16 conversion on the CPU, vectorised
/// where CPUID allows (AVX512_BF16's vcvtneps2bf16, F16C/AVX-512's
/// vcvtps2ph/vcvtph2ps) and scalar (core/half.h) elsewhere. Every path gives
/// the bits of the scalar conversions of core/half.h, which are PyTorch's
/// (tests/test_half.cpp checks all 65,536 patterns through each path).
#pragma once

#include <cstdint>

#include <ember/core/half.h>

namespace ember {
class Tensor;
}

namespace ember::cpu {

/// Which vector paths this CPU runs (CPUID, once).
struct ConvertPaths {
  bool avx512_bf16;  ///< float32 -> bfloat16 by vcvtneps2bf16
  bool avx512_f16;   ///< float32 <-> float16 by the 512-bit vcvtps2ph / vcvtph2ps (AVX512F)
};
ConvertPaths convert_paths();

/// dst[i] = round(src[i]) for i < n (vectorised when the CPU allows; use_vector
/// false forces the scalar loop, for tests).
///@{
void float_to_bf16(const float* src, bfloat16* dst, int64_t n, bool use_vector = true);
void float_to_f16(const float* src, float16* dst, int64_t n, bool use_vector = true);
///@}
/// dst[i] = src[i] exactly.
///@{
void bf16_to_float(const bfloat16* src, float* dst, int64_t n, bool use_vector = true);
void f16_to_float(const float16* src, float* dst, int64_t n, bool use_vector = true);
///@}

/// dst = src for contiguous tensors of one shape when one is float32 and the
/// other bfloat16 or float16, through the vector conversions over the thread
/// pool. Returns false (doing nothing) for any other pair.
bool copy_convert_contiguous(const Tensor& src, Tensor& dst);

}  // namespace ember::cpu
