// DistributedDataParallel and the sampler across real processes: N ranks with
// batch B each train exactly like one process with batch N*B (within float
// rounding), starting from rank 0's weights whatever each rank initialised;
// no_sync accumulates locally; buffers follow rank 0; ranks that built
// different models all get the same clear error instead of a hang; the
// sampler's shards cover the data set exactly once per epoch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>

#include "distributed_util.h"
#include "test_util.h"

using namespace ember;
using test::contains;
using test::error_of;

namespace {

constexpr int64_t kB = 8;  // per-rank batch

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 3)});
}

// The global batch (world * kB samples), the same on every rank.
struct Data {
  Tensor x, y;
};
Data global_batch(uint64_t seed) {
  Generator g(seed);
  const int64_t n = distributed::world_size() * kB;
  return {randn({n, 6}, {}, &g), randn({n, 3}, {}, &g)};
}
Tensor my_rows(const Tensor& t) { return t.narrow(0, distributed::rank() * kB, kB); }

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a.cpu(), b.cpu()))).item(); }

// Whether every rank holds exactly this tensor's values.
bool same_on_every_rank(const Tensor& t) {
  const Tensor all = distributed::all_gather(t.detach()).cpu();
  bool same = true;
  for (int r = 0; r < distributed::world_size(); ++r)
    same = same && all.select(0, r).to_vector<float>() == t.cpu().to_vector<float>();
  return same;
}

}  // namespace

TEST_CASE("DDP: N ranks with batch B step like one process with batch N*B") {
  for (const Device& device : dist_test::devices()) {
    CAPTURE(device.str());
    // Every rank initialises differently; DDP starts them all from rank 0's.
    auto model = make_mlp(10 + static_cast<uint64_t>(distributed::rank()));
    model->to(device);
    nn::DDPOptions o;
    o.bucket_cap_mb = 300.0 / (1 << 20);  // 300 bytes: several buckets in flight at once
    nn::DistributedDataParallel ddp(model, o);
    // Parameters 0..5 are 0.weight (384 bytes) to 4.bias (12 bytes); buckets fill in reverse.
    CHECK(ddp.bucket_layout() == std::vector<std::vector<size_t>>{{5, 4, 3}, {2}, {1}, {0}});
    optim::AdamW opt(model->parameters(), {.lr = 1e-2});

    auto ref = make_mlp(10);  // rank 0's initialisation, in one process
    optim::AdamW ref_opt(ref->parameters(), {.lr = 1e-2});
    const auto params = model->named_parameters(), ref_params = ref->named_parameters();
    for (size_t k = 0; k < params.size(); ++k) CHECK(max_abs_diff(params[k].second, ref_params[k].second) == 0);

    for (uint64_t step = 0; step < 3; ++step) {
      const Data d = global_batch(100 + step);
      opt.zero_grad();
      mse_loss(ddp(my_rows(d.x).to(device)), my_rows(d.y).to(device)).backward();
      ddp.synchronize();  // backward already finished it: nothing left to do
      ref_opt.zero_grad();
      mse_loss((*ref)(d.x), d.y).backward();
      for (size_t k = 0; k < params.size(); ++k) {
        CAPTURE(params[k].first);
        CHECK(max_abs_diff(params[k].second.grad(), ref_params[k].second.grad()) < 1e-6);
      }
      opt.step();
      ref_opt.step();
    }
    for (size_t k = 0; k < params.size(); ++k) {
      CAPTURE(params[k].first);
      CHECK(max_abs_diff(params[k].second, ref_params[k].second) < 1e-5);
      CHECK(same_on_every_rank(params[k].second));  // bit for bit: the ranks never drift apart
    }
  }
}

