/// \file
/// Normalisation: layer_norm (ops/norm.cpp) and batch_norm (ops/batch_norm.cpp), each with fused forward and
/// backward kernels.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember {

/// Normalises over the trailing dims given by normalized_shape, then applies
/// the optional affine weight and bias (undefined tensors: none), as
/// torch.nn.functional.layer_norm. Saves only per-row mean and rstd.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// torch.nn.functional.batch_norm for x of shape (N, C), (N, C, L) or (N, C, H, W)
/// (statistics per channel over every other dim):
/// training uses the batch statistics (biased variance to normalise) and, when
/// running_mean/running_var are defined, updates them in place with momentum
/// (unbiased variance); eval normalises with the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = true,
                  double momentum = 0.1, double eps = 1e-5);

/// layer_norm's kernels (a backend registers these). x2, y2: [rows, N]
/// contiguous; w, b: [N] or undefined; mean, rstd: [rows], the statistics
/// backward reuses, in the compute dtype (float32 for a 16-bit x, whose
/// w and b then have x's dtype: ops/half_ops.h).
extern KernelTable<void(const Tensor& x2, const Tensor& w, const Tensor& b, double eps, Tensor& y2, Tensor& mean,
                        Tensor& rstd)>
    layer_norm_kernel;
/// g2: y2's gradient. dx2, dw, db: outputs, each undefined when not needed.
extern KernelTable<void(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        Tensor& dx2, Tensor& dw, Tensor& db)>
    layer_norm_backward_kernel;

/// batch_norm's kernels (the CPU's; a backend without them runs batch_norm composed from ops). x3, g3, dx3:
/// (N, C, S) contiguous; mean, var, rstd, w, b, dw, db: [C] of x3's dtype (w, b undefined: none).
/// stats: the batch's mean, biased variance and 1 / sqrt(var + eps) per channel.
extern KernelTable<void(const Tensor& x3, double eps, Tensor& mean, Tensor& var, Tensor& rstd)> batch_norm_stats_kernel;
/// apply: y3 = (x3 - mean) rstd w + b per channel.
extern KernelTable<void(const Tensor& x3, const Tensor& mean, const Tensor& rstd, const Tensor& w, const Tensor& b,
                        Tensor& y3)>
    batch_norm_apply_kernel;
/// backward from g3 (y3's gradient); training: mean and rstd were the batch's (they depend on x3). dx3, dw, db:
/// outputs, each undefined when not needed.
extern KernelTable<void(const Tensor& g3, const Tensor& x3, const Tensor& mean, const Tensor& rstd, const Tensor& w,
                        bool training, Tensor& dx3, Tensor& dw, Tensor& db)>
    batch_norm_backward_kernel;

}  // namespace ember
