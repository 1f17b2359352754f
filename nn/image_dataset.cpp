// Channel statistics and the image dataset (see image_dataset.h). A batch is
// built by plain loops into tensors it allocates (the CPU allocator is
// thread-safe); no op runs, so a loader's worker building it does not
// compete with the thread pool's kernels.
#include <ember/nn/image_dataset.h>

#include <algorithm>
#include <cmath>

#include <ember/core/error.h>
#include <ember/nn/data_augment.h>
#include <ember/nn/data_augment_randaug.h>

namespace ember::nn::data {

ChannelStats channel_stats(const ImageSet& set) {
  std::vector<Welford> w(static_cast<size_t>(set.channels));
  const int64_t plane = set.height * set.width;
  for (int64_t i = 0; i < set.n; ++i)
    for (int64_t c = 0; c < set.channels; ++c) {
      const uint8_t* p = set.pixels.data() + (i * set.channels + c) * plane;
      Welford& acc = w[static_cast<size_t>(c)];
      for (int64_t k = 0; k < plane; ++k) acc.add(p[k] / 255.0);
    }
  ChannelStats s;
  for (const Welford& acc : w) {
    s.mean.push_back(acc.mean());
    s.std.push_back(std::sqrt(acc.variance()));
  }
  return s;
}

ImageDataset::ImageDataset(const ImageSet& set, ImageDatasetOptions opts)
    : set_(set),
      opts_(std::move(opts)),
      // Checks N and M first (ValueError naming them).
      randaug_(opts_.augment.randaugment_ops, opts_.augment.randaugment_magnitude) {
  // Batches read pixels and labels by these sizes: a set that disagrees with
  // them is refused here, before any batch reads out of bounds.
  EMBER_CHECK(set.n >= 0 && set.channels > 0 && set.height > 0 && set.width > 0, ValueError,
              "ImageDataset: image set '", set.name, "' has ", set.n, " images of ", set.channels, " x ", set.height,
              " x ", set.width);
  EMBER_CHECK(static_cast<int64_t>(set.pixels.size()) == set.n * set.image_size(), ShapeError,
              "ImageDataset: image set '", set.name, "' holds ", set.pixels.size(), " pixels, but ", set.n,
              " images of ", set.channels, " x ", set.height, " x ", set.width, " need ", set.n * set.image_size());
  EMBER_CHECK(static_cast<int64_t>(set.labels.size()) == set.n, ShapeError, "ImageDataset: image set '", set.name,
              "' holds ", set.labels.size(), " labels for ", set.n, " images");
  const ChannelStats& norm = opts_.normalize;
  EMBER_CHECK(norm.mean.empty() ||
                  (static_cast<int64_t>(norm.mean.size()) == set.channels && norm.std.size() == norm.mean.size()),
              ValueError, "ImageDataset: image set '", set.name, "': normalisation for ", norm.mean.size(),
              " channels (", norm.std.size(), " stds), images have ", set.channels);
  for (double s : norm.std)
    EMBER_CHECK(s > 0, ValueError, "ImageDataset: image set '", set.name, "': a channel's std is ", s);
  const AugmentOptions& a = opts_.augment;
  EMBER_CHECK(a.crop_padding >= 0 && a.crop_padding < std::min(set.height, set.width) && a.erase_prob >= 0 &&
                  a.erase_prob <= 1 && a.mixup_alpha >= 0 && a.cutmix_alpha >= 0,
              ValueError, "ImageDataset: image set '", set.name, "': bad augmentation options (crop padding ",
              a.crop_padding, " for ", set.height, " x ", set.width, " images, erase probability ", a.erase_prob,
              ", mixup alpha ", a.mixup_alpha, ", cutmix alpha ", a.cutmix_alpha, ")");
}

void ImageDataset::load(int64_t sample, float* img, float* tmp, std::mt19937_64& rng) const {
  const int64_t C = set_.channels, H = set_.height, W = set_.width, size = C * H * W, plane = H * W;
  const AugmentOptions& aug = opts_.augment;
  // Distributions carry no state between calls (libstdc++'s uniform ones),
  // so the draws are the rng's alone, image after image.
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const uint8_t* px = set_.pixels.data() + sample * size;
  for (int64_t k = 0; k < size; ++k) img[k] = static_cast<float>(px[k] / 255.0);
  if (aug.randaugment_ops > 0) randaug_(img, C, H, W, rng);
  // Geometric transforms before normalisation: padding is black, as in
  // torchvision's RandomCrop on a [0, 1] tensor.
  if (aug.crop_padding > 0) {
    std::uniform_int_distribution<int64_t> off(0, 2 * aug.crop_padding);
    const int64_t top = off(rng), left = off(rng);
    crop_with_padding(img, tmp, C, H, W, aug.crop_padding, top, left);
    std::copy(tmp, tmp + size, img);
  }
  if (aug.hflip && u01(rng) < 0.5) hflip(img, C, H, W);
  if (!opts_.normalize.mean.empty())
    for (int64_t c = 0; c < C; ++c) {
      const auto m = static_cast<float>(opts_.normalize.mean[static_cast<size_t>(c)]);
      const auto r = static_cast<float>(1.0 / opts_.normalize.std[static_cast<size_t>(c)]);
      for (float* p = img + c * plane; p < img + (c + 1) * plane; ++p) *p = (*p - m) * r;
    }
  if (aug.erase_prob > 0 && u01(rng) < aug.erase_prob) {
    const Box e = sample_erase_box(rng, H, W);
    erase(img, C, H, W, e.top, e.left, e.h, e.w, 0.0f);
  }
}

Example ImageDataset::get(int64_t index) const {
  const Example b = get_batch({index}, {}, BatchKey{.epoch = 0, .index = index, .stream = index});
  return {b[0].select(0, 0), b[1].select(0, 0)};
}

Example ImageDataset::get_batch(const std::vector<int64_t>& indices, const Collate& collate,
                                const BatchKey& key) const {
  const AugmentOptions& aug = opts_.augment;
  EMBER_CHECK(!collate || !aug.mixes(), ValueError, "ImageDataset: image set '", set_.name,
              "': mixup and cutmix mix whole batches, so they need the default collation, not a collate function");
  for (int64_t s : indices)
    EMBER_CHECK(s >= 0 && s < set_.n, IndexError, "ImageDataset: index ", s, " out of range for image set '", set_.name,
                "' of ", set_.n, " images");
  const auto B = static_cast<int64_t>(indices.size());
  const int64_t C = set_.channels, H = set_.height, W = set_.width, size = C * H * W;
  std::mt19937_64 rng(batch_seed(opts_.seed, key));
  std::uniform_real_distribution<double> u01(0.0, 1.0);

  Tensor images = empty({B, C, H, W});
  Tensor labels = empty({B}, TensorOptions(DType::Int64));
  float* x = images.data<float>();
  int64_t* y = labels.data<int64_t>();
  std::vector<float> tmp(static_cast<size_t>(size));
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = indices[static_cast<size_t>(i)];
    y[i] = set_.labels[static_cast<size_t>(s)];
    load(s, x + i * size, tmp.data(), rng);
  }
  if (collate) {
    std::vector<Example> samples;
    samples.reserve(indices.size());
    for (int64_t i = 0; i < B; ++i) samples.push_back({images.select(0, i), labels.select(0, i)});
    return collate(samples);
  }
  // Batch-level mixing; with both enabled each batch picks one (timm's switch).
  const bool use_mixup = aug.mixup_alpha > 0, use_cutmix = aug.cutmix_alpha > 0;
  if (!(use_mixup || use_cutmix) || B < 2) return {images, labels};
  const bool cut = use_cutmix && (!use_mixup || u01(rng) < 0.5);
  double lam = sample_beta(rng, cut ? aug.cutmix_alpha : aug.mixup_alpha);
  if (cut) {
    const Box box = sample_cutmix_box(rng, H, W, lam);
    cutmix(x, B, C, H, W, box);
    lam = 1.0 - static_cast<double>(box.h * box.w) / static_cast<double>(H * W);  // the area actually kept
  } else {
    mixup(x, B, size, lam);
  }
  Tensor labels_mix = empty({B}, TensorOptions(DType::Int64));
  int64_t* ym = labels_mix.data<int64_t>();
  for (int64_t i = 0; i < B; ++i) ym[i] = y[B - 1 - i];
  Tensor weight = empty({}, TensorOptions(DType::Float64));
  weight.data<double>()[0] = lam;
  return {images, labels, labels_mix, weight};
}

}  // namespace ember::nn::data
