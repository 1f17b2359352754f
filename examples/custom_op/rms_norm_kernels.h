// The kernel tables of rms_norm: one table per kernel signature, one slot
// per device type. rms_norm.cpp defines them and registers the CPU kernels;
// rms_norm.cu registers the CUDA kernels into the same tables. The op calls
// `table(device, args...)` and gets the kernel of the input's device, or a
// DeviceError naming the op when that device has none.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace myops {

// x2, y2: (rows, N), contiguous; w: (N); rstd: (rows), 1 / sqrt(mean(x^2) + eps).
extern ember::KernelTable<void(const ember::Tensor& x2, const ember::Tensor& w, double eps, ember::Tensor& y2,
                               ember::Tensor& rstd)>
    rms_norm_kernel;

// g2 (the gradient of y2), x2, dx2: (rows, N), contiguous; w, dw: (N); rstd
// from the forward. dx2 or dw is undefined when that gradient is not wanted.
extern ember::KernelTable<void(const ember::Tensor& g2, const ember::Tensor& x2, const ember::Tensor& w,
                               const ember::Tensor& rstd, ember::Tensor& dx2, ember::Tensor& dw)>
    rms_norm_backward_kernel;

}  // namespace myops
