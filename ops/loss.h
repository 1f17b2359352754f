/// \file
/// Loss functions with PyTorch's semantics, names and defaults: mse_loss,
/// cross_entropy, nll_loss and binary_cross_entropy_with_logits.
///
/// cross_entropy is one fused kernel each way: the forward computes, per row,
/// the max, the logsumexp, the target logit and the sum of the logits in one
/// sweep of the row (never materialising log_softmax) and keeps only the
/// per-row logsumexp for backward; the backward writes
/// dlogits = (softmax - smoothed one-hot) * g / count in one pass.
///
/// Where Ember is stricter than PyTorch: mse_loss requires target to have the
/// input's shape (PyTorch broadcasts with a warning that the result is likely
/// wrong; Ember has no warnings, so it throws instead).
#pragma once

#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/hostdevice.h>
#include <ember/core/tensor.h>
#include <ember/ops/functors.h>

namespace ember {

/// How per-element losses are combined: kept (None), averaged (Mean) or
/// summed (Sum), as PyTorch's reduction='none' | 'mean' | 'sum'.
enum class Reduction { None, Mean, Sum };

/// (input - target)^2, reduced. target must have input's shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

/// Softmax cross-entropy from unnormalised logits (N, C) or (N, C, d1, ...)
/// (or (C) with a 0-dim target) and int64 class targets (N) / (N, d1, ...).
/// With label smoothing eps the target distribution is (1 - eps) one-hot +
/// eps / C uniform, so each loss is
///   (1 - eps) * -log p[target] + eps * mean_c(-log p[c]).
/// Targets equal to ignore_index contribute 0 and are left out of the mean's
/// denominator; a mean over no remaining targets is NaN (as in PyTorch).
/// Differentiable in logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);

/// Negative log-likelihood from log-probabilities (same shapes as
/// cross_entropy): -log_probs[n, target[n], ...], ignore_index as there.
/// Differentiable in log_probs.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);

/// Binary cross-entropy of sigmoid(input) against target (same shape, values
/// in [0, 1]), computed from the logits in the stable form
///   max(x, 0) - x t + log(1 + exp(-|x|)),
/// finite for any |x|. pos_weight (optional, broadcast to input's shape, e.g.
/// one per class along the last dim) weights the positive term:
/// \code
///   (1 - t) x + (1 + (pos_weight - 1) t) * log(1 + exp(-x)).
/// \endcode
/// Differentiable in input, target and pos_weight.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = Tensor());

// ---- kernel tables (backends register here) ---------------------------------
// logits3 / log_probs3 are contiguous [N, C, L]; target is contiguous int64
// [N * L]; loss, lse are contiguous [N * L] of the logits' dtype (float32 for
// 16-bit logits, which only cross_entropy's kernels may take: ops/half_ops.h);
// grad is contiguous, of the loss's dtype, with 1 element (the same for every
// row) or N * L. Targets are
// already checked to be in [0, C) or ignore_index.

/// loss[r] = lse[r] - (1 - eps) x[r, t] - eps / C * sum_c x[r, c]; 0 for ignored rows. When reduced (0-d,
/// of the loss's dtype) is defined, also reduced = sum_r loss[r] / count in the same launch (count as for
/// the backward: an int64 0-d tensor on the logits' device, or undefined for 1): the op asks for it where
/// the count stays on the device (CUDA), so a reduced loss costs no launches of its own.
extern KernelTable<void(const Tensor& logits3, const Tensor& target, const Tensor& count, Tensor& loss, Tensor& lse,
                        Tensor& reduced, int64_t ignore_index, double label_smoothing)>
    cross_entropy_kernel;
/// dlogits3[r, c] = (exp(x[r, c] - lse[r]) - (1 - eps) [c == t] - eps / C) * (grad[r] / count) * scale; 0
/// for ignored rows. count: the mean's count of rows that take part, an int64 0-d tensor on the logits'
/// device (so the division needs no launch of its own, and no host read), or undefined for 1.
extern KernelTable<void(const Tensor& logits3, const Tensor& target, const Tensor& lse, const Tensor& grad,
                        const Tensor& count, Tensor& dlogits3, int64_t ignore_index, double label_smoothing,
                        double scale)>
    cross_entropy_backward_kernel;
/// loss[r] = -log_probs3[r, t]; 0 for ignored rows.
extern KernelTable<void(const Tensor& log_probs3, const Tensor& target, Tensor& loss, int64_t ignore_index)>
    nll_loss_kernel;
/// dlog_probs3 = -grad[r] * scale at [r, t], 0 elsewhere.
extern KernelTable<void(const Tensor& target, const Tensor& grad, Tensor& dlog_probs3, int64_t ignore_index,
                        double scale)>
    nll_loss_backward_kernel;
/// Elementwise over out's shape; x, t, pos_weight and grad are views of it
/// (pos_weight may be a stride-0 broadcast, or undefined for none).
extern KernelTable<void(const Tensor& x, const Tensor& t, const Tensor& pos_weight, Tensor& out)>
    bce_with_logits_kernel;
/// out = grad * d loss / d (x if wrt == 0, t if wrt == 1, pos_weight if wrt == 2).
extern KernelTable<void(const Tensor& x, const Tensor& t, const Tensor& pos_weight, const Tensor& grad, Tensor& out,
                        int wrt)>
    bce_with_logits_backward_kernel;

// Scalar formulas of binary_cross_entropy_with_logits, shared by backends.
namespace fn {
/// softplus(-x) = log(1 + exp(-x)) = max(-x, 0) + log(1 + exp(-|x|)): exp only
/// of a non-positive number, so it never overflows.
///@{
template <class T>
EMBER_HD inline T softplus_neg(T x) {
  return (x < T(0) ? -x : T(0)) + hd::log1p(hd::exp(-hd::abs(x)));
}
template <class T>
EMBER_HD inline T bce_with_logits(T x, T t) {
  return (x > T(0) ? x : T(0)) - x * t + hd::log1p(hd::exp(-hd::abs(x)));
}
template <class T>
EMBER_HD inline T bce_with_logits(T x, T t, T pw) {
  return (T(1) - t) * x + (T(1) + (pw - T(1)) * t) * softplus_neg(x);
}
///@}
/// d/dx: (1 - t) - (1 + (pw - 1) t) sigmoid(-x); with pw = 1 this is sigmoid(x) - t.
template <class T>
EMBER_HD inline T bce_with_logits_dx(T x, T t, T pw) {
  const T lw = T(1) + (pw - T(1)) * t;
  return (T(1) - t) - lw * (T(1) - Sigmoid{}(x));
}
/// d/dt: -x + (pw - 1) softplus(-x).
template <class T>
EMBER_HD inline T bce_with_logits_dt(T x, T pw) {
  return -x + (pw - T(1)) * softplus_neg(x);
}
/// d/dpw: t softplus(-x).
template <class T>
EMBER_HD inline T bce_with_logits_dpw(T x, T t) {
  return t * softplus_neg(x);
}
}  // namespace fn

}  // namespace ember
