// What element i of a random tensor is, as a pure function of (seed,
// counter offset, i): shared by the CPU kernel and the CUDA kernel, so both
// produce identical values.
#pragma once

#include <cmath>
#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/dtype.h>
#include <ember/core/hostdevice.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember {

enum class RandomKind : uint8_t { Uniform, Normal, Integer };

struct RandomSpec {
  RandomKind kind;
  uint64_t seed;
  uint64_t offset;  // first Philox counter reserved for this tensor
  double a, b;      // uniform [a, b); normal mean a, std b; integer [a, b)
};

// Counters a tensor of n elements consumes: one per 4 floats for uniform
// float32, one per 2 elements otherwise.
inline uint64_t random_counters(RandomKind kind, DType dt, int64_t n) {
  const uint64_t per = (kind == RandomKind::Uniform && dt == DType::Float32) ? 4 : 2;
  return (static_cast<uint64_t>(n) + per - 1) / per;
}

template <class T>
EMBER_HD inline T random_value(const RandomSpec& s, int64_t i) {
  const uint64_t idx = static_cast<uint64_t>(i);
  if (s.kind == RandomKind::Uniform) {
    if (sizeof(T) == 4) {
      const Philox4x32 r = Philox4x32::generate(s.seed, s.offset + idx / 4);
      const float u = uniform_float(r.v[idx % 4]);
      return static_cast<T>(s.a + (s.b - s.a) * static_cast<double>(u));
    }
    const Philox4x32 r = Philox4x32::generate(s.seed, s.offset + idx / 2);
    const int k = static_cast<int>(idx % 2) * 2;
    return static_cast<T>(s.a + (s.b - s.a) * uniform_double(r.v[k], r.v[k + 1]));
  }
  const Philox4x32 r = Philox4x32::generate(s.seed, s.offset + idx / 2);
  if (s.kind == RandomKind::Normal) {
    // Box-Muller: two uniforms give the pair (z0, z1); element i takes one.
    const double u1 = 1.0 - uniform_double(r.v[0], r.v[1]);  // (0, 1], log is finite
    const double u2 = uniform_double(r.v[2], r.v[3]);
    const double rad = std::sqrt(-2.0 * std::log(u1));
    const double th = 6.283185307179586476925 * u2;
    const double z = (idx % 2 == 0) ? rad * std::cos(th) : rad * std::sin(th);
    return static_cast<T>(s.a + s.b * z);
  }
  const uint64_t bits = (static_cast<uint64_t>(r.v[2 * (idx % 2)]) << 32) | r.v[2 * (idx % 2) + 1];
  const uint64_t range = static_cast<uint64_t>(s.b - s.a);
  return static_cast<T>(static_cast<int64_t>(s.a) + static_cast<int64_t>(bits % range));
}

extern KernelTable<void(Tensor& out, const RandomSpec& spec)> random_kernel;

}  // namespace ember
