/// \file
/// Turning an ImageSet into training batches: per-channel statistics in one
/// streaming pass (Welford), and a DataLoader that shuffles per epoch from the
/// seed, batches (optionally dropping the last short batch), augments,
/// normalises, and prepares the next batches on a background thread while
/// the current one trains.
///
/// Determinism: the order of epoch e is a shuffle seeded by (seed, e), and
/// batch b of epoch e is built from an RNG seeded by (seed, e, b); a batch is
/// a pure function of (seed, epoch, index). So the background thread's
/// timing never changes a result, and resuming at (epoch, batch) needs no
/// loader state beyond those two numbers.
///
/// Data-parallel training shards each epoch with a DistributedSampler: rank r
/// of N takes every N-th sample of the epoch's shuffled order (padded like
/// PyTorch's so every rank gets the same count), and its batch b draws from an
/// RNG seeded by (seed, e, b * N + r). A rank's batch is then a pure function
/// of (seed, epoch, index, rank, N); with N = 1 it is exactly the batch above.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <ember/core/tensor.h>
#include <ember/nn/data_readers.h>

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

/// Which augmentations a loader applies to training batches (all off by default).
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
};

/// Which samples each of num_replicas processes sees in an epoch, as PyTorch's
/// torch.utils.data.distributed.DistributedSampler: the epoch's order (a
/// shuffle seeded by (seed, epoch), the identity without shuffle) is padded by
/// repeating its first samples up to a multiple of num_replicas (or, with
/// drop_last, cut down to one), and rank r takes positions r, r + N, r + 2N,
/// ... So every rank gets num_samples() samples, the ranks together see every
/// sample of the set once per epoch, plus total_size() - n padding repeats
/// (none with drop_last, which instead leaves out n mod N samples), and any
/// process can recompute any rank's shard from (seed, epoch).
class DistributedSampler {
 public:
  /// The shard of rank (of num_replicas) of a set of dataset_size samples;
  /// shuffle and seed as the DataLoader's.
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

/// How a DataLoader batches, shuffles, normalises, augments and shards.
struct LoaderOptions {
  int64_t batch_size = 128;  ///< images per batch
  bool shuffle = true;       ///< a new order every epoch, from (seed, epoch)
  bool drop_last = false;    ///< drop a last batch smaller than batch_size
  uint64_t seed = 0;         ///< the seed of the orders and augmentations
  AugmentOptions augment{};  ///< augmentations (none by default)
  ChannelStats normalize{};  ///< empty: images are pixel / 255
  bool background = true;    ///< prepare batches on a background thread
  int64_t prefetch = 2;      ///< batches prepared ahead
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
/// prepared ahead on a background thread. A batch is a pure function of
/// (seed, epoch, index), so results never depend on the thread's timing and
/// a run resumes mid-epoch exactly.
class DataLoader {
 public:
  /// A loader over set, which must outlive it.
  DataLoader(const ImageSet& set, LoaderOptions opts);
  /// Stops the background thread.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch (drop_last applied).
  int64_t num_batches() const;
  /// The options given.
  const LoaderOptions& options() const { return opts_; }
  /// The sample order of an epoch (identity without shuffle): this rank's
  /// shard when sharded.
  std::vector<int64_t> order(int64_t epoch) const;
  /// Batch index of epoch, built on the caller's thread (what next() returns).
  Batch batch(int64_t epoch, int64_t index) const;

  /// Starts epoch at batch first_batch (resume mid-epoch); next() then returns
  /// batches first_batch, first_batch + 1, ... and false after the last.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  /// The next batch of the epoch into out; false when the epoch is over.
  bool next(Batch& out);
  /// Seconds next() has spent waiting for the background thread.
  double wait_seconds() const { return wait_seconds_; }

 private:
  Batch make(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;
  void stop();

  const ImageSet& set_;
  LoaderOptions opts_;
  DistributedSampler sampler_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, next_index_ = 0;
  double wait_seconds_ = 0;

  /// Background preparation: the worker fills queue_ (at most prefetch
  /// batches) in index order; next() takes from the front.
  ///@{
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false, done_ = false;
  std::exception_ptr error_;
  ///@}
};

}  // namespace ember::nn::data
