/// \file
/// The kernel tables of the optimizers' updates: the fused Adam/AdamW step
/// and the gradient norm's sum of squares. The CPU kernels are in
/// ops/optimizer_kernels.cpp, the CUDA ones in cuda/optimizer.cu; they live
/// in the ops layer, below optim/, so that the CUDA backend (which sits on
/// ops alone) can register them. optim/optimizer.cpp calls them.
///
/// Adam, step t, gradient g (PyTorch 1.13, amsgrad off):
/// \code
///   Adam:  g += wd * p                 AdamW: p *= 1 - lr * wd
///   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
///   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
/// \endcode
#pragma once

#include <vector>

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember::optim {

/// One step's hyperparameters; bias_correction1/2 are 1 - b1^t and 1 - b2^t.
struct AdamStep {
  ///@{
  double lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;  ///< as in the formulas above
  ///@}
  bool decoupled;  ///< AdamW's weight decay (true) or Adam's L2 (false)
};

/// p, g, m, v: contiguous, one dtype and device, same numel.
extern KernelTable<void(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s)> adam_kernel;

/// The same step for many parameters at once (one launch for a whole group on
/// a GPU, instead of one per parameter). Every entry as above; all entries of
/// one device and dtype. Optional: a backend without it gets adam_kernel per
/// parameter (the CPU, where a launch costs nothing).
struct AdamParam {
  ///@{
  Tensor p, g, m, v;  ///< parameter, gradient, first and second moments
  ///@}
};
/// The multi-parameter kernel (see AdamParam).
extern KernelTable<void(std::vector<AdamParam>& params, const AdamStep& s)> adam_multi_kernel;

/// Sum of squares of a contiguous floating tensor, accumulated in float64:
/// the gradient norm of clip_grad_norm_ in one read of each gradient, with
/// no temporaries.
extern KernelTable<double(const Tensor& x)> sum_squares_kernel;

}  // namespace ember::optim
