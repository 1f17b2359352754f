// Datasets of any tensors (nn/dataset.h): TensorDataset, a Dataset written
// here as a user would, default_collate and a collate of one's own, and the
// DatasetLoader's batching, shuffling, sharding, workers, resumption and
// errors; a user's dataset of token windows. The image dataset has its own
// suite (test_image_dataset.cpp).
#include <numeric>
#include <set>
#include <stdexcept>

#include "test_util.h"

using namespace ember;
using namespace ember::nn::data;

namespace {

// Sample i: a (2,) float32 vector (i, -i) and an int64 scalar label i % 3.
struct Squares : Dataset {
  int64_t n;
  int64_t throw_at = -1;
  explicit Squares(int64_t n_) : n(n_) {}
  int64_t size() const override { return n; }
  Example get(int64_t i) const override {
    if (i == throw_at) throw ValueError("Squares: sample " + std::to_string(i) + " is broken");
    return {tensor({static_cast<double>(i), -static_cast<double>(i)}),
            full({}, static_cast<double>(i % 3), TensorOptions(DType::Int64))};
  }
};

// Sample i: a sequence of i % 4 + 1 tokens, all equal to i (variable length).
struct Sequences : Dataset {
  int64_t size() const override { return 9; }
  Example get(int64_t i) const override {
    return {full({i % 4 + 1}, static_cast<double>(i), TensorOptions(DType::Int64))};
  }
};

// A language-model corpus as a user writes it: sample i is the context
// window of tokens [i, i + context) and its next-token targets [i + 1, i +
// context + 1), both int64.
struct TokenWindows : Dataset {
  std::vector<int64_t> tokens;
  int64_t context;
  TokenWindows(std::vector<int64_t> t, int64_t c) : tokens(std::move(t)), context(c) {
    if (static_cast<int64_t>(tokens.size()) <= context)
      throw ValueError("TokenWindows: " + std::to_string(tokens.size()) + " tokens hold no window of " +
                       std::to_string(context) + " and its targets");
  }
  int64_t size() const override { return static_cast<int64_t>(tokens.size()) - context; }
  Example get(int64_t i) const override {
    const auto first = tokens.begin() + i;
    return {from_vector(std::vector<int64_t>(first, first + context)),
            from_vector(std::vector<int64_t>(first + 1, first + context + 1))};
  }
};

// Pads the sequences of a batch with -1 to the longest, and returns their lengths.
Example pad_sequences(const std::vector<Example>& samples) {
  int64_t longest = 0;
  for (const Example& s : samples) longest = std::max(longest, s[0].size(0));
  const auto B = static_cast<int64_t>(samples.size());
  Tensor out = full({B, longest}, -1.0, TensorOptions(DType::Int64));
  Tensor lens = empty({B}, TensorOptions(DType::Int64));
  for (int64_t b = 0; b < B; ++b) {
    const Tensor& s = samples[static_cast<size_t>(b)][0];
    out.select(0, b).narrow(0, 0, s.size(0)).copy_(s);
    lens.data<int64_t>()[b] = s.size(0);
  }
  return {out, lens};
}

std::vector<double> values(const Tensor& t) {
  const Tensor f = t.to(DType::Float64).contiguous();
  return std::vector<double>(f.data<double>(), f.data<double>() + f.numel());
}

}  // namespace

TEST_CASE("TensorDataset: rows of tensors of any dtype and shape, checked sizes") {
  const Tensor x = arange(30.0).reshape({10, 3});
  const Tensor y = arange(10.0, TensorOptions(DType::Int64));
  const Tensor m = gt(arange(10.0), 4.5);
  const Tensor h = arange(40.0).reshape({10, 2, 2}).to(kBFloat16);
  TensorDataset ds({x, y, m, h});
  CHECK(ds.size() == 10);
  const Example s = ds.get(3);
  REQUIRE(s.size() == 4);
  CHECK(values(s[0]) == std::vector<double>{9, 10, 11});
  CHECK(s[1].dim() == 0);
  CHECK(s[1].item<int64_t>() == 3);
  CHECK(s[2].dtype() == DType::Bool);
  CHECK(s[3].dtype() == kBFloat16);
  CHECK(s[3].shape() == Shape{2, 2});
  // A gathered batch equals the stacked samples, dtypes kept.
  const Example b = ds.get_batch({7, 1, 1}, {}, {});
  CHECK(b[0].shape() == Shape{3, 3});
  CHECK(values(b[0]) == std::vector<double>{21, 22, 23, 3, 4, 5, 3, 4, 5});
  CHECK(b[1].dtype() == DType::Int64);
  CHECK(values(b[1]) == std::vector<double>{7, 1, 1});
  CHECK(values(b[2]) == std::vector<double>{1, 0, 0});
  CHECK(b[3].dtype() == kBFloat16);
  CHECK(values(b[3]) == values(default_collate({ds.get(7), ds.get(1), ds.get(1)})[3]));
  CHECK_THROWS_AS(ds.get(10), IndexError);
  CHECK_THROWS_AS(ds.get_batch({0, -1}, {}, {}), IndexError);

  CHECK_THROWS_AS(TensorDataset({}), ValueError);
  CHECK_THROWS_AS(TensorDataset({tensor({1.0})}).get(1), IndexError);
  CHECK_THROWS_AS(TensorDataset({full({}, 1.0)}), ValueError);
  try {
    TensorDataset({x, arange(9.0)});
    FAIL("mismatched first dims accepted");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("[10, 3]") != std::string::npos);
    CHECK(std::string(e.what()).find("[9]") != std::string::npos);
  }
}

