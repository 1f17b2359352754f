// Datasets of any tensors, the distributed sampler and the loader (see
// dataset.h). Workers build whole batches (get or get_batch, then collate)
// under NoGradGuard; the ops they call share the thread pool with the
// training loop, which runs one parallel job at a time (core/parallel.h).
#include <ember/nn/dataset.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include <ember/core/autograd.h>
#include <ember/core/error.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>

namespace ember::nn::data {

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
// The epoch's shuffle has a stream of its own, which no batch's stream reaches.
constexpr uint64_t kShuffleStream = ~uint64_t{0};
}  // namespace

uint64_t batch_seed(uint64_t seed, const BatchKey& key) {
  return stream_seed(seed, static_cast<uint64_t>(key.epoch), static_cast<uint64_t>(key.stream));
}

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

Example Dataset::get_batch(const std::vector<int64_t>& indices, const Collate& collate, const BatchKey&) const {
  std::vector<Example> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(get(i));
  return collate ? collate(samples) : default_collate(samples);
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  EMBER_CHECK(!tensors_.empty(), ValueError, "TensorDataset: needs at least one tensor");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    EMBER_CHECK(t.defined() && t.dim() >= 1, ValueError, "TensorDataset: tensor ", k,
                t.defined() ? " is 0-dim" : " is undefined", "; every tensor needs a first (sample) dim");
    EMBER_CHECK(t.size(0) == tensors_[0].size(0), ShapeError, "TensorDataset: size mismatch between tensors: tensor 0 ",
                tensors_[0].shape().str(), ", tensor ", k, " ", t.shape().str(), " (the first dims must agree)");
  }
  n_ = tensors_[0].size(0);
}

Example TensorDataset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < n_, IndexError, "TensorDataset: index ", index, " out of range for ", n_,
              " samples");
  Example e;
  for (const Tensor& t : tensors_) e.push_back(t.select(0, index));
  return e;
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices, const Collate& collate,
                                 const BatchKey& key) const {
  if (collate) return Dataset::get_batch(indices, collate, key);
  for (int64_t i : indices)
    EMBER_CHECK(i >= 0 && i < n_, IndexError, "TensorDataset: index ", i, " out of range for ", n_, " samples");
  const Tensor idx = from_vector(indices);
  Example e;
  for (const Tensor& t : tensors_) e.push_back(index_select(t, 0, t.device().is_cpu() ? idx : idx.to(t.device())));
  return e;
}

Example default_collate(const std::vector<Example>& samples) {
  EMBER_CHECK(!samples.empty(), ValueError, "default_collate: no samples");
  const size_t width = samples[0].size();
  Example batch;
  for (size_t k = 0; k < width; ++k) {
    std::vector<Tensor> column;
    column.reserve(samples.size());
    for (size_t s = 0; s < samples.size(); ++s) {
      EMBER_CHECK(samples[s].size() == width, ShapeError, "default_collate: sample ", s, " has ", samples[s].size(),
                  " tensors, sample 0 has ", width);
      const Tensor& t = samples[s][k];
      const Tensor& t0 = samples[0][k];
      EMBER_CHECK(t.defined() && t0.defined(), ValueError, "default_collate: tensor ", k, " of sample ",
                  t.defined() ? 0 : s, " is undefined");
      EMBER_CHECK(t.shape() == t0.shape(), ShapeError, "default_collate: tensor ", k, " of sample ", s, " has shape ",
                  t.shape().str(), ", of sample 0 ", t0.shape().str(), " (a collate function of one's own can pad)");
      EMBER_CHECK(t.dtype() == t0.dtype() && t.device() == t0.device(), DTypeError, "default_collate: tensor ", k,
                  " of sample ", s, " is ", dtype_name(t.dtype()), " on ", t.device().str(), ", of sample 0 ",
                  dtype_name(t0.dtype()), " on ", t0.device().str());
      column.push_back(t);
    }
    batch.push_back(stack(column, 0));
  }
  return batch;
}

