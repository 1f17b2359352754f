/// \file
/// Sliding-window ops on NCHW images: unfold (im2col) and conv2d, enough for
/// a ViT patch embedding (a conv with stride = kernel) and small conv stems.
#pragma once

#include <array>

#include <ember/core/tensor.h>

namespace ember {

/// torch.nn.functional.unfold: x (N, C, H, W) -> (N, C*kh*kw, L), L the
/// number of window positions; rows ordered (c, i, j) as in PyTorch.
Tensor unfold(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {1, 1},
              std::array<int64_t, 2> padding = {0, 0});

/// torch.nn.functional.conv2d (no dilation, no groups): x (N, C, H, W),
/// weight (O, C, kh, kw), bias (O) or undefined; computed as one GEMM over
/// the unfolded input.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0});

}  // namespace ember
