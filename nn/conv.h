/// \file
/// torch.nn.Conv2d, and the (height, width) argument type that the 2-D
/// layers take (Conv2d, MaxPool2d, AvgPool2d): one number for both sides, as
/// PyTorch's int-or-tuple arguments (`Conv2d(3, 8, 3)`), or a pair.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <string>

#include <ember/nn/module.h>

namespace ember::nn {

/// A (height, width) pair that one number fills twice, as libtorch's
/// ExpandingArray<2>: `3`, `{3, 5}` or a std::array of any integer type.
struct Size2 : std::array<int64_t, 2> {
  Size2(int64_t both) : std::array<int64_t, 2>{both, both} {}  // NOLINT: implicit by design, as PyTorch's ints
  Size2(int64_t h, int64_t w) : std::array<int64_t, 2>{h, w} {}
  template <std::integral I>
  Size2(const std::array<I, 2>& hw)  // NOLINT: implicit, so std::array{3, 3} still works
      : std::array<int64_t, 2>{static_cast<int64_t>(hw[0]), static_cast<int64_t>(hw[1])} {}
};

/// torch.nn.Conv2d without dilation or groups; PyTorch's default init.
class Conv2d : public Module {
 public:
  /// kernel, stride and padding: one number or (height, width).
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  ///@{
  Tensor weight, bias;  ///< (out, in, kh, kw) and (out); bias undefined without one
  ///@}
  int64_t in_channels, out_channels;  ///< the constructor's arguments
  ///@{
  std::array<int64_t, 2> kernel_size, stride, padding;  ///< (height, width)
  ///@}
};

}  // namespace ember::nn
