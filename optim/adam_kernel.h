/// \file
/// The fused Adam/AdamW step's kernel table, shared by the CPU kernel
/// (optim/optimizer.cpp) and the CUDA one (cuda/optimizer.cu).
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

}  // namespace ember::optim
