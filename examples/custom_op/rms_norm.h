// RMSNorm (Zhang & Sennrich, 2019), an op Ember does not have, added from
// outside the library the way Ember's own ops are made (docs/CUSTOM_OPS.md
// walks through it): a forward and a backward (rms_norm.cpp), a CPU kernel
// (rms_norm.cpp) and a CUDA kernel (rms_norm.cu), found through kernel
// tables (rms_norm_kernels.h) by the device of the input.
//
// Over the last dim of x, with a learned gain w:
//   y = x / sqrt(mean(x^2) + eps) * w
// (LayerNorm without the mean subtraction and the bias, as in LLaMA and T5).
#pragma once

#include <cstdint>

#include <ember/core/tensor.h>
#include <ember/nn/module.h>

namespace myops {

// x: (..., N), float32 or float64, on any device with a kernel; weight: (N),
// same dtype and device. Differentiable in x and weight.
ember::Tensor rms_norm(const ember::Tensor& x, const ember::Tensor& weight, double eps = 1e-6);

// The layer, as torch.nn.RMSNorm(n, eps) with elementwise_affine: a
// parameter "weight" of n ones.
class RMSNorm : public ember::nn::Module {
 public:
  explicit RMSNorm(int64_t n, double eps = 1e-6, ember::TensorOptions opts = {});
  ember::Tensor forward(const ember::Tensor& x) override;

  ember::Tensor weight;
  double eps;
};

}  // namespace myops
