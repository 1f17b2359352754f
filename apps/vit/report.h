// The ViT demo's pictures: learning curves, the confusion matrix, and the
// attention rollout of the [CLS] token over the patches, overlaid on test
// images.
//
// Attention rollout (Abnar & Zuidema, 2020): with A_l the head-averaged
// attention of layer l (tokens x tokens), the residual connection is
// accounted for as A'_l = (A_l + I) / 2 (rows renormalised), and the flow of
// information from the input tokens to the output is the product
// R = A'_L ... A'_1. Row 0 of R (the [CLS] token) over columns 1.. (the
// patches) says which patches the classification drew on.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/nn/data_readers.h>

#include "plot.h"
#include "vit_run_config.h"  // EpochRecord

namespace vit {

using namespace ember;

inline void plot_curves(const std::vector<EpochRecord>& h, const std::string& dir, const std::string& title) {
  std::vector<double> ep, tr, te, acc;
  for (size_t i = 0; i < h.size(); ++i) {
    ep.push_back(static_cast<double>(i + 1));
    tr.push_back(h[i].train_loss);
    te.push_back(h[i].test_loss);
    acc.push_back(100.0 * h[i].test_accuracy);
  }
  plot::LineChart loss;
  loss.title = title + ": loss";
  loss.xlabel = "epoch";
  loss.ylabel = "cross-entropy";
  loss.series = {{.x = ep,
                  .y = tr,
                  .label = "train (with label smoothing / mixing)",
                  .color = 0,
                  .line = true,
                  .marker_radius = 4},
                 {.x = ep, .y = te, .label = "test", .color = 1, .line = true, .marker_radius = 4}};
  plot::render(loss).save_png(dir + "/loss.png");
  plot::LineChart a;
  a.title = title + ": test accuracy";
  a.xlabel = "epoch";
  a.ylabel = "accuracy (%)";
  a.series = {{.x = ep, .y = acc, .label = "", .color = 2, .line = true, .marker_radius = 4}};  // one series: no legend
                                                                                                // over the curve
  plot::render(a).save_png(dir + "/accuracy.png");
}

// counts[true * C + predicted]
inline void plot_confusion(const std::vector<int64_t>& counts, const std::vector<std::string>& names,
                           const std::string& path, const std::string& title) {
  plot::Heatmap hm;
  hm.title = title;
  hm.xlabel = "predicted";
  hm.ylabel = "true";
  hm.rows = hm.cols = static_cast<int>(names.size());
  for (int64_t c : counts) hm.values.push_back(static_cast<double>(c));
  // Short names, so that ten labels fit along the axes.
  for (const std::string& n : names)
    hm.row_labels.push_back(n == "T-shirt/top"  ? "top"
                            : n == "ankle boot" ? "boot"
                            : n == "automobile" ? "car"
                            : n == "airplane"   ? "plane"
                                                : n);
  hm.col_labels = hm.row_labels;
  hm.annotate = true;
  plot::render(hm, 1100, 860).save_png(path);
}

// Rollout for image n of a batch from the layers' kept weights (each (N, T, T)):
// the [CLS] row over the patches, as gh x gw values scaled to [0, 1] (min to max).
// prefix: the tokens before the patches ([CLS], and DeiT's distillation token).
inline std::vector<double> rollout(const std::vector<Tensor>& layer_weights, int64_t n, int64_t gh, int64_t gw,
                                   int64_t prefix = 1) {
  const int64_t T = gh * gw + prefix;
  std::vector<double> R(static_cast<size_t>(T * T), 0.0), A(R.size()), tmp(R.size());
  for (int64_t i = 0; i < T; ++i) R[static_cast<size_t>(i * T + i)] = 1.0;
  for (const Tensor& w : layer_weights) {
    const std::vector<float> a = w.select(0, n).contiguous().to_vector<float>();
    for (int64_t i = 0; i < T; ++i) {
      double row = 0;
      for (int64_t j = 0; j < T; ++j) {
        A[static_cast<size_t>(i * T + j)] = 0.5 * a[static_cast<size_t>(i * T + j)] + (i == j ? 0.5 : 0.0);
        row += A[static_cast<size_t>(i * T + j)];
      }
      for (int64_t j = 0; j < T; ++j) A[static_cast<size_t>(i * T + j)] /= row;
    }
    for (int64_t i = 0; i < T; ++i)  // tmp = A R
      for (int64_t j = 0; j < T; ++j) {
        double s = 0;
        for (int64_t k = 0; k < T; ++k) s += A[static_cast<size_t>(i * T + k)] * R[static_cast<size_t>(k * T + j)];
        tmp[static_cast<size_t>(i * T + j)] = s;
      }
    R.swap(tmp);
  }
  std::vector<double> cls(R.begin() + prefix, R.begin() + T);
  const auto [lo, hi] = std::minmax_element(cls.begin(), cls.end());
  const double a = *lo, range = *hi - *lo;
  for (double& v : cls) v = range > 0 ? (v - a) / range : 0;
  return cls;
}

// Tiles for one image: the image, then the image (dimmed, greyscale) under
// the rollout in a red-yellow heat colour.
inline void rollout_tiles(const nn::data::ImageSet& set, int64_t index, const std::vector<double>& cls, int64_t gh,
                          int64_t gw, const std::string& caption, plot::Color color,
                          std::vector<plot::ImageTile>& tiles) {
  const int64_t C = set.channels, H = set.height, W = set.width;
  plot::ImageTile img;
  img.channels = static_cast<int>(C);
  img.height = static_cast<int>(H);
  img.width = static_cast<int>(W);
  const uint8_t* px = set.pixels.data() + index * set.image_size();
  for (int64_t k = 0; k < C * H * W; ++k) img.pixels.push_back(px[k] / 255.0f);
  img.caption = caption;
  img.caption_color = color;
  plot::ImageTile over = img;
  over.channels = 3;
  over.pixels.assign(static_cast<size_t>(3 * H * W), 0.0f);
  over.caption = "attention rollout";
  over.caption_color = {60, 60, 60};
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      // Greyscale of the image, and the patch's rollout value (nearest).
      float grey = 0;
      for (int64_t c = 0; c < C; ++c)
        grey += img.pixels[static_cast<size_t>((c * H + y) * W + x)] / static_cast<float>(C);
      const auto t = static_cast<float>(cls[static_cast<size_t>((y * gh / H) * gw + x * gw / W)]);
      const float heat[3] = {std::min(1.0f, 2 * t), std::max(0.0f, 2 * t - 1), 0.0f};  // black-red-yellow
      for (int c = 0; c < 3; ++c)
        over.pixels[static_cast<size_t>((c * H + y) * W + x)] = 0.45f * grey + 0.55f * heat[c];
    }
  tiles.push_back(std::move(img));
  tiles.push_back(std::move(over));
}

}  // namespace vit