TEST_CASE("DDP: no_sync accumulates micro-batches locally, the next backward averages the sums") {
  for (const Device& device : dist_test::devices()) {
    CAPTURE(device.str());
    auto model = make_mlp(20);
    model->to(device);
    nn::DistributedDataParallel ddp(model);
    const Data d = global_batch(7);
    const Tensor x = my_rows(d.x).to(device), y = my_rows(d.y).to(device);
    const int64_t half = kB / 2;
    // Two micro-batches of B/2; each loss is half the micro-batch mean, so the
    // accumulated gradient is the mean over the rank's B samples.
    {
      auto guard = ddp.no_sync();
      mul(mse_loss(ddp(x.narrow(0, 0, half)), y.narrow(0, 0, half)), 0.5).backward();
      ddp.synchronize();  // under no_sync: nothing
    }
    const Tensor local = model->parameters().back().grad().clone();
    if (distributed::world_size() > 1) CHECK_FALSE(same_on_every_rank(local));  // not communicated
    mul(mse_loss(ddp(x.narrow(0, half, half)), y.narrow(0, half, half)), 0.5).backward();

    auto ref = make_mlp(20);
    mse_loss((*ref)(d.x), d.y).backward();
    const auto params = model->named_parameters(), ref_params = ref->named_parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      CAPTURE(params[k].first);
      CHECK(max_abs_diff(params[k].second.grad(), ref_params[k].second.grad()) < 1e-6);
    }
  }
}

TEST_CASE("DDP: buffers follow rank 0 at construction and at every forward") {
  auto bn = std::make_shared<nn::BatchNorm1d>(3);
  const double me = distributed::rank();
  {
    NoGradGuard no_grad;
    bn->running_mean.fill_(me + 1);
  }
  nn::DistributedDataParallel ddp(bn);
  CHECK(bn->running_mean.to_vector<double>() == std::vector<double>{1, 1, 1});
  bn->eval();
  {
    NoGradGuard no_grad;
    bn->running_mean.fill_(me + 5);
  }
  (void)ddp(ones({2, 3}));
  CHECK(bn->running_mean.to_vector<double>() == std::vector<double>{5, 5, 5});
}

TEST_CASE("DDP: ranks that built different models all fail with the same clear error") {
  const int me = distributed::rank();
  // A different shape on rank 1.
  auto lin = std::make_shared<nn::Linear>(4, me == 1 ? 5 : 3);
  const std::string shapes = error_of<ValueError>([&] { nn::DistributedDataParallel ddp(lin); });
  CHECK(contains(shapes, "the ranks' models differ"));
  CHECK(contains(shapes, "rank 0: parameter weight [3, 4] float32 cpu"));
  CHECK(contains(shapes, "rank 1: parameter weight [5, 4] float32 cpu"));

  // One more layer on rank 1.
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(4, 4));
  if (me == 1) seq->push_back(std::make_shared<nn::Linear>(4, 4));
  const std::string counts = error_of<ValueError>([&] { nn::DistributedDataParallel ddp(seq); });
  CHECK(contains(counts, "rank 0 has 2 parameters and 0 buffers (20 elements)"));
  CHECK(contains(counts, "rank 1 has 4 parameters and 0 buffers (40 elements)"));
  CHECK(contains(counts, "rank 0: (nothing)"));
  CHECK(contains(counts, "rank 1: parameter 1.weight [4, 4] float32 cpu"));

  // The group is still in step afterwards.
  Tensor t = ones({1});
  distributed::all_reduce(t);
  CHECK(t.item() == distributed::world_size());
}

TEST_CASE("DistributedSampler across ranks: every sample once per epoch, plus the padding") {
  const int world = distributed::world_size(), me = distributed::rank();
  for (int64_t n : {int64_t{11}, 2 * static_cast<int64_t>(world)}) {
    CAPTURE(n);
    const nn::data::DistributedSampler s(n, world, me, /*shuffle=*/true, /*seed=*/5);
    const std::vector<int64_t> mine = s.indices(3);
    CHECK(static_cast<int64_t>(mine.size()) == (n + world - 1) / world);
    const std::vector<int64_t> all = distributed::all_gather(from_vector(mine)).to_vector<int64_t>();
    std::map<int64_t, int> count;
    for (int64_t i : all) ++count[i];
    CHECK(static_cast<int64_t>(count.size()) == n);  // every sample of 0..n-1
    CHECK(count.begin()->first == 0);
    CHECK(count.rbegin()->first == n - 1);
    int repeats = 0;
    for (const auto& [i, c] : count) repeats += c - 1;
    CHECK(repeats == s.total_size() - n);  // only the padding repeats
    // Any process can recompute every rank's shard from (seed, epoch).
    for (int r = 0; r < world; ++r) {
      const std::vector<int64_t> theirs = nn::data::DistributedSampler(n, world, r, true, 5).indices(3);
      CHECK(std::equal(theirs.begin(), theirs.end(), all.begin() + r * static_cast<int64_t>(theirs.size())));
    }
  }
}
