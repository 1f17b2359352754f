// Collectives across real processes (run by mpiexec with 2 or more ranks):
// exact results of sum, mean, max, min, broadcast and all_gather on known
// values in float32, float64 and int64, strided tensors, the asynchronous
// form, and the errors every rank raises alike. On CPU tensors through MPI,
// and on CUDA tensors through NCCL where this binary has NCCL and every
// rank has a GPU of its own (otherwise that part says why it skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "distributed_util.h"
#include "test_util.h"

using namespace ember;
using distributed::ReduceOp;
using test::contains;
using test::error_of;

TEST_CASE("distributed: the launch gave this process its rank in a world of several") {
  CHECK(distributed::is_initialized());
  CHECK(distributed::world_size() >= 2);
  CHECK(distributed::rank() >= 0);
  CHECK(distributed::rank() < distributed::world_size());
  CHECK(distributed::backend() == "mpi");
  CHECK(distributed::local_rank() == distributed::rank());  // all on this machine
  // Every rank sees every other's rank exactly once.
  const std::vector<int64_t> ranks =
      distributed::all_gather(scalar_tensor(distributed::rank(), kInt64)).to_vector<int64_t>();
  for (int r = 0; r < distributed::world_size(); ++r) CHECK(ranks[static_cast<size_t>(r)] == r);
  distributed::barrier();
}

TEST_CASE("distributed: all_reduce, broadcast and all_gather give exact results") {
  const int world = distributed::world_size(), me = distributed::rank();
  const double w = world, sum_ranks = world * (world + 1) / 2.0;  // of (rank + 1)
  for (const Device& device : dist_test::devices()) {
    CAPTURE(device.str());
    for (DType dtype : {kFloat32, kFloat64, kInt64}) {
      CAPTURE(dtype_name(dtype));
      // Element i of rank r holds (r + 1) * (i + 1).
      auto mine = [&] {
        return mul(arange(1, 7, 1, kFloat64), static_cast<double>(me + 1)).to(dtype).reshape({2, 3}).to(device);
      };
      Tensor t = mine();
      distributed::all_reduce(t, ReduceOp::Sum);
      CHECK(t.cpu().to_vector<double>() ==
            std::vector<double>{sum_ranks, 2 * sum_ranks, 3 * sum_ranks, 4 * sum_ranks, 5 * sum_ranks, 6 * sum_ranks});
      t = mine();
      distributed::all_reduce(t, ReduceOp::Max);
      CHECK(t.cpu().to_vector<double>() == std::vector<double>{w, 2 * w, 3 * w, 4 * w, 5 * w, 6 * w});
      t = mine();
      distributed::all_reduce(t, ReduceOp::Min);
      CHECK(t.cpu().to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});

      // Broadcast from the last rank.
      Tensor b = mine();
      distributed::broadcast(b, world - 1);
      CHECK(b.cpu().to_vector<double>() == std::vector<double>{w, 2 * w, 3 * w, 4 * w, 5 * w, 6 * w});

      // all_gather stacks the ranks' tensors in rank order.
      const Tensor g = distributed::all_gather(mine());
      CHECK(g.shape() == Shape({world, 2, 3}));
      for (int r = 0; r < world; ++r)
        CHECK(g.select(0, r).cpu().to_vector<double>() ==
              mul(arange(1, 7, 1, kFloat64), static_cast<double>(r + 1)).to_vector<double>());
    }
    // Mean, exactly: float64 values whose mean is representable.
    Tensor m = full({4}, 2.0 * (me + 1), TensorOptions(kFloat64, device));
    distributed::all_reduce(m, ReduceOp::Mean);
    CHECK(m.cpu().to_vector<double>() == std::vector<double>(4, world + 1.0));
    // float32 sums in the transport's order equal the local sum (2 ranks: a + b).
    if (world == 2) {
      Tensor f = full({3}, me == 0 ? 0.1 : 0.2, TensorOptions(kFloat32, device));
      distributed::all_reduce(f, ReduceOp::Sum);
      CHECK(f.cpu().to_vector<float>() == std::vector<float>(3, 0.1f + 0.2f));
    }
    // int64 beyond float precision.
    Tensor big = full({2}, 0, TensorOptions(kInt64, device));
    big.fill_(static_cast<double>((int64_t{1} << 40) + me));
    distributed::all_reduce(big, ReduceOp::Sum);
    CHECK(big.cpu().to_vector<int64_t>()[0] == world * (int64_t{1} << 40) + world * (world - 1) / 2);
  }
}

TEST_CASE("distributed: strided tensors, bool broadcast, the asynchronous all_reduce") {
  const int world = distributed::world_size(), me = distributed::rank();
  // A transposed view is reduced through a contiguous buffer and written back.
  Tensor base = mul(arange(0, 6, 1, kFloat32), static_cast<double>(me + 1)).reshape({2, 3});
  Tensor view = base.t();
  const uint64_t version = base.version();
  distributed::all_reduce(view, ReduceOp::Sum);
  const double s = world * (world + 1) / 2.0;
  CHECK(base.to_vector<double>() == std::vector<double>{0, s, 2 * s, 3 * s, 4 * s, 5 * s});
  CHECK(base.version() > version);
  // A narrow view (contiguous, with an offset) in place; the rest untouched.
  Tensor row = full({2, 4}, me + 1.0);
  Tensor second = row.select(0, 1);
  distributed::broadcast(second, world - 1);
  CHECK(row.to_vector<double>() == std::vector<double>{me + 1.0, me + 1.0, me + 1.0, me + 1.0, 1.0 * world, 1.0 * world,
                                                       1.0 * world, 1.0 * world});

  Tensor flags = from_vector<bool>({me == 0, true, false});
  distributed::broadcast(flags, 0);
  CHECK(flags.to_vector<bool>() == std::vector<bool>{true, true, false});

  Tensor a = full({1000}, me + 1.0), b = full({10}, 2.0 * (me + 1));
  distributed::Work wa = distributed::all_reduce_async(a, ReduceOp::Sum);
  distributed::Work wb = distributed::all_reduce_async(b, ReduceOp::Mean);
  while (!wa.test()) {}
  wb.wait();
  CHECK(a.to_vector<double>() == std::vector<double>(1000, s));
  CHECK(b.to_vector<double>() == std::vector<double>(10, world + 1.0));
  CHECK(!wa.pending());
}

TEST_CASE("distributed: bad arguments fail on every rank alike, before any message") {
  Tensor i = ones({2}, kInt64);
  CHECK(contains(error_of<DTypeError>([&] { distributed::all_reduce(i, ReduceOp::Mean); }), "would truncate"));
  Tensor m = ones({2}, kBool);
  CHECK(contains(error_of<DTypeError>([&] { distributed::all_reduce(m); }), "bool"));
  Tensor w = ones({2}).requires_grad_();
  CHECK(contains(error_of<AutogradError>([&] { distributed::all_reduce(w); }), "requires grad"));
  CHECK(contains(error_of<IndexError>([&] { distributed::broadcast(i, distributed::world_size()); }), "not a rank"));
  // The group still works afterwards.
  Tensor ok = ones({1});
  distributed::all_reduce(ok);
  CHECK(ok.item() == distributed::world_size());
}
