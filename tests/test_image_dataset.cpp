// The image pipeline as a Dataset (nn/image_dataset.h): through
// DatasetLoader it gives exactly the batches of the image pipeline's own
// recipe (written out below as the reference: one RNG per batch, seeded by
// (seed, epoch, batch stream), drawn image after image, then the batch's
// mixing), with and without augmentation, sharded, on worker threads or not;
// DataLoader is that loader; a collate function sees the same images; sizes
// that disagree throw, naming the set.
#include <algorithm>
#include <random>

#include <ember/nn/data_augment.h>

#include "test_util.h"

using namespace ember;
using namespace ember::nn::data;
using test::contains;
using test::error_of;

namespace {

// n images of 3 x 5 x 4 with pseudo-random pixels, label i mod 7.
ImageSet random_set(int64_t n) {
  ImageSet s;
  s.n = n, s.channels = 3, s.height = 5, s.width = 4;
  s.name = "synthetic";
  uint32_t state = 2024;
  for (int64_t i = 0; i < n * s.image_size(); ++i) {
    state = state * 1664525u + 1013904223u;
    s.pixels.push_back(static_cast<uint8_t>(state >> 24));
  }
  for (int64_t i = 0; i < n; ++i) s.labels.push_back(i % 7);
  s.class_names = {"0", "1", "2", "3", "4", "5", "6"};
  return s;
}

// The image pipeline's recipe, written out: the images at indices as batch
// key of an epoch. Returns the images, labels, partners' labels (empty
// without mixing) and lam.
struct RefBatch {
  std::vector<float> images;
  std::vector<int64_t> labels, labels_mix;
  double lam = 1.0;
};
RefBatch reference_batch(const ImageSet& set, const ImageDatasetOptions& o, const std::vector<int64_t>& indices,
                         const BatchKey& key) {
  const int64_t C = set.channels, H = set.height, W = set.width, size = C * H * W, plane = H * W;
  const auto B = static_cast<int64_t>(indices.size());
  const AugmentOptions& a = o.augment;
  std::mt19937_64 rng(batch_seed(o.seed, key));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const RandAugment randaug(a.randaugment_ops, a.randaugment_magnitude);
  RefBatch r;
  r.images.resize(static_cast<size_t>(B * size));
  std::vector<float> tmp(static_cast<size_t>(size));
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = indices[static_cast<size_t>(i)];
    r.labels.push_back(set.labels[static_cast<size_t>(s)]);
    float* img = r.images.data() + i * size;
    for (int64_t k = 0; k < size; ++k)
      img[k] = static_cast<float>(set.pixels[static_cast<size_t>(s * size + k)] / 255.0);
    if (a.randaugment_ops > 0) randaug(img, C, H, W, rng);
    if (a.crop_padding > 0) {
      std::uniform_int_distribution<int64_t> off(0, 2 * a.crop_padding);
      const int64_t top = off(rng), left = off(rng);
      crop_with_padding(img, tmp.data(), C, H, W, a.crop_padding, top, left);
      std::copy(tmp.begin(), tmp.end(), img);
    }
    if (a.hflip && u01(rng) < 0.5) hflip(img, C, H, W);
    for (size_t c = 0; c < o.normalize.mean.size(); ++c)
      for (int64_t k = 0; k < plane; ++k) {
        float& p = img[static_cast<int64_t>(c) * plane + k];
        p = (p - static_cast<float>(o.normalize.mean[c])) * static_cast<float>(1.0 / o.normalize.std[c]);
      }
    if (a.erase_prob > 0 && u01(rng) < a.erase_prob) {
      const Box e = sample_erase_box(rng, H, W);
      erase(img, C, H, W, e.top, e.left, e.h, e.w, 0.0f);
    }
  }
  const bool mixup_on = a.mixup_alpha > 0, cutmix_on = a.cutmix_alpha > 0;
  if ((mixup_on || cutmix_on) && B > 1) {
    const bool cut = cutmix_on && (!mixup_on || u01(rng) < 0.5);
    r.lam = sample_beta(rng, cut ? a.cutmix_alpha : a.mixup_alpha);
    if (cut) {
      const Box box = sample_cutmix_box(rng, H, W, r.lam);
      cutmix(r.images.data(), B, C, H, W, box);
      r.lam = 1.0 - static_cast<double>(box.h * box.w) / static_cast<double>(H * W);
    } else {
      mixup(r.images.data(), B, size, r.lam);
    }
    for (int64_t i = 0; i < B; ++i) r.labels_mix.push_back(r.labels[static_cast<size_t>(B - 1 - i)]);
  }
  return r;
}