DatasetLoader::DatasetLoader(const Dataset& dataset, DatasetLoaderOptions opts)
    : dataset_(dataset),
      opts_(std::move(opts)),
      // An empty dataset is refused below, with the loader's message.
      sampler_(std::max<int64_t>(dataset.size(), 1), opts_.num_replicas, opts_.rank, opts_.shuffle, opts_.seed) {
  EMBER_CHECK(opts_.batch_size > 0, ValueError, "DatasetLoader: batch_size must be positive, got ", opts_.batch_size);
  EMBER_CHECK(opts_.num_workers >= 0 && opts_.num_workers <= 256, ValueError,
              "DatasetLoader: num_workers must be in [0, 256], got ", opts_.num_workers);
  EMBER_CHECK(opts_.prefetch_factor >= 1, ValueError, "DatasetLoader: prefetch_factor must be at least 1, got ",
              opts_.prefetch_factor);
  EMBER_CHECK(dataset.size() > 0, ValueError, "DatasetLoader: empty dataset");
}

DatasetLoader::~DatasetLoader() { stop(); }

int64_t DatasetLoader::num_batches() const {
  const int64_t n = sampler_.num_samples();
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

std::vector<int64_t> DatasetLoader::order(int64_t epoch) const { return sampler_.indices(epoch); }

Example DatasetLoader::batch(int64_t epoch, int64_t index) const { return make(order(epoch), epoch, index); }

Example DatasetLoader::make(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
  EMBER_CHECK(index >= 0 && index < num_batches(), IndexError, "DatasetLoader: batch ", index, " of ", num_batches());
  const auto n = static_cast<int64_t>(order.size());
  const int64_t first = index * opts_.batch_size, last = std::min(first + opts_.batch_size, n);
  const std::vector<int64_t> indices(order.begin() + first, order.begin() + last);
  // Each rank's batch b has its own stream; with one replica it is b's.
  const BatchKey key{.epoch = epoch, .index = index, .stream = index * opts_.num_replicas + opts_.rank};
  return dataset_.get_batch(indices, opts_.collate, key);
}

void DatasetLoader::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  ready_.clear();
  errors_.clear();
  stop_ = false;
}

void DatasetLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  stop();
  EMBER_CHECK(first_batch >= 0 && first_batch <= num_batches(), IndexError, "DatasetLoader: cannot start epoch ", epoch,
              " at batch ", first_batch, " of ", num_batches());
  order_ = order(epoch);
  epoch_ = epoch;
  next_index_ = first_batch;
  end_index_ = num_batches();
  for (int64_t w = 0; w < opts_.num_workers; ++w)
    workers_.emplace_back([this, w, first_batch] { work(w, first_batch); });
}

void DatasetLoader::work(int64_t worker, int64_t first) {
  NoGradGuard no_grad;
  const int64_t N = opts_.num_workers, ahead = opts_.prefetch_factor * N;
  for (int64_t i = first + worker; i < end_index_; i += N) {
    {
      // Wait until batch i is within the look-ahead window of the consumer.
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || i < next_index_ + ahead; });
      if (stop_) return;
    }
    Example b;
    std::exception_ptr err;
    try {
      b = make(order_, epoch_, i);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (err)
        errors_[i] = err;
      else
        ready_[i] = std::move(b);
    }
    cv_.notify_all();
    if (err) return;
  }
}

bool DatasetLoader::next(Example& out) {
  if (next_index_ >= end_index_) return false;
  if (workers_.empty()) {
    out = make(order_, epoch_, next_index_++);
    return true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return ready_.count(next_index_) || errors_.count(next_index_); });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (auto e = errors_.find(next_index_); e != errors_.end()) {
    const std::exception_ptr err = e->second;
    lk.unlock();
    stop();
    next_index_ = end_index_;  // the epoch ends with the error
    std::rethrow_exception(err);
  }
  out = std::move(ready_[next_index_]);
  ready_.erase(next_index_);
  ++next_index_;
  lk.unlock();
  cv_.notify_all();
  return true;
}

}  // namespace ember::nn::data
