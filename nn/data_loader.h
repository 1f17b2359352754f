/// \file
/// The image loader: DatasetLoader (nn/dataset.h) over an ImageDataset
/// (nn/image_dataset.h), with its batches as named fields (`Batch`: images,
/// labels, the mixing partners' labels and weight, the index) and one
/// options struct for both, as the demos' training loops read them.
///
/// It is a thin wrapper, not a loader of its own: shuffling, batching,
/// drop_last, the DistributedSampler's shards, the background worker and the
/// error path are DatasetLoader's, and every pixel is ImageDataset's batched
/// get_batch, which writes a whole batch into one tensor. So the general
/// interface and the image path share one implementation of the sampling
/// and its checks, and the image path stays batched: nothing is built per
/// sample and stacked.
///
/// Determinism: the order of epoch e is a shuffle seeded by (seed, e), and
/// batch b of epoch e draws its augmentations from an RNG seeded by
/// (seed, e, b), b * N + r for rank r of N replicas: a batch is a pure
/// function of (seed, epoch, index, rank, N). So the background thread's
/// timing never changes a result, resuming at (epoch, batch) needs no loader
/// state beyond those two numbers, and one replica is the unsharded loader.
#pragma once

#include <cstdint>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/nn/data_readers.h>
#include <ember/nn/dataset.h>
#include <ember/nn/image_dataset.h>

namespace ember::nn::data {

/// How a DataLoader batches, shuffles, normalises, augments and shards.
struct LoaderOptions {
  int64_t batch_size = 128;  ///< images per batch
  bool shuffle = true;       ///< a new order every epoch, from (seed, epoch)
  bool drop_last = false;    ///< drop a last batch smaller than batch_size
  uint64_t seed = 0;         ///< the seed of the orders and augmentations
  AugmentOptions augment{};  ///< augmentations (none by default)
  ChannelStats normalize{};  ///< empty: images are pixel / 255
  bool background = true;    ///< prepare batches on a background thread (one DatasetLoader worker)
  int64_t prefetch = 2;      ///< batches prepared ahead (at least 1)
  /// Data-parallel sharding: this loader serves rank's shard of every epoch
  /// (DistributedSampler, padded) out of num_replicas; batch_size and
  /// drop_last apply to the shard. 1 and 0: the whole set.
  ///@{
  int64_t num_replicas = 1;
  int64_t rank = 0;
  ///@}
};

/// One batch of images and labels, ready for the model.
struct Batch {
  Tensor images;      ///< (B, C, H, W) float32
  Tensor labels;      ///< (B) int64
  Tensor labels_mix;  ///< the mixing partners' labels under mixup/cutmix; undefined otherwise
  double lam = 1.0;   ///< loss = lam CE(labels) + (1 - lam) CE(labels_mix)
  int64_t index = 0;  ///< batch index within the epoch
};

/// Batches of an ImageSet, shuffled per epoch, normalised and augmented,
/// prepared ahead on a background thread: a DatasetLoader over an
/// ImageDataset (the file comment). A batch is a pure function of (seed,
/// epoch, index), so results never depend on the thread's timing and a run
/// resumes mid-epoch exactly.
class DataLoader {
 public:
  /// A loader over set, which must outlive it. Throws as ImageDataset and
  /// DatasetLoader do for a set whose sizes disagree, bad options or an
  /// empty set.
  DataLoader(const ImageSet& set, LoaderOptions opts);
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch (drop_last applied).
  int64_t num_batches() const { return loader_.num_batches(); }
  /// The options given.
  const LoaderOptions& options() const { return opts_; }
  /// The sample order of an epoch (identity without shuffle): this rank's
  /// shard when sharded.
  std::vector<int64_t> order(int64_t epoch) const { return loader_.order(epoch); }
  /// Batch index of epoch, built on the caller's thread (what next() returns).
  Batch batch(int64_t epoch, int64_t index) const { return to_batch(loader_.batch(epoch, index), index); }

  /// Starts epoch at batch first_batch (resume mid-epoch); next() then returns
  /// batches first_batch, first_batch + 1, ... and false after the last.
  void start_epoch(int64_t epoch, int64_t first_batch = 0) { loader_.start_epoch(epoch, first_batch); }
  /// The next batch of the epoch into out; false when the epoch is over.
  bool next(Batch& out);
  /// Seconds next() has spent waiting for the background thread.
  double wait_seconds() const { return loader_.wait_seconds(); }

  /// The dataset and the loader underneath.
  ///@{
  const ImageDataset& dataset() const { return dataset_; }
  DatasetLoader& loader() { return loader_; }
  ///@}

 private:
  static Batch to_batch(Example e, int64_t index);

  LoaderOptions opts_;
  ImageDataset dataset_;
  DatasetLoader loader_;
};

}  // namespace ember::nn::data