TEST_CASE("DatasetLoader: PyTorch's defaults, batching, drop_last and every sample once per shuffled epoch") {
  const DatasetLoaderOptions d;
  CHECK(d.batch_size == 1);
  CHECK_FALSE(d.shuffle);
  CHECK_FALSE(d.drop_last);
  CHECK(d.num_workers == 0);
  CHECK(d.prefetch_factor == 2);

  TensorDataset ds({arange(10.0), arange(10.0, TensorOptions(DType::Int64))});
  DatasetLoader plain(ds, {.batch_size = 4});
  CHECK(plain.num_batches() == 3);
  std::vector<std::vector<double>> got;
  for (const Example& b : plain.epoch(0)) got.push_back(values(b[1]));
  REQUIRE(got.size() == 3);
  CHECK(got[0] == std::vector<double>{0, 1, 2, 3});
  CHECK(got[2] == std::vector<double>{8, 9});
  CHECK(DatasetLoader(ds, {.batch_size = 4, .drop_last = true}).num_batches() == 2);

  DatasetLoader shuffled(ds, {.batch_size = 3, .shuffle = true, .seed = 5});
  std::vector<int64_t> first_order;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<double> seen;
    std::vector<int64_t> order;
    for (const Example& b : shuffled.epoch(epoch))
      for (double v : values(b[0])) {
        seen.insert(v);
        order.push_back(static_cast<int64_t>(v));
      }
    CHECK(seen == std::multiset<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(order == shuffled.order(epoch));
    if (epoch == 0) first_order = order;
    if (epoch > 0) CHECK(order != first_order);  // a new order every epoch
  }
  DatasetLoader again(ds, {.batch_size = 3, .shuffle = true, .seed = 5});
  CHECK(again.order(1) == shuffled.order(1));  // from (seed, epoch) alone
}

TEST_CASE("DatasetLoader: workers return the same batches in the same order, and a run resumes mid-epoch") {
  Squares ds(23);
  DatasetLoader serial(ds, {.batch_size = 4, .shuffle = true, .seed = 11});
  for (int64_t workers : {1, 3}) {
    CAPTURE(workers);
    DatasetLoader parallel(ds, {.batch_size = 4, .shuffle = true, .seed = 11, .num_workers = workers});
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      serial.start_epoch(epoch);
      parallel.start_epoch(epoch);
      Example a, b;
      int64_t n = 0;
      while (serial.next(a)) {
        REQUIRE(parallel.next(b));
        CHECK(values(a[0]) == values(b[0]));
        CHECK(values(a[1]) == values(b[1]));
        CHECK(b[0].shape() == Shape{a[0].size(0), 2});  // default_collate stacked the (2,) samples
        ++n;
      }
      CHECK_FALSE(parallel.next(b));
      CHECK(n == 6);
    }
    // Starting an epoch again mid-way gives batches 4, 5: what batch() builds.
    parallel.start_epoch(2, 4);
    Example b;
    REQUIRE(parallel.next(b));
    CHECK(values(b[0]) == values(serial.batch(2, 4)[0]));
    REQUIRE(parallel.next(b));
    CHECK_FALSE(parallel.next(b));
  }
}

