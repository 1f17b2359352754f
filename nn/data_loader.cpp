// Channel statistics and the DataLoader (see data_loader.h): the per-sample
// pipeline is uint8 -> [0, 1] -> RandAugment -> crop/flip -> normalise -> erase, then
// mixup/cutmix over the batch. The worker thread only runs this code and
// allocates batch tensors (the CPU allocator is thread-safe); it never calls
// an op, so it does not compete with the thread pool's kernels.
#include <ember/nn/data_loader.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

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

namespace {
// splitmix64's finaliser: mixes (seed, a, b) into an RNG seed, so nearby
// epochs and batches get unrelated streams.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t stream_seed(uint64_t seed, uint64_t a, uint64_t b) { return mix(mix(mix(seed) ^ a) ^ b); }
constexpr uint64_t kShuffleStream = ~uint64_t{0};
}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : n_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  EMBER_CHECK(num_replicas > 0 && rank >= 0 && rank < num_replicas, ValueError, "DistributedSampler: rank ", rank,
              " of ", num_replicas, " replicas");
  EMBER_CHECK(dataset_size > 0, ValueError, "DistributedSampler: empty data set");
  EMBER_CHECK(!drop_last || dataset_size >= num_replicas, ValueError, "DistributedSampler: drop_last with ",
              dataset_size, " samples leaves nothing for ", num_replicas, " replicas");
  num_samples_ = drop_last ? n_ / num_replicas_ : (n_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> o(static_cast<size_t>(n_));
  std::iota(o.begin(), o.end(), int64_t{0});
  if (shuffle_) {
    std::mt19937_64 rng(stream_seed(seed_, static_cast<uint64_t>(epoch), kShuffleStream));
    std::shuffle(o.begin(), o.end(), rng);
  }
  // Pad with the order's first samples (repeated whole when the padding is
  // longer than the set), or drop the tail; then deal out round-robin.
  const auto total = static_cast<size_t>(total_size());
  for (size_t i = 0; o.size() < total; ++i) o.push_back(o[i]);
  o.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) mine.push_back(o[i]);
  return mine;
}

DataLoader::DataLoader(const ImageSet& set, LoaderOptions opts)
    : set_(set),
      opts_(std::move(opts)),
      sampler_(set.n > 0 ? set.n : 1, opts_.num_replicas, opts_.rank, opts_.shuffle, opts_.seed) {
  EMBER_CHECK(opts_.batch_size > 0, ValueError, "DataLoader: batch_size must be positive, got ", opts_.batch_size);
  EMBER_CHECK(set.n > 0, ValueError, "DataLoader: empty data set");
  // The loader reads pixels and labels by these sizes: a set that disagrees
  // with them is refused here, before any batch reads out of bounds.
  EMBER_CHECK(set.channels > 0 && set.height > 0 && set.width > 0, ValueError, "DataLoader: image set '", set.name,
              "' has images of ", set.channels, " x ", set.height, " x ", set.width);
  EMBER_CHECK(static_cast<int64_t>(set.pixels.size()) / set.n == set.image_size() &&
                  static_cast<int64_t>(set.pixels.size()) % set.n == 0,
              ShapeError, "DataLoader: image set '", set.name, "' holds ", set.pixels.size(), " pixels, but ", set.n,
              " images of ", set.channels, " x ", set.height, " x ", set.width, " need ", set.n * set.image_size());
  EMBER_CHECK(static_cast<int64_t>(set.labels.size()) == set.n, ShapeError, "DataLoader: image set '", set.name,
              "' holds ", set.labels.size(), " labels for ", set.n, " images");
  EMBER_CHECK(opts_.normalize.mean.empty() || (static_cast<int64_t>(opts_.normalize.mean.size()) == set.channels &&
                                               opts_.normalize.std.size() == opts_.normalize.mean.size()),
              ValueError, "DataLoader: normalisation for ", opts_.normalize.mean.size(), " channels, images have ",
              set.channels);
  for (double s : opts_.normalize.std) EMBER_CHECK(s > 0, ValueError, "DataLoader: a channel's std is ", s);
  const AugmentOptions& a = opts_.augment;
  EMBER_CHECK(a.crop_padding >= 0 && a.crop_padding < std::min(set.height, set.width) && a.erase_prob >= 0 &&
                  a.erase_prob <= 1 && a.mixup_alpha >= 0 && a.cutmix_alpha >= 0,
              ValueError, "DataLoader: bad augmentation options (crop padding ", a.crop_padding, ", erase probability ",
              a.erase_prob, ", mixup alpha ", a.mixup_alpha, ", cutmix alpha ", a.cutmix_alpha, ")");
  (void)RandAugment(a.randaugment_ops, a.randaugment_magnitude);  // checks N and M (ValueError naming them)
  opts_.prefetch = std::max<int64_t>(1, opts_.prefetch);
}

