// The ViT demo's --export-onnx (apps/common/onnx_export.h): the
// VisionTransformer as an ONNX graph from images to logits, traced and
// checked on the first test images, normalised with the training set's
// statistics as every batch the model saw.
#pragma once

#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>

#include "onnx_export.h"
#include "vit_run_config.h"

namespace vit {

inline void export_onnx(const ember::app::OnnxExportFlags& flags, const Config& c, ember::nn::VisionTransformer& model,
                        const ember::nn::data::DataLoader& test_loader, const ember::nn::data::ChannelStats& norm,
                        ember::Device dev) {
  using ember::Tensor;
  if (!flags.enabled()) return;
  if (test_loader.num_batches() == 0)
    throw ember::app::UsageError("--export-onnx needs a test image to trace the model on");
  const Tensor images = test_loader.batch(0, 0).images.to(dev);
  // With a distillation token, forward() is the mean of the two heads (DeiT's inference output).
  const std::string what = "Ember's Vision Transformer (apps/vit) trained on " + c.data +
                           (c.distill != "none" ? "; logits are the mean of its [CLS] and distillation heads" : "");
  ember::app::export_onnx(
      "vit", model, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model(in[0])}; },
      ember::app::image_classifier_graph(images, what, norm.mean, norm.std), flags);
}

}  // namespace vit
