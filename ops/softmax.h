/// \file
/// Softmax family: softmax and log_softmax over any dim, and masked softmax
/// for attention (valid lengths, boolean masks, causal masks). Each is one
/// fused pass per row forward and one backward, rows in parallel.
#pragma once

#include <ember/core/dispatch.h>
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

/// Kernels (a backend registers these), also used by ops that run a softmax
/// inside a fused op of their own (ops/attention.h). x3, y3: [A, R, B]
/// contiguous, softmax over R; mask3: bool of the same shape (true = masked
/// out; a fully masked row gives zeros) or undefined. log: log_softmax.
extern KernelTable<void(const Tensor& x3, const Tensor& mask3, Tensor& y3, bool log)> softmax_kernel;
/// y3 the forward's output, g3 its gradient, dx3 the input's gradient; all
/// [A, R, B] contiguous.
extern KernelTable<void(const Tensor& y3, const Tensor& g3, Tensor& dx3, bool log)> softmax_backward_kernel;

}  // namespace ember
