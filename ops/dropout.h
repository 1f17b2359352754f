/// \file
/// Dropout: zeroes each element with probability p during training and scales
/// the rest by 1 / (1 - p), so the expected value is unchanged.
#pragma once

#include <cmath>
#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/ops/random_kernels.h>

namespace ember {

/// The mask comes from the counter-based generator (default_generator() when
/// gen is null): reproducible from the seed, the same for any thread count.
/// Not training, or p = 0: x itself.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

/// The integer form of "u >= p" for u = (bits >> 8) / 2^24: an element is kept
/// when (bits >> 8) >= dropout_threshold(p). Every dropout draw (the CPU and
/// CUDA kernels, the fused CPU attention) decides with it, so they agree.
inline uint32_t dropout_threshold(double p) {
  return static_cast<uint32_t>(std::ceil(static_cast<double>(static_cast<float>(p)) * 16777216.0));
}

/// Kernels (a backend registers these). x, out, keep contiguous; keep bool.
/// Element i uses Philox counter spec.offset + i / 4, word i % 4, as float
/// uniform u = (bits >> 8) / 2^24: kept when u >= p.
extern KernelTable<void(const Tensor& x, Tensor& out, Tensor& keep, const RandomSpec& spec, double p)> dropout_kernel;
/// dx = g * keep * scale.
extern KernelTable<void(const Tensor& g, const Tensor& keep, Tensor& dx, double scale)> masked_scale_kernel;

}  // namespace ember
