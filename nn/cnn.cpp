// Convolutional layers (nn/cnn.h): pooling modules over ops/pool, BatchNorm2d
// over batch_norm, torchvision's BasicBlock and a small ResNet.
#include <ember/nn/cnn.h>

#include <ember/core/autograd.h>
#include <ember/nn/init.h>
#include <ember/ops/activation.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/pool.h>

namespace ember::nn {

BatchNorm2d::BatchNorm2d(int64_t n, double e, double m, bool affine, bool track, TensorOptions opts)
    : BatchNorm1d(n, e, m, affine, track, opts) {}

Tensor BatchNorm2d::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 4, ShapeError, "BatchNorm2d: expected input of shape (N, C, H, W), got ", x.shape().str());
  return BatchNorm1d::forward(x);
}

MaxPool2d::MaxPool2d(Size2 k, Size2 s, Size2 p) : kernel(k), stride(s), padding(p) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel, stride, padding); }

AvgPool2d::AvgPool2d(Size2 k, Size2 s, Size2 p, bool cip) : kernel(k), stride(s), padding(p), count_include_pad(cip) {}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, kernel, stride, padding, count_include_pad); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 o) : output_size(o) {}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

BasicBlock::BasicBlock(int64_t in, int64_t ch, int64_t stride) {
  EMBER_CHECK(in > 0 && ch > 0 && stride > 0, ValueError, "BasicBlock: channels and stride must be positive, got ", in,
              " -> ", ch, " with stride ", stride);
  conv1 = register_module(
      "conv1", std::make_shared<Conv2d>(in, ch, std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{stride, stride},
                                        std::array<int64_t, 2>{1, 1}, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(ch));
  conv2 = register_module("conv2",
                          std::make_shared<Conv2d>(ch, ch, std::array<int64_t, 2>{3, 3}, std::array<int64_t, 2>{1, 1},
                                                   std::array<int64_t, 2>{1, 1}, false));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(ch));
  if (stride != 1 || in != ch)
    downsample = register_module(
        "downsample",
        std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
            std::make_shared<Conv2d>(in, ch, std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{stride, stride},
                                     std::array<int64_t, 2>{0, 0}, false),
            std::make_shared<BatchNorm2d>(ch)}));
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor h = relu(bn1->forward(conv1->forward(x)));
  const Tensor y = bn2->forward(conv2->forward(h));
  return relu(add(y, downsample ? downsample->forward(x) : x));
}

ResNet::ResNet(const ResNetOptions& o) : opts(o) {
  EMBER_CHECK(!o.widths.empty() && o.widths.size() == o.blocks.size(), ValueError,
              "ResNet: widths and blocks must name the same (non-zero) number of stages, got ", o.widths.size(),
              " and ", o.blocks.size());
  EMBER_CHECK(o.in_channels > 0 && o.num_classes > 0, ValueError,
              "ResNet: in_channels and num_classes must be positive, got ", o.in_channels, " and ", o.num_classes);
  for (size_t s = 0; s < o.widths.size(); ++s)
    EMBER_CHECK(o.widths[s] > 0 && o.blocks[s] > 0, ValueError, "ResNet: stage ", s + 1,
                " needs a positive width and block count, got ", o.widths[s], " and ", o.blocks[s]);
  conv1 = register_module("conv1",
                          std::make_shared<Conv2d>(o.in_channels, o.widths[0], std::array<int64_t, 2>{3, 3},
                                                   std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{1, 1}, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(o.widths[0]));
  int64_t in = o.widths[0];
  for (size_t s = 0; s < o.widths.size(); ++s) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < o.blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(std::make_shared<BasicBlock>(in, o.widths[s], stride));
      in = o.widths[s];
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(std::array<int64_t, 2>{1, 1}));
  fc = register_module("fc", std::make_shared<Linear>(in, o.num_classes));
  // torchvision's ResNet init: convs kaiming_normal (fan_out, relu); batch
  // norms start at weight 1, bias 0 (their default).
  for (auto& [name, m] : named_modules())
    if (auto* conv = dynamic_cast<Conv2d*>(m))
      init::kaiming_normal_(conv->weight, 0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
}

Tensor ResNet::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 4 && x.size(1) == opts.in_channels, ShapeError, "ResNet: expected input of shape (N, ",
              opts.in_channels, ", H, W), got ", x.shape().str());
  Tensor h = relu(bn1->forward(conv1->forward(x)));
  for (const auto& stage : layers) h = stage->forward(h);
  h = avgpool->forward(h);
  return fc->forward(h.reshape({h.size(0), h.size(1)}));
}

}  // namespace ember::nn