// The recipes the tests run: none, normalisation only, per-image
// augmentations, and all of them with mixing.
std::vector<ImageDatasetOptions> recipes(const ImageSet& s) {
  const ChannelStats norm = channel_stats(s);
  std::vector<ImageDatasetOptions> r(4);
  r[0].seed = 5;
  r[1] = {.normalize = norm, .augment = {}, .seed = 6};
  r[2] = {.normalize = norm,
          .augment = {.crop_padding = 1, .hflip = true, .erase_prob = 0.5, .randaugment_ops = 2},
          .seed = 7};
  r[3] = r[2];
  r[3].augment.mixup_alpha = 0.4;
  r[3].augment.cutmix_alpha = 1.0;
  return r;
}

}  // namespace

TEST_CASE("ImageDataset through DatasetLoader: the image recipe's batches, any workers, sharded or not") {
  const ImageSet s = random_set(23);
  for (const ImageDatasetOptions& o : recipes(s)) {
    const ImageDataset ds(s, o);
    CHECK(ds.size() == 23);
    for (int64_t replicas : {1, 2}) {
      for (int64_t rank = 0; rank < replicas; ++rank) {
        for (int64_t workers : {0, 2}) {
          CAPTURE(o.seed);
          CAPTURE(replicas);
          CAPTURE(workers);
          DatasetLoader loader(ds, {.batch_size = 5,
                                    .shuffle = true,
                                    .seed = o.seed,
                                    .num_workers = workers,
                                    .num_replicas = replicas,
                                    .rank = rank});
          CHECK(loader.num_batches() == (replicas == 1 ? 5 : 3));  // 23 images; 12 per rank (one repeat)
          for (int64_t epoch = 0; epoch < 2; ++epoch) {
            const std::vector<int64_t> order = loader.order(epoch);
            CHECK(order == DistributedSampler(23, replicas, rank, true, o.seed).indices(epoch));
            int64_t index = 0;
            for (const Example& b : loader.epoch(epoch)) {
              const auto first = static_cast<size_t>(5 * index);
              const std::vector<int64_t> idx(order.begin() + first, order.begin() + std::min(first + 5, order.size()));
              const BatchKey key{.epoch = epoch, .index = index, .stream = index * replicas + rank};
              const RefBatch want = reference_batch(s, o, idx, key);
              REQUIRE(b.size() == (want.labels_mix.empty() ? 2u : 4u));
              CHECK(b[0].shape() == Shape{static_cast<int64_t>(idx.size()), 3, 5, 4});
              CHECK(b[0].dtype() == DType::Float32);
              CHECK(b[0].to_vector<float>() == want.images);
              CHECK(b[1].to_vector<int64_t>() == want.labels);
              if (b.size() == 4) {
                CHECK(b[2].to_vector<int64_t>() == want.labels_mix);
                CHECK(b[3].item<double>() == want.lam);
              }
              ++index;
            }
            CHECK(index == loader.num_batches());
          }
        }
      }
    }
  }
}

TEST_CASE("DataLoader is DatasetLoader over ImageDataset: the same batches, drop_last, background or not") {
  const ImageSet s = random_set(23);
  for (const ImageDatasetOptions& o : recipes(s)) {
    for (bool background : {false, true}) {
      CAPTURE(o.seed);
      CAPTURE(background);
      DataLoader old(s, {.batch_size = 4,
                         .drop_last = true,
                         .seed = o.seed,
                         .augment = o.augment,
                         .normalize = o.normalize,
                         .background = background});
      const ImageDataset ds(s, o);
      DatasetLoader loader(ds, {.batch_size = 4, .shuffle = true, .drop_last = true, .seed = o.seed});
      CHECK(old.num_batches() == 5);  // 23 images: five batches of 4, the 3 left over dropped
      CHECK(loader.num_batches() == 5);
      old.start_epoch(1);
      loader.start_epoch(1);
      Batch a;
      Example b;
      int64_t n = 0;
      while (old.next(a)) {
        REQUIRE(loader.next(b));
        CHECK(a.index == n);
        CHECK(a.images.size(0) == 4);
        CHECK(a.images.to_vector<float>() == b[0].to_vector<float>());
        CHECK(a.labels.to_vector<int64_t>() == b[1].to_vector<int64_t>());
        CHECK(a.labels_mix.defined() == (b.size() == 4));
        if (b.size() == 4) {
          CHECK(a.labels_mix.to_vector<int64_t>() == b[2].to_vector<int64_t>());
          CHECK(a.lam == b[3].item<double>());
        }
        ++n;
      }
      CHECK_FALSE(loader.next(b));
      CHECK(n == 5);
    }
  }
}

