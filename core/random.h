/// \file
/// Seeded, reproducible random numbers from a counter-based generator.
///
/// Philox4x32-10 (Salmon et al., 2011; what cuRAND and PyTorch's CUDA kernels
/// use) maps (key = seed, counter) to four random 32-bit words with no state
/// between calls. A Generator only hands out fresh counter ranges, so a kernel
/// can compute element i's random numbers independently on any thread or
/// device: the same seed gives the same values on CPU and CUDA, whatever the
/// thread count.
#pragma once

#include <cstdint>

#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#include <ember/core/hostdevice.h>

namespace ember {

/// Four 32-bit random words: one Philox4x32-10 block.
struct Philox4x32 {
  uint32_t v[4];  ///< the random words

  /// Philox4x32-10 of counter (lo, hi, 0, 0) under key seed.
  EMBER_HD static Philox4x32 generate(uint64_t seed, uint64_t counter) {
    uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
      const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    return Philox4x32{{c0, c1, c2, c3}};
  }
};

/// Philox4x32-10 of counters c0 .. c0+N-1 at once, word w of counter c0+i in
/// out[w][i]: the same values as generate(), laid out so the compiler turns
/// the rounds into vector multiplies (CPU kernels; CUDA runs generate() per
/// thread).
template <int N>
inline void philox_lanes(uint64_t seed, uint64_t c0, uint32_t (&out)[4][N]) {
  uint32_t a[N], b[N], c[N], d[N];
  for (int i = 0; i < N; ++i) {
    const uint64_t ctr = c0 + static_cast<uint64_t>(i);
    a[i] = static_cast<uint32_t>(ctr);
    b[i] = static_cast<uint32_t>(ctr >> 32);
    c[i] = 0;
    d[i] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    // Not unrolled across lanes: the lane loop is the one to vectorise.
#pragma GCC unroll 1
    for (int i = 0; i < N; ++i) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * a[i];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[i];
      const uint32_t na = static_cast<uint32_t>(p1 >> 32) ^ b[i] ^ k0;
      const uint32_t nc = static_cast<uint32_t>(p0 >> 32) ^ d[i] ^ k1;
      b[i] = static_cast<uint32_t>(p1);
      d[i] = static_cast<uint32_t>(p0);
      a[i] = na;
      c[i] = nc;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int i = 0; i < N; ++i) {
    out[0][i] = a[i];
    out[1][i] = b[i];
    out[2][i] = c[i];
    out[3][i] = d[i];
  }
}

/// The 64 words of counters c0 .. c0+15 in element order: word j of counter
/// c0+i at out[4i + j], as rand() assigns them to elements. Kernels that draw
/// one word per element read this block front to back.
template <int N = 16>
inline void philox_block(uint64_t seed, uint64_t c0, uint32_t (&out)[4 * N]) {
  uint32_t r[4][N];
  philox_lanes<N>(seed, c0, r);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = r[j][i];
}

#if defined(__AVX512F__) && !defined(__CUDACC__)
// Sixteen lanes in one AVX-512 register. Each round needs the high and low
// halves of two 32x32 -> 64-bit products per lane: the low half is vpmulld;
// the high half comes from vpmuludq on the even lanes and on the odd lanes
// shifted down, blended back into place. About 3x fewer instructions than
// what the compiler makes of the generic loop (64-bit lanes and shuffles).
// GCC 12's own intrinsics headers trip -Wmaybe-uninitialized (_mm512_undefined
// in the shift and multiply wrappers): a known false positive, silenced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)  // GCC's name; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace detail {
// K chains of sixteen lanes (lane i of chain j: counter c0 + 16 j + i),
// advanced together round by round. One chain's rounds are a serial chain of
// multiplies; interleaving independent chains lets the core overlap their
// latencies.
template <int K>
inline void philox16(uint64_t seed, uint64_t c0, __m512i (&a)[K], __m512i (&b)[K], __m512i (&c)[K], __m512i (&d)[K]) {
  for (int j = 0; j < K; ++j) {
    alignas(64) uint32_t lo[16], hi[16];
    for (int i = 0; i < 16; ++i) {
      const uint64_t ctr = c0 + static_cast<uint64_t>(16 * j + i);
      lo[i] = static_cast<uint32_t>(ctr);
      hi[i] = static_cast<uint32_t>(ctr >> 32);
    }
    a[j] = _mm512_load_si512(lo);
    b[j] = _mm512_load_si512(hi);
    c[j] = _mm512_setzero_si512();
    d[j] = _mm512_setzero_si512();
  }
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  // High 32 bits of x * m per 32-bit lane.
  auto mulhi = [](__m512i x, __m512i m) {
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(x, m), 32);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    return _mm512_mask_blend_epi32(0xAAAA, even, odd);
  };
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0)), key1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int j = 0; j < K; ++j) {
      const __m512i na = _mm512_xor_si512(_mm512_xor_si512(mulhi(c[j], m1), b[j]), key0);
      const __m512i nc = _mm512_xor_si512(_mm512_xor_si512(mulhi(a[j], m0), d[j]), key1);
      b[j] = _mm512_mullo_epi32(c[j], m1);
      d[j] = _mm512_mullo_epi32(a[j], m0);
      a[j] = na;
      c[j] = nc;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// Element order by a 4x16 transpose in registers: interleave words within
// each 128-bit lane (unpack), then move the 128-bit lanes into place.
inline void store_element_order(__m512i a, __m512i b, __m512i c, __m512i d, uint32_t* out) {
  const __m512i t0 = _mm512_unpacklo_epi32(a, b), t1 = _mm512_unpackhi_epi32(a, b);
  const __m512i t2 = _mm512_unpacklo_epi32(c, d), t3 = _mm512_unpackhi_epi32(c, d);
  // u_r, 128-bit lane k: the four words of counter 4k + r.
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
  const __m512i v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  _mm512_storeu_si512(out, _mm512_shuffle_i32x4(v0, v1, 0x88));
  _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(v0, v1, 0xDD));
  _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(v2, v3, 0x88));
  _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(v2, v3, 0xDD));
}
}  // namespace detail

