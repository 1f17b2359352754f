// Data-parallel pieces in a single process (a world of one, as any program
// started without a launcher): the process group's defaults, collectives as
// the identity, and DistributedDataParallel's buckets, hooks, no_sync and
// unused-parameter handling, which run the same code as with many ranks.
// The multi-process suite is tests/distributed/ (mpiexec -n 2).
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using distributed::ReduceOp;
using test::contains;
using test::error_of;

namespace {

std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
}

std::vector<std::vector<float>> grads_of(nn::Module& m) {
  std::vector<std::vector<float>> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().to_vector<float>());
  return g;
}

// fc2 is never used by forward: its gradient never arrives.
struct HalfUsed : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  HalfUsed() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, 2));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(2, 2));
  }
  Tensor forward(const Tensor& x) override { return (*fc1)(x); }
};

}  // namespace

// First in this file, so that a run of the whole binary reaches it before
// any test initialises the group (CTest runs each case in its own process).
TEST_CASE("distributed: a build without MPI refuses to be one of several launched processes") {
  if (distributed::mpi_available() || distributed::is_initialized()) {
    MESSAGE("skipped: ", distributed::mpi_available() ? "this build has MPI" : "the group is already initialised");
    return;
  }
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  const std::string msg = error_of<DeviceError>([] { distributed::init(); });
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  CHECK(contains(msg, "started by mpirun (Open MPI) as rank 1 of 2, but Ember was built without MPI"));
  CHECK(contains(msg, "-DEMBER_MPI=ON"));
  CHECK_FALSE(distributed::is_initialized());
}

TEST_CASE("distributed: a process started on its own is a world of one") {
  distributed::init();
  distributed::init();  // again: nothing happens
  CHECK(distributed::is_initialized());
  CHECK(distributed::rank() == 0);
  CHECK(distributed::world_size() == 1);
  CHECK(distributed::local_rank() == 0);
  CHECK(distributed::backend() == "none");
  distributed::barrier();

  Tensor f = tensor({1.5, -2.0}), i = ones({3}, kInt64);
  distributed::all_reduce(f, ReduceOp::Mean);
  distributed::all_reduce(i, ReduceOp::Sum);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
  distributed::broadcast(f, 0);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  const Tensor g = distributed::all_gather(tensor({{1, 2}, {3, 4}}).t());
  CHECK(g.shape() == Shape({1, 2, 2}));
  CHECK(g.to_vector<float>() == std::vector<float>{1, 3, 2, 4});
  CHECK(distributed::all_reduce_async(f).test());

  // The same argument checks as with many ranks.
  CHECK(contains(error_of<DTypeError>([&] { distributed::all_reduce(i, ReduceOp::Mean); }), "would truncate"));
  CHECK(contains(error_of<IndexError>([&] { distributed::broadcast(f, 1); }), "root 1 is not a rank"));
  Tensor w = ones({2}).requires_grad_();
  CHECK(contains(error_of<AutogradError>([&] { distributed::broadcast(w); }), "broadcast_: in-place"));
}

TEST_CASE("DDP in a world of one: buckets in reverse order, gradients unchanged, no_sync") {
  auto model = mlp();
  auto plain = mlp();  // the same initialisation, never wrapped
  nn::DDPOptions o;
  o.bucket_cap_mb = 100.0 / (1 << 20);  // 100 bytes
  nn::DistributedDataParallel ddp(model, o);
  // 0.weight 128 B, 0.bias 32 B, 2.weight 96 B, 2.bias 12 B, from the last.
  CHECK(ddp.bucket_layout() == std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}});
  CHECK(nn::DistributedDataParallel(mlp()).bucket_layout() == std::vector<std::vector<size_t>>{{3, 2, 1, 0}});
  CHECK(ddp.named_parameters()[0].first == "module.0.weight");  // PyTorch's names

  const Tensor x = tensor({{1, 2, 3, 4}, {-1, 0.5, 2, 0}}), y = tensor({{1, 0, 0}, {0, 1, 0}});
  mse_loss(ddp(x), y).backward();
  mse_loss((*plain)(x), y).backward();
  CHECK(grads_of(*model) == grads_of(*plain));

  // Two backward passes under no_sync and one after: the sum of three, as
  // without DDP.
  {
    auto guard = ddp.no_sync();
    mse_loss(ddp(x), y).backward();
    mse_loss(ddp(x), y).backward();
  }
  mse_loss(ddp(x), y).backward();
  for (int k = 0; k < 3; ++k) mse_loss((*plain)(x), y).backward();
  CHECK(grads_of(*model) == grads_of(*plain));
}

TEST_CASE("DDP: parameters without a gradient need synchronize(), which reduces zeros for them") {
  manual_seed(1);
  auto model = std::make_shared<HalfUsed>();
  nn::DistributedDataParallel ddp(model);
  sum(ddp(ones({1, 2}))).backward();
  // fc2 shares the single bucket, which never filled.
  CHECK_FALSE(model->fc2->weight.grad().defined());
  const std::string twice = error_of<ValueError>([&] { sum(ddp(ones({1, 2}))).backward(); });
  CHECK(contains(twice, "parameter 'fc1."));
  CHECK(contains(twice, "call ddp.synchronize() after backward"));
  model->zero_grad();
  ddp.synchronize();  // finishes the open pass
  sum(ddp(ones({1, 2}))).backward();
  ddp.synchronize();
  CHECK(model->fc1->weight.grad().to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  CHECK(model->fc2->weight.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 0});
  ddp.synchronize();  // nothing open: nothing to do
}
