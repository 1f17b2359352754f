/// \file
/// Convolutional layers with PyTorch's names, for a CNN teacher: BatchNorm2d,
/// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, torchvision's BasicBlock and a
/// small ResNet for 28x28 images (Conv2d itself is in nn/conv.h).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include <ember/nn/conv.h>
#include <ember/nn/layers.h>
#include <ember/nn/transformer.h>

namespace ember::nn {

/// torch.nn.BatchNorm2d over (N, C, H, W): statistics per channel over N, H
/// and W; the parameters, buffers (running_mean, running_var,
/// num_batches_tracked), momentum and eps of BatchNorm1d, which it shares.
class BatchNorm2d : public BatchNorm1d {
 public:
  /// num_features channels; momentum weights the new batch in the running statistics.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
};

/// max_pool2d as a layer; stride {0, 0} means the kernel (PyTorch's default).
class MaxPool2d : public Module {
 public:
  /// kernel, stride and padding as (height, width).
  explicit MaxPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  ///@{
  std::array<int64_t, 2> kernel, stride, padding;  ///< (height, width)
  ///@}
};

/// avg_pool2d as a layer; count_include_pad as PyTorch's default (true).
class AvgPool2d : public Module {
 public:
  /// kernel, stride and padding as (height, width).
  explicit AvgPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  ///@{
  std::array<int64_t, 2> kernel, stride, padding;  ///< (height, width)
  ///@}
  bool count_include_pad;  ///< divide by the padded window's size
};

/// adaptive_avg_pool2d as a layer.
class AdaptiveAvgPool2d : public Module {
 public:
  /// The output's (height, width).
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  std::array<int64_t, 2> output_size;  ///< (height, width)
};

/// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut),
/// 3x3 convs without bias; the shortcut is x, or downsample = Sequential(1x1
/// conv with the stride, BatchNorm2d) when the stride or the width changes.
class BasicBlock : public Module {
 public:
  /// in_channels -> channels, the first conv (and the shortcut) with stride.
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BasicBlock"; }
  ///@{
  std::shared_ptr<Conv2d> conv1, conv2;    ///< the two 3x3 convs
  std::shared_ptr<BatchNorm2d> bn1, bn2;   ///< their batch norms
  std::shared_ptr<Sequential> downsample;  ///< null when the shortcut is x
  ///@}
};

/// A small ResNet's sizes; the defaults are a Fashion-MNIST teacher
/// (1 -> 32 -> 64 -> 128 channels on 28x28, 14x14, 7x7).
struct ResNetOptions {
  int64_t in_channels = 1;                   ///< image channels
  int64_t num_classes = 10;                  ///< outputs of fc
  std::vector<int64_t> widths{32, 64, 128};  ///< channels of each stage (layer1, layer2, ...)
  std::vector<int64_t> blocks{1, 1, 1};      ///< BasicBlocks per stage; stages after the first halve H and W
};

/// A ResNet for small images with torchvision's names: conv1 (3x3, stride 1,
/// no max pool: 28x28 images are small already), bn1, relu, layer1..layerK
/// (Sequentials of BasicBlocks), avgpool (AdaptiveAvgPool2d 1x1), fc.
/// (N, in_channels, H, W) -> (N, num_classes) logits.
class ResNet : public Module {
 public:
  explicit ResNet(const ResNetOptions& opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ResNet"; }
  ///@{
  std::shared_ptr<Conv2d> conv1;                    ///< the stem
  std::shared_ptr<BatchNorm2d> bn1;                 ///< the stem's batch norm
  std::vector<std::shared_ptr<Sequential>> layers;  ///< layer1, layer2, ...
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;       ///< global average pool
  std::shared_ptr<Linear> fc;                       ///< the classifier
  ///@}
  ResNetOptions opts;  ///< the sizes it was built with
};

}  // namespace ember::nn
