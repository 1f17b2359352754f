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
/// one word per element read this block front to back. Ember's CPU kernels
/// call cpu::philox_block16/64 (ops/philox_cpu.h) instead: the same words, by
/// AVX-512 where the CPU has it. This header is the same whatever -march a
/// program is compiled with (no code here depends on the target's ISA).
template <int N = 16>
inline void philox_block(uint64_t seed, uint64_t c0, uint32_t (&out)[4 * N]) {
  uint32_t r[4][N];
  philox_lanes<N>(seed, c0, r);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = r[j][i];
}

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
