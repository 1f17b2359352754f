/// \file
/// The emulated <cuda_fp16.h> and <cuda_bf16.h>: CUDA's `__half` and
/// `__nv_bfloat16` with the conversions and arithmetic kernels use, for
/// kernels compiled against the SIMT emulator (cuda/emu/simt.h). Under nvcc
/// cuda/common.h includes the real headers instead; the names, layouts (one
/// 16-bit word) and results are CUDA's:
///
///  - float -> 16-bit (`__float2half`, `__float2bfloat16`, their `_rn` forms
///    and the converting constructors) rounds to nearest even, keeps
///    subnormals and gives +-Inf past the largest finite value: the bits of
///    Ember's own conversions (core/half.h), which are tested against
///    PyTorch on every pattern. A NaN becomes the canonical 0x7FFF, as CUDA's
///    conversions give (Ember's ember::bfloat16 / float16 give PyTorch's
///    0x7FC0 / sign|0x7E00 instead; both are NaN).
///  - 16-bit -> float is exact.
///  - + - * / on two 16-bit values compute in float32 and round once, which
///    is the correctly rounded 16-bit result (float32 holds more than twice
///    the significand bits plus two, so the double rounding is innocuous),
///    as the hardware's instructions give.
///
/// There is no other arithmetic (no fma, no math functions, no half2):
/// Ember's kernels load a 16-bit value as float, compute in float32 and
/// store once (opmath_t in core/half.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include <ember/core/half.h>

namespace ember::emu::half_detail {
inline unsigned short canonical(float f, uint16_t (*round)(float)) {
  const uint32_t u = ::ember::half_detail::f32_bits(f);
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FFF : round(f);
}
}  // namespace ember::emu::half_detail

/// \cond cuda_api
// CUDA's own names and semantics (the file comment above).
struct __half_raw {
  unsigned short x;
};
struct __nv_bfloat16_raw {
  unsigned short x;
};

struct __half {
  unsigned short __x;
  __half() = default;
  __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(::ember::emu::half_detail::canonical(f, ::ember::half_detail::f16_bits_from_float)) {}
  template <class U, std::enable_if_t<std::is_arithmetic_v<U> && !std::is_same_v<U, float>, int> = 0>
  __half(U v) : __half(static_cast<float>(v)) {}
  operator __half_raw() const { return {__x}; }
  operator float() const { return ::ember::half_detail::float_from_f16_bits(__x); }
};

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(::ember::emu::half_detail::canonical(f, ::ember::half_detail::bf16_bits_from_float)) {}
  template <class U, std::enable_if_t<std::is_arithmetic_v<U> && !std::is_same_v<U, float>, int> = 0>
  __nv_bfloat16(U v) : __nv_bfloat16(static_cast<float>(v)) {}
  operator __nv_bfloat16_raw() const { return {__x}; }
  operator float() const { return ::ember::half_detail::float_from_bf16_bits(__x); }
};

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half_raw{u}; }

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16_raw{u}; }

#define EMBER_EMU_HALF_OPS(H, RAW)                                                            \
  inline H __hadd(H a, H b) { return H(static_cast<float>(a) + static_cast<float>(b)); }      \
  inline H __hsub(H a, H b) { return H(static_cast<float>(a) - static_cast<float>(b)); }      \
  inline H __hmul(H a, H b) { return H(static_cast<float>(a) * static_cast<float>(b)); }      \
  inline H __hdiv(H a, H b) { return H(static_cast<float>(a) / static_cast<float>(b)); }      \
  inline H operator+(H a, H b) { return __hadd(a, b); }                                       \
  inline H operator-(H a, H b) { return __hsub(a, b); }                                       \
  inline H operator*(H a, H b) { return __hmul(a, b); }                                       \
  inline H operator/(H a, H b) { return __hdiv(a, b); }                                       \
  inline H operator-(H a) { return H(RAW{static_cast<unsigned short>(a.__x ^ 0x8000u)}); }    \
  inline bool operator==(H a, H b) { return static_cast<float>(a) == static_cast<float>(b); } \
  inline bool operator!=(H a, H b) { return static_cast<float>(a) != static_cast<float>(b); } \
  inline bool operator<(H a, H b) { return static_cast<float>(a) < static_cast<float>(b); }   \
  inline bool operator>(H a, H b) { return static_cast<float>(a) > static_cast<float>(b); }   \
  inline bool operator<=(H a, H b) { return static_cast<float>(a) <= static_cast<float>(b); } \
  inline bool operator>=(H a, H b) { return static_cast<float>(a) >= static_cast<float>(b); }
EMBER_EMU_HALF_OPS(__half, __half_raw)
EMBER_EMU_HALF_OPS(__nv_bfloat16, __nv_bfloat16_raw)
#undef EMBER_EMU_HALF_OPS
/// \endcond