DataLoader::~DataLoader() { stop(); }

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_.num_samples();
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const { return sampler_.indices(epoch); }

Batch DataLoader::batch(int64_t epoch, int64_t index) const { return make(order(epoch), epoch, index); }

Batch DataLoader::make(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
  EMBER_CHECK(index >= 0 && index < num_batches(), IndexError, "DataLoader: batch ", index, " of ", num_batches());
  const auto n = static_cast<int64_t>(order.size());
  const int64_t first = index * opts_.batch_size, B = std::min(opts_.batch_size, n - first);
  const int64_t C = set_.channels, H = set_.height, W = set_.width, size = C * H * W, plane = H * W;
  const AugmentOptions& aug = opts_.augment;
  // Each rank's batch b has its own stream; with one replica it is b's.
  const int64_t stream = index * opts_.num_replicas + opts_.rank;
  std::mt19937_64 rng(stream_seed(opts_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(stream)));
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const RandAugment randaug(aug.randaugment_ops, aug.randaugment_magnitude);

  Batch b;
  b.index = index;
  b.images = empty({B, C, H, W});
  b.labels = empty({B}, TensorOptions(DType::Int64));
  float* x = b.images.data<float>();
  int64_t* y = b.labels.data<int64_t>();
  std::vector<float> tmp(static_cast<size_t>(size));
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = order[static_cast<size_t>(first + i)];
    y[i] = set_.labels[static_cast<size_t>(s)];
    float* img = x + i * size;
    const uint8_t* px = set_.pixels.data() + s * size;
    for (int64_t k = 0; k < size; ++k) img[k] = static_cast<float>(px[k] / 255.0);
    if (aug.randaugment_ops > 0) randaug(img, C, H, W, rng);
    // Geometric transforms before normalisation: padding is black, as in
    // torchvision's RandomCrop on a [0, 1] tensor.
    if (aug.crop_padding > 0) {
      std::uniform_int_distribution<int64_t> off(0, 2 * aug.crop_padding);
      const int64_t top = off(rng), left = off(rng);
      crop_with_padding(img, tmp.data(), C, H, W, aug.crop_padding, top, left);
      std::copy(tmp.begin(), tmp.end(), img);
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
  // Batch-level mixing; with both enabled each batch picks one (timm's switch).
  const bool use_mixup = aug.mixup_alpha > 0, use_cutmix = aug.cutmix_alpha > 0;
  if ((use_mixup || use_cutmix) && B > 1) {
    const bool cut = use_cutmix && (!use_mixup || u01(rng) < 0.5);
    double lam = sample_beta(rng, cut ? aug.cutmix_alpha : aug.mixup_alpha);
    if (cut) {
      const Box box = sample_cutmix_box(rng, H, W, lam);
      cutmix(x, B, C, H, W, box);
      lam = 1.0 - static_cast<double>(box.h * box.w) / static_cast<double>(H * W);  // the area actually kept
    } else {
      mixup(x, B, size, lam);
    }
    b.lam = lam;
    b.labels_mix = empty({B}, TensorOptions(DType::Int64));
    int64_t* ym = b.labels_mix.data<int64_t>();
    for (int64_t i = 0; i < B; ++i) ym[i] = y[B - 1 - i];
  }
  return b;
}

void DataLoader::stop() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  stop();
  EMBER_CHECK(first_batch >= 0 && first_batch <= num_batches(), IndexError, "DataLoader: cannot start epoch ", epoch,
              " at batch ", first_batch, " of ", num_batches());
  order_ = order(epoch);
  epoch_ = epoch;
  next_index_ = first_batch;
  queue_.clear();
  stop_ = done_ = false;
  error_ = nullptr;
  if (!opts_.background) return;
  worker_ = std::thread([this, first_batch] {
    try {
      for (int64_t i = first_batch; i < num_batches(); ++i) {
        Batch b = make(order_, epoch_, i);
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < opts_.prefetch; });
        if (stop_) return;
        queue_.push_back(std::move(b));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  });
}

bool DataLoader::next(Batch& out) {
  if (next_index_ >= num_batches()) return false;
  if (!opts_.background) {
    out = make(order_, epoch_, next_index_++);
    return true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || done_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (queue_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return false;
  }
  out = std::move(queue_.front());
  queue_.pop_front();
  ++next_index_;
  cv_.notify_all();
  return true;
}

}  // namespace ember::nn::data
