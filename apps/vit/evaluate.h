// The ViT demo's evaluation: loss, accuracy and confusion matrix over the
// test set (split between the ranks of a distributed run and summed), and
// the attention rollout picture of the first test images.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "plot.h"
#include "report.h"
#include "vit_run_config.h"

namespace vit {

using namespace ember;
namespace data = ember::nn::data;

struct Evaluation {
  double loss = 0, accuracy = 0;
  std::vector<int64_t> confusion;  // true * C + predicted
};

// A batch from the loader (built on the CPU by its thread) moved to dev.
inline data::Batch& to_device(data::Batch& b, Device dev) {
  b.images = b.images.to(dev);
  b.labels = b.labels.to(dev);
  if (b.labels_mix.defined()) b.labels_mix = b.labels_mix.to(dev);
  return b;
}

// Rank r of N evaluates batches r, r + N, ...; the sums are then added up
// across the ranks.
inline Evaluation evaluate(nn::VisionTransformer& model, const data::DataLoader& loader, int64_t num_classes,
                           Device dev) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation ev;
  ev.confusion.assign(static_cast<size_t>(num_classes * num_classes), 0);
  int64_t n = 0, correct = 0;
  for (int64_t i = distributed::rank(); i < loader.num_batches(); i += distributed::world_size()) {
    data::Batch b = loader.batch(0, i);
    to_device(b, dev);
    const Tensor logits = model(b.images);
    ev.loss += cross_entropy(logits, b.labels, Reduction::Sum).item();
    const std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>(), y = b.labels.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) {
      correct += pred[i] == y[i];
      ++ev.confusion[static_cast<size_t>(y[i] * num_classes + pred[i])];
    }
    n += static_cast<int64_t>(y.size());
  }
  if (distributed::world_size() > 1) {
    Tensor sums = tensor({ev.loss, static_cast<double>(correct), static_cast<double>(n)}, kFloat64);
    Tensor confusion = from_vector(ev.confusion);
    distributed::all_reduce(sums);
    distributed::all_reduce(confusion);
    const std::vector<double> v = sums.to_vector<double>();
    ev.loss = v[0], correct = std::llround(v[1]), n = std::llround(v[2]);
    ev.confusion = confusion.to_vector<int64_t>();
  }
  model.train();
  ev.loss /= static_cast<double>(n);
  ev.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return ev;
}

// The attention rollout of the first 8 test images.
inline void write_attention(nn::VisionTransformer& model, const data::ImageSet& test, const data::ChannelStats& norm,
                            const Config& c, const std::string& path, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  const data::LoaderOptions lo{.batch_size = std::min<int64_t>(8, test.n),
                               .shuffle = false,
                               .augment = {},
                               .normalize = norm,
                               .background = false};
  data::Batch b = data::DataLoader(test, lo).batch(0, 0);
  to_device(b, dev);
  for (size_t i = 0; i < model.blocks->size(); ++i)
    model.blocks->at<nn::TransformerEncoderLayer>(i).keep_attention_weights = true;
  const std::vector<int64_t> pred = argmax(model(b.images), 1).to_vector<int64_t>();
  std::vector<Tensor> weights;
  for (size_t i = 0; i < model.blocks->size(); ++i) {
    auto& layer = model.blocks->at<nn::TransformerEncoderLayer>(i);
    weights.push_back(layer.attention_weights);
    layer.keep_attention_weights = false;
    layer.attention_weights = Tensor();
  }
  const int64_t gh = test.height / c.patch, gw = test.width / c.patch;
  std::vector<plot::ImageTile> tiles;
  for (int64_t i = 0; i < b.images.size(0); ++i) {
    const int64_t y = test.labels[static_cast<size_t>(i)], p = pred[static_cast<size_t>(i)];
    const std::string caption =
        p == y ? test.class_names[static_cast<size_t>(p)]
               : test.class_names[static_cast<size_t>(p)] + " (" + test.class_names[static_cast<size_t>(y)] + ")";
    rollout_tiles(test, i, rollout(weights, i, gh, gw, model.prefix_tokens()), gh, gw, caption,
                  p == y ? plot::Color{0, 130, 0} : plot::Color{200, 0, 0}, tiles);
  }
  plot::render_grid(tiles, 4, 5, c.data + ": [CLS] attention rollout").save_png(path);
  model.train();
}

}  // namespace vit
