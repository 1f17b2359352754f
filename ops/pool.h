/// \file
/// 2-d pooling on NCHW images, as torch.nn.functional: max_pool2d (argmax
/// indices saved for backward), avg_pool2d and adaptive_avg_pool2d.
#pragma once

#include <array>

#include <ember/core/tensor.h>

namespace ember {

/// torch.nn.functional.max_pool2d (no dilation, floor mode): x (N, C, H, W);
/// stride defaults to the kernel (pass {0, 0}); padding at most half the kernel.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0});

/// max_pool2d that also returns the indices (int64, flat h W + w in each
/// plane), as return_indices=True.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> kernel,
                                                  std::array<int64_t, 2> stride = {0, 0},
                                                  std::array<int64_t, 2> padding = {0, 0});

/// torch.nn.functional.avg_pool2d (floor mode): stride defaults to the kernel
/// ({0, 0}); count_include_pad (PyTorch's default true) divides by the padded
/// window's size.
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true);

/// torch.nn.functional.adaptive_avg_pool2d: output (N, C, oh, ow), output row
/// o averaging input rows [floor(o H / oh), ceil((o + 1) H / oh)).
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);

}  // namespace ember
