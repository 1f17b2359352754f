// Dropout: zeroes each element with probability p during training and scales
// the rest by 1 / (1 - p), so the expected value is unchanged.
#pragma once

#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember {

// The mask comes from the counter-based generator (default_generator() when
// gen is null): reproducible from the seed, the same for any thread count.
// Not training, or p = 0: x itself.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace ember
