/// \file
/// The 16-bit floating-point element types: ember::bfloat16 (1 sign, 8
/// exponent, 7 mantissa bits: float32's range, 3 significant decimal digits)
/// and ember::float16 (IEEE binary16: 5 exponent, 10 mantissa bits, largest
/// finite 65504). Each is a struct over its raw bits, usable in host and
/// device code (EMBER_HD), converting to float32 exactly and from float32
/// with round-to-nearest-even, as PyTorch's c10::BFloat16 and c10::Half:
///
/// - bfloat16 from a NaN is 0x7FC0 (PyTorch's quiet NaN, sign dropped);
///   float16 from a NaN is sign | 0x7E00 (the FP16 library's, which c10 uses).
/// - Values past the largest finite one round to +-Inf (float16: |x| >= 65520).
/// - Subnormals are kept both ways (no flush to zero): float32 subnormals
///   round into bfloat16's subnormals, float16's subnormals (down to 2^-24)
///   are produced and read exactly.
///
/// The conversions are integer bit arithmetic only, so they give the same
/// bits whatever the floating-point environment (FTZ/DAZ) and on every
/// compiler; ops/convert.h has the vectorised bulk forms, which must (and
/// are tested to) give these bits.
///
/// Arithmetic is deliberately absent: kernels load a 16-bit element as
/// float (implicit conversion), compute in float32 and store the rounded
/// result (explicit construction), so no formula ever silently runs in
/// 16-bit precision.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <ember/core/hostdevice.h>

namespace ember {

namespace half_detail {
EMBER_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
EMBER_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// float32 -> bfloat16 bits: round to nearest even on the low 16 bits
/// (adding 0x7FFF plus the kept lsb carries exactly when the dropped half is
/// above 0x8000, or equal to it with an odd kept lsb); NaN -> 0x7FC0.
/// A carry out of the mantissa bumps the exponent, which is also how the
/// largest finite values round up to Inf.
EMBER_HD inline uint16_t bf16_bits_from_float(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
/// bfloat16 bits -> float32: the upper half of the float32 (exact).
EMBER_HD inline float float_from_bf16_bits(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

/// float32 -> float16 bits, round to nearest even.
EMBER_HD inline uint16_t f16_bits_from_float(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (ax >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (halfway past 65504, odd lsb): Inf
  if (ax >= 0x38800000u) {                       // >= 2^-14: a normal float16
    // Round at bit 13, then rebias the exponent from 127 to 15 (112 << 23);
    // a mantissa carry moves into the exponent, as it should.
    const uint32_t r = ax + 0xFFFu + ((ax >> 13) & 1u);
    return sign | static_cast<uint16_t>((r - 0x38000000u) >> 13);
  }
  if (ax <= 0x33000000u) return sign;  // <= 2^-25: half the smallest subnormal or less: ties to 0
  // Subnormal float16: value / 2^-24 = mant * 2^(e - 150 + 24), i.e. the
  // 24-bit significand shifted right by 126 - e (14..24), rounded to even.
  const uint32_t e = ax >> 23;
  const uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t s = 126u - e;
  uint32_t r = mant >> s;
  const uint32_t rem = mant & ((1u << s) - 1u);
  const uint32_t halfway = 1u << (s - 1u);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;  // r may reach 0x400: the smallest normal, correctly
  return sign | static_cast<uint16_t>(r);
}
/// float16 bits -> float32 (exact; a signalling NaN comes back quiet, as
/// the hardware conversions and c10 give).
EMBER_HD inline float float_from_f16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return f32_from_bits(sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) {
    if (m == 0) return f32_from_bits(sign);
    // Subnormal m * 2^-24: normalise so the leading 1 sits at bit 10.
    uint32_t ex = 113;  // exponent 2^-14's bias-127 field (-14 + 127), lowered per shift
    while (!(m & 0x400u)) {
      m <<= 1;
      --ex;
    }
    return f32_from_bits(sign | (ex << 23) | ((m & 0x3FFu) << 13));
  }
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}
}  // namespace half_detail

/// Constructs from raw bits: bfloat16::from_bits(0x3F80) == 1.
struct FromBits {};

/// Brain floating point: the upper 16 bits of a float32.
struct bfloat16 {
  uint16_t x = 0;  ///< the raw bits
  bfloat16() = default;
  EMBER_HD constexpr bfloat16(uint16_t bits, FromBits) : x(bits) {}
  /// Rounds v (through float32, as c10) to nearest even.
  template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  EMBER_HD explicit bfloat16(U v) : x(half_detail::bf16_bits_from_float(static_cast<float>(v))) {}
  EMBER_HD static constexpr bfloat16 from_bits(uint16_t b) { return bfloat16(b, FromBits{}); }
  /// Exact.
  EMBER_HD operator float() const { return half_detail::float_from_bf16_bits(x); }
};

/// IEEE binary16.
struct float16 {
  uint16_t x = 0;  ///< the raw bits
  float16() = default;
  EMBER_HD constexpr float16(uint16_t bits, FromBits) : x(bits) {}
  /// Rounds v (through float32, as c10) to nearest even.
  template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  EMBER_HD explicit float16(U v) : x(half_detail::f16_bits_from_float(static_cast<float>(v))) {}
  EMBER_HD static constexpr float16 from_bits(uint16_t b) { return float16(b, FromBits{}); }
  /// Exact.
  EMBER_HD operator float() const { return half_detail::float_from_f16_bits(x); }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2, "16-bit element types must be 2 bytes");
static_assert(std::is_trivially_copyable_v<bfloat16> && std::is_trivially_copyable_v<float16>);

/// True for bfloat16 and float16: element types that load as float32 and
/// store rounded.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

/// The type a kernel computes T in: float for the 16-bit types, T otherwise
/// (PyTorch's opmath_type).
template <class T>
using opmath_t = std::conditional_t<is_half_v<T>, float, T>;

}  // namespace ember
