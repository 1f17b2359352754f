/// \file
/// Softmax family: softmax and log_softmax over any dim, and masked softmax
/// for attention (valid lengths, boolean masks, causal masks). Each is one
/// fused pass per row forward and one backward, rows in parallel.
#pragma once

#include <ember/core/tensor.h>

namespace ember {

/// exp(x) / sum(exp(x)) along dim, with the max subtracted first (stable).
Tensor softmax(const Tensor& x, int64_t dim);
/// x - logsumexp(x) along dim.
Tensor log_softmax(const Tensor& x, int64_t dim);

/// Softmax over the last dim that gives masked positions exactly 0 weight.
/// `mask` is either
///  - int64 valid lengths: shape (B,) for x of shape (B, ..., K), one length
///    per batch entry, or x's shape without its last dim, one length per row
///    (the d2l masked_softmax); key positions k >= length are masked; or
///  - bool, broadcastable to x, true where a position is masked OUT (the
///    convention of masked_fill).
/// A row with every position masked gets all-zero weights (PyTorch's SDPA
/// would give NaN; d2l's -1e6 fill would give uniform weights).
Tensor masked_softmax(const Tensor& x, const Tensor& mask);
/// The causal mask for q queries and k keys: true (masked) where key j > query i.
Tensor causal_mask(int64_t q, int64_t k, Device device = kCPU);

}  // namespace ember