template <>
inline void philox_lanes<16>(uint64_t seed, uint64_t c0, uint32_t (&out)[4][16]) {
  __m512i a[1], b[1], c[1], d[1];
  detail::philox16<1>(seed, c0, a, b, c, d);
  _mm512_storeu_si512(out[0], a[0]);
  _mm512_storeu_si512(out[1], b[0]);
  _mm512_storeu_si512(out[2], c[0]);
  _mm512_storeu_si512(out[3], d[0]);
}

/// Element order by a 4x16 transpose in registers per sixteen counters. 64
/// counters run as four interleaved chains: the rounds' multiply latencies
/// overlap, which makes dropout (one block per 256 elements) several times
/// faster per element, its masks unchanged (docs/PERFORMANCE.md, "Figures
/// behind the code's comments").
///@{
template <>
inline void philox_block<16>(uint64_t seed, uint64_t c0, uint32_t (&out)[64]) {
  __m512i a[1], b[1], c[1], d[1];
  detail::philox16<1>(seed, c0, a, b, c, d);
  detail::store_element_order(a[0], b[0], c[0], d[0], out);
}
template <>
inline void philox_block<64>(uint64_t seed, uint64_t c0, uint32_t (&out)[256]) {
  __m512i a[4], b[4], c[4], d[4];
  detail::philox16<4>(seed, c0, a, b, c, d);
  for (int j = 0; j < 4; ++j) detail::store_element_order(a[j], b[j], c[j], d[j], out + 64 * j);
}
///@}
#pragma GCC diagnostic pop
#endif

/// Uniform float in [0, 1) from 24 random bits; double from 53.
///@{
EMBER_HD inline float uniform_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
EMBER_HD inline double uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}
///@}

/// A Philox random stream: a seed and the next counter, its whole state.
class Generator {
 public:
  /// A stream with this seed, at counter 0.
  explicit Generator(uint64_t seed = 0x5eed5eedULL) : seed_(seed) {}
  /// Restarts the stream with a new seed.
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  /// The seed.
  uint64_t seed() const { return seed_; }
  /// The next counter; used to save and restore the stream (checkpoints).
  ///@{
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  ///@}
  /// Reserves n consecutive counters and returns the first.
  uint64_t reserve(uint64_t n) {
    const uint64_t start = offset_;
    offset_ += n;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The generator factories and dropout use when none is passed.
Generator& default_generator();
/// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace ember
