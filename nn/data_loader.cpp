// The image loader (see data_loader.h): LoaderOptions split into the
// ImageDataset's (normalisation, augmentation, the seed of its draws) and the
// DatasetLoader's (batching, order, sharding, one worker for the background
// thread), both seeded by the one seed, and each batch's tensors moved into
// a Batch's named fields.
#include <ember/nn/data_loader.h>

#include <algorithm>

namespace ember::nn::data {

DataLoader::DataLoader(const ImageSet& set, LoaderOptions opts)
    : opts_(std::move(opts)),
      dataset_(set, {.normalize = opts_.normalize, .augment = opts_.augment, .seed = opts_.seed}),
      loader_(dataset_, {.batch_size = opts_.batch_size,
                         .shuffle = opts_.shuffle,
                         .drop_last = opts_.drop_last,
                         .seed = opts_.seed,
                         .num_workers = opts_.background ? 1 : 0,
                         .prefetch_factor = std::max<int64_t>(1, opts_.prefetch),
                         .num_replicas = opts_.num_replicas,
                         .rank = opts_.rank}) {}

Batch DataLoader::to_batch(Example e, int64_t index) {
  // ImageDataset's batch: {images, labels}, plus {labels_mix, lam} when mixed.
  Batch b;
  b.index = index;
  b.images = std::move(e[0]);
  b.labels = std::move(e[1]);
  if (e.size() > 2) {
    b.labels_mix = std::move(e[2]);
    b.lam = e[3].item<double>();
  }
  return b;
}

bool DataLoader::next(Batch& out) {
  const int64_t index = loader_.next_index();
  Example e;
  if (!loader_.next(e)) return false;
  out = to_batch(std::move(e), index);
  return true;
}

}  // namespace ember::nn::data
