/// \file
/// Any data in batches, as torch.utils.data: a map-style `Dataset` that users
/// implement (size and get), `TensorDataset` over tensors of any dtype and
/// shape, `default_collate`, and `DatasetLoader`, which shuffles per epoch,
/// batches (drop_last), collates and prepares batches ahead on worker
/// threads:
///
/// \code
///   data::TensorDataset ds({features, labels});          // (N, ...) each, any dtypes
///   data::DatasetLoader loader(ds, {.batch_size = 64, .shuffle = true, .num_workers = 2});
///   for (int64_t epoch = 0; epoch < 10; ++epoch)
///     for (const data::Example& b : loader.epoch(epoch)) train_step(b[0], b[1]);
/// \endcode
///
/// Images are one such dataset: `ImageDataset` (nn/image_dataset.h) serves an
/// ImageSet normalised and augmented, as torchvision's datasets with their
/// transforms, and `DataLoader` (nn/data_loader.h) is this loader over it.
///
/// Determinism: epoch e's order is a shuffle seeded by (seed, e), and every
/// batch is built with its `BatchKey` (epoch, index, stream), from which a
/// dataset with random samples (augmentations) seeds its draws
/// (`batch_seed`). A batch is then a pure function of (seed, epoch, index):
/// the workers' timing never changes what next() returns, and a run resumes
/// mid-epoch from (epoch, batch) alone.
///
/// Data-parallel training shards each epoch with a DistributedSampler: rank r
/// of N takes every N-th sample of the epoch's shuffled order (padded like
/// PyTorch's so every rank gets the same count), and its batch b has stream
/// b * N + r. A rank's batch is then a pure function of (seed, epoch, index,
/// rank, N); with N = 1 it is exactly the unsharded batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::nn::data {

/// One sample, or one batch of them: its tensors in a fixed order (features,
/// target, ...), as the tuples PyTorch's datasets return.
using Example = std::vector<Tensor>;
/// A collate function: samples to one batch.
using Collate = std::function<Example(const std::vector<Example>&)>;

/// Where a batch sits in training, handed to Dataset::get_batch so that a
/// dataset whose samples are random (augmentations) draws them from a stream
/// of their own: seeded by batch_seed(seed, key), a batch is a pure function
/// of (seed, epoch, index), whichever worker builds it and when.
struct BatchKey {
  int64_t epoch = 0;   ///< the epoch
  int64_t index = 0;   ///< the batch's index in the epoch (this rank's, when sharded)
  int64_t stream = 0;  ///< index * num_replicas + rank: distinct for every batch of every rank in an epoch
};

/// An RNG seed for the batch at key: seed, epoch and stream mixed by
/// splitmix64's finaliser, so nearby epochs and batches get unrelated streams.
uint64_t batch_seed(uint64_t seed, const BatchKey& key);

/// A map-style dataset, as torch.utils.data.Dataset: size() samples, get(i)
/// the i-th. With a loader's num_workers > 0, get and get_batch run on the
/// workers, several at once: they must only read shared state.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// The number of samples.
  virtual int64_t size() const = 0;
  /// Sample index, 0 <= index < size().
  virtual Example get(int64_t index) const = 0;
  /// The samples at indices as one batch: by default get() of each, then
  /// collate (default_collate when it is empty). A dataset that can gather a
  /// batch at once overrides it (TensorDataset), as does one whose samples
  /// are random: it seeds its draws from key (ImageDataset).
  virtual Example get_batch(const std::vector<int64_t>& indices, const Collate& collate, const BatchKey& key) const;
};

/// torch.utils.data.TensorDataset: sample i is row i of each tensor. The
/// tensors may have any dtype, shape and device, with one first dim.
class TensorDataset : public Dataset {
 public:
  /// Throws ShapeError naming the shapes when the first dims differ, and
  /// ValueError for no tensors or 0-dim ones.
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override;
  /// One index_select per tensor (no per-sample copies) when collate is
  /// empty; collate of the samples otherwise.
  Example get_batch(const std::vector<int64_t>& indices, const Collate& collate, const BatchKey& key) const override;
  /// The tensors given.
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t n_ = 0;
};

/// torch's default_collate for tensors: position k of every sample stacked
/// into one tensor with a new first dim. Samples must agree in their number
/// of tensors and, position by position, in shape, dtype and device
/// (ShapeError / DTypeError naming the sample and position otherwise).
Example default_collate(const std::vector<Example>& samples);

