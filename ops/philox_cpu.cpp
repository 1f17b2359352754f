// Philox blocks for the CPU kernels (ops/philox_cpu.h): sixteen counters per
// AVX-512 register, compiled by a function attribute whatever the build's
// -march and chosen once by CPUID; the portable loop of core/random.h
// elsewhere. Both give the words of Philox4x32::generate.
#include <ember/ops/philox_cpu.h>

#include <ember/core/random.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EMBER_PHILOX_AVX512 1
#define EMBER_TARGET_PHILOX __attribute__((target("avx512f")))
#endif

namespace ember::cpu {
namespace {

#ifdef EMBER_PHILOX_AVX512
// Each round needs the high and low halves of two 32x32 -> 64-bit products
// per lane: the low half is vpmulld; the high half comes from vpmuludq on the
// even lanes and on the odd lanes shifted down, blended back into place.
// About 3x fewer instructions than what the compiler makes of the generic
// loop (64-bit lanes and shuffles). GCC 12's own intrinsics headers trip
// -Wmaybe-uninitialized (_mm512_undefined in the shift and multiply
// wrappers): a known false positive, silenced here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)  // GCC's name; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// High 32 bits of x * m per 32-bit lane. A function, not a lambda: a lambda
// does not inherit its enclosing function's target attribute.
EMBER_TARGET_PHILOX inline __m512i mulhi(__m512i x, __m512i m) {
  const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(x, m), 32);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
  return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}

// K chains of sixteen lanes (lane i of chain j: counter c0 + 16 j + i),
// advanced together round by round. One chain's rounds are a serial chain of
// multiplies; interleaving independent chains lets the core overlap their
// latencies.
template <int K>
EMBER_TARGET_PHILOX inline void philox16(uint64_t seed, uint64_t c0, __m512i (&a)[K], __m512i (&b)[K], __m512i (&c)[K],
                                         __m512i (&d)[K]) {
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
EMBER_TARGET_PHILOX inline void store_element_order(__m512i a, __m512i b, __m512i c, __m512i d, uint32_t* out) {
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

EMBER_TARGET_PHILOX void block16_avx512(uint64_t seed, uint64_t c0, uint32_t* out) {
  __m512i a[1], b[1], c[1], d[1];
  philox16<1>(seed, c0, a, b, c, d);
  store_element_order(a[0], b[0], c[0], d[0], out);
}

// 64 counters as four interleaved chains: the rounds' multiply latencies
// overlap, which makes dropout (one block per 256 elements) several times
// faster per element, its masks unchanged (docs/PERFORMANCE.md, "Figures
// behind the code's comments").
EMBER_TARGET_PHILOX void block64_avx512(uint64_t seed, uint64_t c0, uint32_t* out) {
  __m512i a[4], b[4], c[4], d[4];
  philox16<4>(seed, c0, a, b, c, d);
  for (int j = 0; j < 4; ++j) store_element_order(a[j], b[j], c[j], d[j], out + 64 * j);
}
#pragma GCC diagnostic pop

// Asked once: __builtin_cpu_supports also checks that the OS saves the
// AVX-512 registers.
bool have_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return yes;
}
#endif

}  // namespace

void philox_block16(uint64_t seed, uint64_t c0, uint32_t (&out)[64]) {
#ifdef EMBER_PHILOX_AVX512
  if (have_avx512()) return block16_avx512(seed, c0, out);
#endif
  philox_block<16>(seed, c0, out);
}

void philox_block64(uint64_t seed, uint64_t c0, uint32_t (&out)[256]) {
#ifdef EMBER_PHILOX_AVX512
  if (have_avx512()) return block64_avx512(seed, c0, out);
#endif
  philox_block<64>(seed, c0, out);
}

}  // namespace ember::cpu
