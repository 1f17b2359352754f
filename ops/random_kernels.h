/// \file
/// What element i of a random tensor is, as a pure function of (seed,
/// counter offset, i): shared by the CPU kernel and the CUDA kernel, so both
/// produce identical values.
#pragma once

#include <cmath>
#include <cstdint>

#include <ember/core/cuda_graph.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype.h>
#include <ember/core/hostdevice.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember {

/// The distributions a random kernel draws from.
enum class RandomKind : uint8_t { Uniform, Normal, Integer };

/// One random fill: the distribution, its parameters, and the Philox (seed, first counter).
struct RandomSpec {
  RandomKind kind;  ///< which distribution
  uint64_t seed;    ///< the generator's seed
  uint64_t offset;  ///< first Philox counter reserved for this tensor
  ///@{
  double a, b;  ///< uniform [a, b); normal mean a, std b; integer [a, b)
  ///@}
  /// Inside a CUDA graph (core/cuda_graph.h): device memory holding this
  /// replay's [seed, first counter]; the stream is then (device_base[0],
  /// device_base[1] + offset). Null outside a graph.
  const uint64_t* device_base = nullptr;
};

/// spec's Philox seed and first counter, resolved where the kernel runs.
///@{
EMBER_HD inline uint64_t philox_seed(const RandomSpec& s) { return s.device_base ? s.device_base[0] : s.seed; }
EMBER_HD inline uint64_t philox_offset(const RandomSpec& s) {
  return s.device_base ? s.device_base[1] + s.offset : s.offset;
}
///@}

/// A RandomSpec of n counters of g for work on device: g's next counters, or
/// inside a CUDA graph capture counters relative to device words that each
/// replay fills from g (reserve_counters_in_capture), so that every replay
/// draws new numbers and advances g as the eager step would.
inline RandomSpec reserve_random(RandomKind kind, Generator& g, uint64_t n, Device device, double a, double b) {
  if (is_capturing(device)) {
    const CapturedCounters c = reserve_counters_in_capture(device, g, n);
    return RandomSpec{kind, g.seed(), c.offset, a, b, c.words};
  }
  return RandomSpec{kind, g.seed(), g.reserve(n), a, b};
}

/// Counters a tensor of n elements consumes: one per 4 floats for uniform
/// float32, one per 2 elements otherwise.
inline uint64_t random_counters(RandomKind kind, DType dt, int64_t n) {
  const uint64_t per = (kind == RandomKind::Uniform && dt == DType::Float32) ? 4 : 2;
  return (static_cast<uint64_t>(n) + per - 1) / per;
}

/// The elements Philox counter spec.offset + c produces: out[0..k) for elements
/// k*c .. k*c+k-1, k = 4 for float32 uniform, else 2; returns k. One Philox
/// call per counter, not per element; a CUDA kernel runs one thread per
/// counter. Normal uses Box-Muller on the pair (z0 = r cos th, z1 = r sin th).
template <class T>
EMBER_HD inline int random_values(const RandomSpec& s, uint64_t c, T* out) {
  const Philox4x32 r = Philox4x32::generate(philox_seed(s), philox_offset(s) + c);
  if (s.kind == RandomKind::Uniform) {
    if (sizeof(T) == 4) {
      for (int j = 0; j < 4; ++j)
        out[j] = static_cast<T>(s.a + (s.b - s.a) * static_cast<double>(uniform_float(r.v[j])));
      return 4;
    }
    for (int j = 0; j < 2; ++j) out[j] = static_cast<T>(s.a + (s.b - s.a) * uniform_double(r.v[2 * j], r.v[2 * j + 1]));
    return 2;
  }
  if (s.kind == RandomKind::Normal) {
    const double u1 = 1.0 - uniform_double(r.v[0], r.v[1]);
    const double u2 = uniform_double(r.v[2], r.v[3]);
    const double rad = std::sqrt(-2.0 * std::log(u1));
    const double th = 6.283185307179586476925 * u2;
    out[0] = static_cast<T>(s.a + s.b * rad * std::cos(th));
    out[1] = static_cast<T>(s.a + s.b * rad * std::sin(th));
    return 2;
  }
  const uint64_t range = static_cast<uint64_t>(s.b - s.a);
  for (int j = 0; j < 2; ++j) {
    const uint64_t bits = (static_cast<uint64_t>(r.v[2 * j]) << 32) | r.v[2 * j + 1];
    out[j] = static_cast<T>(static_cast<int64_t>(s.a) + static_cast<int64_t>(bits % range));
  }
  return 2;
}

/// Fills out (contiguous) with spec's values: element i is a pure function of (seed, offset, i), the
/// same on every device.
extern KernelTable<void(Tensor& out, const RandomSpec& spec)> random_kernel;

}  // namespace ember