/// Which samples each of num_replicas processes sees in an epoch, as PyTorch's
/// torch.utils.data.distributed.DistributedSampler: the epoch's order (a
/// shuffle seeded by (seed, epoch), the identity without shuffle) is padded by
/// repeating its first samples up to a multiple of num_replicas (or, with
/// drop_last, cut down to one), and rank r takes positions r, r + N, r + 2N,
/// ... So every rank gets num_samples() samples, the ranks together see every
/// sample of the set once per epoch, plus total_size() - n padding repeats
/// (none with drop_last, which instead leaves out n mod N samples), and any
/// process can recompute any rank's shard from (seed, epoch). One replica is
/// the loaders' own order.
class DistributedSampler {
 public:
  /// The shard of rank (of num_replicas) of a set of dataset_size samples;
  /// shuffle and seed as the loader's.
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  int64_t num_samples() const { return num_samples_; }                 ///< per rank
  int64_t total_size() const { return num_samples_ * num_replicas_; }  ///< over the ranks, padding included
  int64_t num_replicas() const { return num_replicas_; }               ///< the number of shards
  int64_t rank() const { return rank_; }                               ///< this shard's rank
  /// The dataset indices of this rank in epoch's order.
  std::vector<int64_t> indices(int64_t epoch) const;

 private:
  int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
};

/// How a DatasetLoader batches; the defaults are PyTorch's DataLoader's.
struct DatasetLoaderOptions {
  int64_t batch_size = 1;       ///< samples per batch
  bool shuffle = false;         ///< a new order every epoch, from (seed, epoch)
  bool drop_last = false;       ///< drop a last batch smaller than batch_size
  uint64_t seed = 0;            ///< the seed of the orders
  int64_t num_workers = 0;      ///< 0: batches built on the caller's thread; N: on N worker threads
  int64_t prefetch_factor = 2;  ///< batches each worker prepares ahead (num_workers > 0)
  /// Samples to a batch; empty: the dataset's get_batch (default_collate).
  Collate collate = nullptr;
  /// Data-parallel sharding, as a DistributedSampler(dataset, num_replicas,
  /// rank, shuffle, seed) passed to PyTorch's DataLoader: this loader serves
  /// rank's shard of every epoch (padded); batch_size and drop_last apply to
  /// the shard. 1 and 0: the whole dataset.
  ///@{
  int64_t num_replicas = 1;
  int64_t rank = 0;
  ///@}
};

/// Batches of a Dataset, as torch.utils.data.DataLoader over a map-style
/// dataset: shuffled per epoch, batched, collated, prepared ahead by
/// num_workers threads and returned in order. An exception thrown while
/// building a batch is rethrown by the next() that would return it.
class DatasetLoader {
 public:
  /// A loader over dataset, which must outlive it. Throws ValueError for an
  /// empty dataset or options out of range.
  DatasetLoader(const Dataset& dataset, DatasetLoaderOptions opts = {});
  /// Stops the workers.
  ~DatasetLoader();
  DatasetLoader(const DatasetLoader&) = delete;
  DatasetLoader& operator=(const DatasetLoader&) = delete;

  /// Batches per epoch (drop_last applied).
  int64_t num_batches() const;
  /// The options given.
  const DatasetLoaderOptions& options() const { return opts_; }
  /// The dataset served.
  const Dataset& dataset() const { return dataset_; }
  /// The sample order of an epoch (the identity without shuffle): this
  /// rank's shard when sharded.
  std::vector<int64_t> order(int64_t epoch) const;
  /// Batch index of epoch, built on the caller's thread (what next() returns).
  Example batch(int64_t epoch, int64_t index) const;

  /// Starts epoch at batch first_batch (resuming mid-epoch); next() then
  /// returns batches first_batch, first_batch + 1, ... and false after the last.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  /// The next batch of the epoch into out; false when the epoch is over.
  bool next(Example& out);
  /// The index in the epoch of the batch the next next() returns.
  int64_t next_index() const { return next_index_; }
  /// Seconds next() has spent waiting for the workers.
  double wait_seconds() const { return wait_seconds_; }

  /// `for (const Example& b : loader.epoch(e))`: start_epoch(e), then next().
  class Iterator {
   public:
    Iterator(DatasetLoader* loader) : loader_(loader) { advance(); }  ///< nullptr: the end
    const Example& operator*() const { return current_; }
    Iterator& operator++() {
      advance();
      return *this;
    }
    bool operator!=(const Iterator& o) const { return loader_ != o.loader_; }

   private:
    void advance() {
      if (loader_ && !loader_->next(current_)) loader_ = nullptr;
    }
    DatasetLoader* loader_;
    Example current_;
  };
  /// One epoch as a range.
  struct Epoch {
    DatasetLoader* loader;
    Iterator begin() { return Iterator(loader); }
    Iterator end() { return Iterator(nullptr); }
  };
  Epoch epoch(int64_t e) {
    start_epoch(e);
    return Epoch{this};
  }

 private:
  Example make(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;
  void stop();
  void work(int64_t worker, int64_t first);

  const Dataset& dataset_;
  DatasetLoaderOptions opts_;
  DistributedSampler sampler_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, next_index_ = 0, end_index_ = 0;
  double wait_seconds_ = 0;

  /// Workers: worker w builds batches first + w, first + w + N, ..., at most
  /// prefetch_factor * N ahead of the consumer; results wait in ready_ by index.
  ///@{
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Example> ready_;
  std::map<int64_t, std::exception_ptr> errors_;
  bool stop_ = false;
  ///@}
};

}  // namespace ember::nn::data