TEST_CASE("DatasetLoader: a Dataset of token windows written by the user, batched, shuffled, sharded") {
  // Tokens 100, 101, ..., 110: 11 tokens, windows of 3, so 8 samples.
  std::vector<int64_t> tokens(11);
  std::iota(tokens.begin(), tokens.end(), int64_t{100});
  const TokenWindows ds(tokens, 3);
  CHECK(ds.size() == 8);
  CHECK_THROWS_AS(TokenWindows({1, 2, 3}, 3), ValueError);

  DatasetLoader plain(ds, {.batch_size = 3});
  CHECK(plain.num_batches() == 3);
  const Example b0 = plain.batch(0, 0);
  REQUIRE(b0.size() == 2);
  CHECK(b0[0].dtype() == DType::Int64);
  CHECK(b0[0].shape() == Shape{3, 3});
  CHECK(values(b0[0]) == std::vector<double>{100, 101, 102, 101, 102, 103, 102, 103, 104});
  CHECK(values(b0[1]) == std::vector<double>{101, 102, 103, 102, 103, 104, 103, 104, 105});
  CHECK(values(plain.batch(0, 2)[0]) == std::vector<double>{106, 107, 108, 107, 108, 109});  // the short last batch

  // drop_last leaves the short batch out; workers give the serial batches.
  DatasetLoader serial(ds, {.batch_size = 3, .shuffle = true, .drop_last = true, .seed = 4});
  DatasetLoader parallel(ds, {.batch_size = 3, .shuffle = true, .drop_last = true, .seed = 4, .num_workers = 2});
  CHECK(serial.num_batches() == 2);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    serial.start_epoch(epoch);
    parallel.start_epoch(epoch);
    Example a, b;
    int64_t n = 0;
    while (serial.next(a)) {
      REQUIRE(parallel.next(b));
      CHECK(values(a[0]) == values(b[0]));
      CHECK(values(a[1]) == values(b[1]));
      // Each target row is its window shifted by one token.
      const std::vector<double> x = values(a[0]), y = values(a[1]);
      for (size_t k = 0; k < x.size(); ++k) CHECK(y[k] == x[k] + 1);
      ++n;
    }
    CHECK_FALSE(parallel.next(b));
    CHECK(n == 2);
  }

  // Two replicas: PyTorch's DistributedSampler shards, every window once.
  std::multiset<double> firsts;
  for (int64_t rank = 0; rank < 2; ++rank) {
    DatasetLoader shard(ds, {.batch_size = 2, .shuffle = true, .seed = 4, .num_replicas = 2, .rank = rank});
    CHECK(shard.num_batches() == 2);
    CHECK(shard.order(1) == DistributedSampler(8, 2, rank, true, 4).indices(1));
    for (const Example& b : shard.epoch(1))
      for (int64_t i = 0; i < b[0].size(0); ++i) firsts.insert(values(b[0])[static_cast<size_t>(3 * i)]);
  }
  CHECK(firsts == std::multiset<double>{100, 101, 102, 103, 104, 105, 106, 107});
  CHECK(test::contains(test::error_of<ValueError>([&] { DatasetLoader(ds, {.num_replicas = 2, .rank = 2}); }),
                       "rank 2 of 2 replicas"));
}

TEST_CASE("DatasetLoader: a collate function of one's own pads variable-length samples") {
  Sequences ds;
  CHECK_THROWS_AS(default_collate({ds.get(0), ds.get(1)}), ShapeError);
  DatasetLoader loader(ds, {.batch_size = 4, .collate = pad_sequences});
  Example b;
  loader.start_epoch(0);
  REQUIRE(loader.next(b));
  CHECK(b[0].shape() == Shape{4, 4});
  CHECK(values(b[1]) == std::vector<double>{1, 2, 3, 4});
  CHECK(values(b[0]) == std::vector<double>{0, -1, -1, -1, 1, 1, -1, -1, 2, 2, 2, -1, 3, 3, 3, 3});
}

TEST_CASE("DatasetLoader: an error building a batch reaches next(), on the caller's thread or from a worker") {
  for (int64_t workers : {0, 2}) {
    CAPTURE(workers);
    Squares ds(12);
    ds.throw_at = 9;
    DatasetLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    loader.start_epoch(0);
    Example b;
    CHECK(loader.next(b));
    CHECK(loader.next(b));
    try {
      loader.next(b);
      FAIL("the broken sample was not reported");
    } catch (const ValueError& e) {
      CHECK(std::string(e.what()).find("sample 9") != std::string::npos);
    }
    CHECK_FALSE(loader.next(b));  // the epoch ends with the error
    loader.start_epoch(1);        // and the loader can start again
    CHECK(loader.next(b));
  }
  Squares empty_set(0);
  CHECK_THROWS_AS(DatasetLoader(empty_set, {}), ValueError);
  Squares ds(3);
  CHECK_THROWS_AS(DatasetLoader(ds, {.batch_size = 0}), ValueError);
  CHECK_THROWS_AS(DatasetLoader(ds, {.num_workers = -1}), ValueError);
}
