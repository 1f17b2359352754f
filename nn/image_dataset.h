/// \file
/// An ImageSet as a Dataset (nn/dataset.h), the way torchvision's datasets
/// carry their transforms: sample i is image i as a float32 (C, H, W) tensor,
/// pixel / 255, augmented and normalised, and its int64 label. It goes
/// through DatasetLoader like any dataset (shuffle, batches, drop_last,
/// workers, collate, the DistributedSampler):
///
/// \code
///   data::ImageDataset train(set, {.normalize = data::channel_stats(set), .augment = {.hflip = true}, .seed = 1});
///   data::DatasetLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 1, .num_workers = 1});
///   for (const data::Example& b : loader.epoch(0)) train_step(b[0], b[1]);
/// \endcode
///
/// The per-image pipeline is uint8 -> [0, 1] -> RandAugment -> random crop /
/// flip -> normalise -> random erasing (torchvision's order: geometric
/// transforms on the [0, 1] image, erasing after Normalize); mixup and cutmix
/// then mix the batch (timm's, with the reversed batch as partner).
///
/// Why get_batch and not get: the images of a batch are written straight
/// into one (B, C, H, W) tensor, with no per-sample tensors and no stack,
/// and every random draw of a batch comes, image after image, from one RNG
/// seeded by batch_seed(seed, key): an augmented batch is a pure function of
/// (seed, epoch, index), whichever worker builds it. A batch that mixes its
/// images (mixup, cutmix) is more than its samples, so mixing belongs to the
/// batch too; it needs the default collation.
///
/// Also here: per-channel statistics in one streaming pass (Welford), for
/// the normalisation.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <ember/nn/data_augment_randaug.h>
#include <ember/nn/data_readers.h>
#include <ember/nn/dataset.h>

namespace ember::nn::data {

/// Welford's streaming mean and variance: for each new x,
///   n += 1;  d = x - mean;  mean += d / n;  m2 += d (x - mean)
/// so m2 = sum (x - mean)^2 without a second pass and without the
/// cancellation of sum x^2 - n mean^2.
class Welford {
 public:
  /// Adds one value.
  void add(double x) {
    ++n_;
    const double d = x - mean_;
    mean_ += d / static_cast<double>(n_);
    m2_ += d * (x - mean_);
  }
  /// Values added so far.
  int64_t count() const { return n_; }
  /// Their mean.
  double mean() const { return mean_; }
  /// Their population variance (divided by n; 0 before any value).
  double variance() const { return n_ > 0 ? m2_ / static_cast<double>(n_) : 0.0; }

 private:
  int64_t n_ = 0;
  double mean_ = 0, m2_ = 0;
};

/// Per-channel mean and (population) standard deviation of pixel / 255 over
/// every image of set, in one pass.
struct ChannelStats {
  ///@{
  std::vector<double> mean, std;  ///< one entry per channel
  ///@}
};
/// The ChannelStats of set.
ChannelStats channel_stats(const ImageSet& set);

/// Which augmentations an image dataset applies (all off by default).
struct AugmentOptions {
  int64_t crop_padding = 0;  ///< > 0: random crop of the image zero-padded by this many pixels
  bool hflip = false;        ///< random horizontal flip, probability 1/2
  double erase_prob = 0;     ///< random erasing probability (after normalisation; fills with 0, the mean)
  double mixup_alpha = 0;    ///< > 0: mixup with lam ~ Beta(alpha, alpha)
  double cutmix_alpha = 0;   ///< > 0: cutmix; with mixup too, each batch picks one of the two
  /// > 0: RandAugment (data_augment_randaug.h) with this many operations per
  /// image, first of all (on the [0, 1] image, as torchvision's before ToTensor).
  int64_t randaugment_ops = 0;
  int64_t randaugment_magnitude = 9;  ///< RandAugment's M, a bin of 31 (torchvision's default bins)
  /// Whether any augmentation is on.
  bool any() const {
    return crop_padding > 0 || hflip || erase_prob > 0 || mixup_alpha > 0 || cutmix_alpha > 0 || randaugment_ops > 0;
  }
  /// Whether batches are mixed (mixup or cutmix).
  bool mixes() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
};

/// How an ImageDataset turns pixels into a sample.
struct ImageDatasetOptions {
  ChannelStats normalize{};  ///< (x - mean) / std per channel; empty: images are pixel / 255
  AugmentOptions augment{};  ///< augmentations (none by default)
  uint64_t seed = 0;         ///< the seed of the augmentations' draws
};

/// An ImageSet as a map-style Dataset of (image, label), normalised and
/// augmented (see the file comment). get_batch(indices, {}, key) is
///  - without mixing: {images (B, C, H, W) float32, labels (B) int64};
///  - with mixup or cutmix on, for a batch of two or more images, also
///    {labels_mix (B) int64, lam (0-dim float64)}: the partners' labels and
///    the weight of the mixture, loss = lam CE(labels) + (1 - lam) CE(labels_mix).
/// With a collate function, the batch's images (drawn the same way) are
/// handed to it as samples {image (C, H, W), label ()}.
class ImageDataset : public Dataset {
 public:
  /// A dataset over set, which must outlive it. Throws ShapeError naming the
  /// set and its sizes when its pixel or label count disagrees with n and
  /// the image size, ValueError for bad sizes, normalisation or
  /// augmentation options.
  explicit ImageDataset(const ImageSet& set, ImageDatasetOptions opts = {});
  /// The number of images.
  int64_t size() const override { return set_.n; }
  /// Image index alone: {image (C, H, W) float32, label () int64}, its draws
  /// those of a batch holding only it, batch `index` of epoch 0 (a pure
  /// function of (seed, index)). Without augmentation, row k of a batch.
  Example get(int64_t index) const override;
  /// The images at indices as one batch (the class comment), every random
  /// draw from an RNG seeded by batch_seed(seed, key). IndexError for an
  /// index out of range; ValueError for a collate function with mixing on.
  Example get_batch(const std::vector<int64_t>& indices, const Collate& collate, const BatchKey& key) const override;
  /// The images.
  const ImageSet& set() const { return set_; }
  /// The options given.
  const ImageDatasetOptions& options() const { return opts_; }

 private:
  void load(int64_t sample, float* img, float* tmp, std::mt19937_64& rng) const;

  const ImageSet& set_;
  ImageDatasetOptions opts_;
  RandAugment randaug_;  ///< from opts_.augment, checked by its constructor
};

}  // namespace ember::nn::data