TEST_CASE("ImageDataset: samples, a collate function of one's own, and get as a batch of one") {
  const ImageSet s = random_set(9);
  const std::vector<ImageDatasetOptions> r = recipes(s);
  // Without augmentation a sample is a row of any batch: pixel / 255, normalised.
  const ImageDataset plain(s, r[1]);
  const Example x = plain.get(4);
  REQUIRE(x.size() == 2);
  CHECK(x[0].shape() == Shape{3, 5, 4});
  CHECK(x[1].dim() == 0);
  CHECK(x[1].item<int64_t>() == 4);
  const double want = (s.pixels[4 * 60 + 20] / 255.0 - r[1].normalize.mean[1]) / r[1].normalize.std[1];
  CHECK(x[0].to_vector<float>()[20] == doctest::Approx(want).epsilon(1e-6));  // channel 1, pixel 0
  const Example b = plain.get_batch({8, 4}, {}, BatchKey{.epoch = 3, .index = 1, .stream = 1});
  CHECK(b[0].select(0, 1).to_vector<float>() == x[0].to_vector<float>());

  // With augmentation, get(i) is batch i of epoch 0 holding image i alone.
  const ImageDataset aug(s, r[2]);
  CHECK(aug.get(4)[0].to_vector<float>() ==
        aug.get_batch({4}, {}, BatchKey{.epoch = 0, .index = 4, .stream = 4})[0].select(0, 0).to_vector<float>());
  CHECK(aug.get(4)[0].to_vector<float>() == reference_batch(s, r[2], {4}, {0, 4, 4}).images);

  // A collate function gets the batch's samples, drawn as the default batch's.
  std::vector<Shape> seen;
  const Collate keep = [&](const std::vector<Example>& samples) {
    for (const Example& e : samples) seen.push_back(e[0].shape());
    return default_collate(samples);
  };
  DatasetLoader with(aug, {.batch_size = 4, .shuffle = true, .seed = 7, .collate = keep});
  DatasetLoader without(aug, {.batch_size = 4, .shuffle = true, .seed = 7});
  CHECK(with.batch(2, 1)[0].to_vector<float>() == without.batch(2, 1)[0].to_vector<float>());
  CHECK(with.batch(2, 2)[1].to_vector<int64_t>() == without.batch(2, 2)[1].to_vector<int64_t>());
  CHECK(seen == std::vector<Shape>(5, Shape{3, 5, 4}));  // batches of 4 and 1
  // Mixing needs the whole batch: a collate function is refused.
  const ImageDataset mixing(s, r[3]);
  CHECK(contains(error_of<ValueError>([&] { mixing.get_batch({0, 1}, keep, {}); }), "need the default collation"));
  CHECK(mixing.get_batch({0}, {}, {}).size() == 2);  // one image: nothing to mix
  CHECK(contains(error_of<IndexError>([&] { plain.get(9); }), "index 9 out of range for image set 'synthetic'"));
  CHECK_THROWS_AS(plain.get_batch({0, -1}, {}, {}), IndexError);
}

TEST_CASE("ImageDataset: a set whose pixels or labels disagree with its sizes is refused, naming it and the sizes") {
  ImageSet set;
  set.n = 4;
  set.channels = 1;
  set.height = set.width = 3;
  set.pixels.assign(4 * 9 - 1, 7);  // one pixel short
  set.labels.assign(4, 0);
  set.class_names = {"a"};
  set.name = "tiny";
  const std::string short_pixels = error_of<ShapeError>([&] { ImageDataset ds(set); });
  CHECK(contains(short_pixels, "ImageDataset: image set 'tiny' holds 35 pixels, but 4 images of 1 x 3 x 3 need 36"));
  CHECK(contains(error_of<ShapeError>([&] { DataLoader loader(set, {.batch_size = 2}); }), "need 36"));
  set.pixels.assign(37, 7);  // one too many
  CHECK(contains(error_of<ShapeError>([&] { ImageDataset ds(set); }), "37 pixels"));
  set.pixels.assign(36, 7);
  set.labels.assign(3, 0);
  CHECK(contains(error_of<ShapeError>([&] { ImageDataset ds(set); }), "'tiny' holds 3 labels for 4 images"));
  set.labels.assign(4, 0);
  set.channels = 0;
  CHECK(contains(error_of<ValueError>([&] { ImageDataset ds(set); }), "'tiny' has 4 images of 0 x 3 x 3"));
  set.channels = 1;
  CHECK(contains(error_of<ValueError>([&] {
                   ImageDataset ds(set, {.normalize = {{0.5, 0.5}, {1, 1}}});
                 }),
                 "normalisation for 2 channels"));
  CHECK(contains(error_of<ValueError>([&] { ImageDataset ds(set, {.normalize = {{0.5}, {0}}}); }), "std is 0"));
  CHECK(contains(error_of<ValueError>([&] { ImageDataset ds(set, {.augment = {.crop_padding = 3}}); }),
                 "crop padding 3 for 3 x 3 images"));
  CHECK_THROWS_AS(ImageDataset(set, {.augment = {.randaugment_ops = 1, .randaugment_magnitude = 31}}), ValueError);
  const ImageDataset ok(set);
  CHECK(ok.size() == 4);
  DataLoader loader(set, {.batch_size = 2});
  CHECK(loader.num_batches() == 2);
  // An empty set is a dataset of no images; a loader refuses it.
  ImageSet none = set;
  none.n = 0;
  none.pixels.clear();
  none.labels.clear();
  CHECK(ImageDataset(none).size() == 0);
  CHECK(contains(error_of<ValueError>([&] { DataLoader l(none, {}); }), "empty dataset"));
}
