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
  /// Inside a CUDA graph (core/cuda_graph.h): device memory holding this
  /// step's lr / bias_correction1, sqrt(bias_correction2) and 1 - lr *
  /// weight_decay as float64, written before each replay; the kernel reads
  /// them there instead of the fields above. Null outside a graph.
  const double* device_scalars = nullptr;
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

/// clip_grad_norm_ on the device without reading anything back (so that it
/// can be captured in a CUDA graph, and costs no synchronisation): the
/// float64 sum of squares of every gradient (in a fixed order for given
/// shapes, so deterministic), total = sqrt(sum), coef = max_norm / (total +
/// 1e-6), and every gradient times coef where coef < 1. Returns total as a
/// 0-d float64 tensor on the device. Optional: the CPU computes on the host.
extern KernelTable<Tensor(const std::vector<Tensor>& grads, double max_norm)> clip_grad_norm_kernel;

}  // namespace ember::optim
