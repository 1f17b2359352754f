// Known answers, determinism and error messages for the indexing ops
// (ops/indexing.h). Expected values come from PyTorch 1.13 in float64:
// tools/reference_indexing.py prints every one of them (same inputs, same
// backward seed w = 1, 2, 3, ... / 10).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_values;
using test::contains;
using test::error_of;
using test::weighted_backward;

namespace {

// arange(12) as a 3x4 float64 tensor, as x34 in the script.
Tensor x34() { return arange(0, 12, 1, TensorOptions(kFloat64)).reshape({3, 4}); }

Tensor ints(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

}  // namespace

TEST_CASE("index_select: forward and backward") {
  struct Case {
    int64_t dim;
    std::vector<int64_t> idx;
    Shape out_shape;
    std::vector<double> out, grad;
  };
  const std::vector<Case> cases = {
      {0,
       {2, 0, 2},
       {3, 4},
       {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11},
       {0.5, 0.6, 0.7, 0.8, 0, 0, 0, 0, 1.0, 1.2, 1.4000000000000001, 1.6}},
      {1,
       {3, 1, 1, 0, 3},
       {3, 5},
       {3, 1, 1, 0, 3, 7, 5, 5, 4, 7, 11, 9, 9, 8, 11},
       {0.4, 0.5, 0.0, 0.6, 0.9, 1.5, 0.0, 1.6, 1.4, 2.5, 0.0, 2.6}},
      {-1, {0}, {3, 1}, {0, 4, 8}, {0.1, 0, 0, 0, 0.2, 0, 0, 0, 0.3, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    Tensor x = x34().requires_grad_();
    Tensor out = index_select(x, c.dim, ints(c.idx, {static_cast<int64_t>(c.idx.size())}));
    CHECK(out.shape() == c.out_shape);
    check_values(out, c.out);
    weighted_backward(out);
    check_values(x.grad(), c.grad);
  }
  // Non-contiguous input, float32 and int64 data.
  Tensor xt = x34().t();  // [4, 3]
  check_values(index_select(xt, 0, ints({3, 0}, {2})), {3, 7, 11, 0, 4, 8});
  check_values(index_select(x34().to(kInt64), 1, ints({2}, {1})), {2, 6, 10});
  check_values(index_select(x34().to(kFloat32), 0, ints({1}, {1})), {4, 5, 6, 7});
  // A 0-dim index keeps the dim with size 1, as in PyTorch.
  CHECK(index_select(x34(), 0, from_vector<int64_t>({1}, Shape{})).shape() == Shape{1, 4});
}

TEST_CASE("gather: forward and backward") {
  {
    Tensor x = x34().requires_grad_();
    Tensor out = gather(x, 0, ints({2, 0, 1, 2, 0, 0, 2, 1}, {2, 4}));
    check_values(out, {8, 1, 6, 11, 0, 1, 10, 7});
    weighted_backward(out);
    check_values(x.grad(), {0.5, 0.8, 0.0, 0.0, 0.0, 0.0, 0.3, 0.8, 0.1, 0.0, 0.7, 0.4});
  }
  {
    Tensor x = x34().requires_grad_();
    Tensor out = gather(x, 1, ints({3, 3, 0, 1, 2, 0}, {3, 2}));
    check_values(out, {3, 3, 4, 5, 10, 8});
    weighted_backward(out);
    check_values(x.grad(), {0.0, 0.0, 0.0, 0.30000000000000004, 0.3, 0.4, 0.0, 0.0, 0.6, 0.0, 0.5, 0.0});
  }
  {
    // index smaller than x in the non-gathered dim.
    Tensor x = x34().requires_grad_();
    Tensor out = gather(x, 0, ints({1, 2, 2, 2}, {2, 2}));
    check_values(out, {4, 9, 8, 9});
    weighted_backward(out);
    check_values(x.grad(), {0, 0, 0, 0, 0.1, 0, 0, 0, 0.3, 0.6000000000000001, 0, 0});
  }
  // Non-contiguous x.
  check_values(gather(x34().t(), 1, ints({2, 0}, {2, 1})), {8, 1});
}

TEST_CASE("scatter_add: forward and backward") {
  {
    Tensor x = zeros({3, 4}, TensorOptions(kFloat64)).requires_grad_();
    Tensor src = add(arange(0, 8, 1, TensorOptions(kFloat64)).reshape({2, 4}), 1.0).detach().requires_grad_();
    Tensor out = scatter_add(x, 0, ints({2, 0, 2, 1, 2, 1, 0, 1}, {2, 4}), src);
    check_values(out, {0, 2, 7, 0, 0, 6, 0, 12, 6, 0, 3, 0});
    weighted_backward(out);
    check_values(x.grad(), {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2});
    check_values(src.grad(), {0.9, 0.2, 1.1, 0.8, 0.9, 0.6, 0.3, 0.8});
  }
  {
    // src larger than index: only the covered part is used and gets a gradient.
    Tensor x = x34().requires_grad_();
    Tensor src = add(arange(0, 9, 1, TensorOptions(kFloat64)).reshape({3, 3}), 1.0).detach().requires_grad_();
    Tensor out = scatter_add(x, 1, ints({3, 3, 0, 1}, {2, 2}), src);
    check_values(out, {0, 1, 2, 6, 8, 10, 6, 7, 8, 9, 10, 11});
    weighted_backward(out);
    check_values(src.grad(), {0.4, 0.4, 0.0, 0.5, 0.6, 0.0, 0.0, 0.0, 0.0});
  }
}

TEST_CASE("index_add: forward and backward") {
  Tensor x = x34().requires_grad_();
  Tensor src = mul(x34(), -0.5).detach().requires_grad_();
  Tensor out = index_add(x, 0, ints({1, 1, 0}, {3}), src);
  check_values(out, {-4.0, -3.5, -3.0, -2.5, 2, 2, 2, 2, 8, 9, 10, 11});
  weighted_backward(out);
  check_values(x.grad(), {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2});
  check_values(src.grad(), {0.5, 0.6, 0.7, 0.8, 0.5, 0.6, 0.7, 0.8, 0.1, 0.2, 0.3, 0.4});
}

TEST_CASE("embedding: rows by index, padding row gets no gradient") {
  const Tensor weight = sub(mul(arange(0, 15, 1, TensorOptions(kFloat64)).reshape({5, 3}), 0.5), 1.0);
  const Tensor idx = ints({0, 2, 4, 2, 2, 1}, {2, 3});
  const std::vector<double> expect_out = {-1.0, -0.5, 0.0, 2.0, 2.5, 3.0, 5.0, 5.5, 6.0,
                                          2.0,  2.5,  3.0, 2.0, 2.5, 3.0, 0.5, 1.0, 1.5};
  struct Case {
    std::optional<int64_t> pad;
    std::vector<double> grad;
  };
  const std::vector<Case> cases = {
      {std::nullopt, {0.1, 0.2, 0.3, 1.6, 1.7, 1.8, 2.7, 3.0, 3.3, 0, 0, 0, 0.7, 0.8, 0.9}},
      {2, {0.1, 0.2, 0.3, 1.6, 1.7, 1.8, 0, 0, 0, 0, 0, 0, 0.7, 0.8, 0.9}},
      {-1, {0.1, 0.2, 0.3, 1.6, 1.7, 1.8, 2.7, 3.0, 3.3, 0, 0, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    Tensor w = weight.clone().requires_grad_();
    Tensor out = embedding(w, idx, c.pad);
    CHECK(out.shape() == Shape{2, 3, 3});
    check_values(out, expect_out);
    weighted_backward(out);
    check_values(w.grad(), c.grad);
  }
  // A 0-dim index gives one row of shape [D].
  CHECK(embedding(weight, from_vector<int64_t>({3}, Shape{})).shape() == Shape{3});
}

TEST_CASE("embedding / index_select / gather backward: same bits for any thread count") {
  // Many repeats of a few rows: the case where a racy or order-dependent
  // scatter-add would differ between runs and thread counts.
  const int64_t V = 7, D = 200, M = 5000;
  Generator gen(3);
  const Tensor idx = randint(0, V, {M}, TensorOptions(kInt64), &gen);
  const Tensor g = randn({M, D}, TensorOptions(kFloat32), &gen);
  const Tensor idx2 = randint(0, 40, {M, D}, TensorOptions(kInt64), &gen);
  auto grads = [&] {
    Tensor w = randn({V, D}, TensorOptions(kFloat32), &gen).requires_grad_();
    sum(mul(embedding(w, idx), g)).backward();
    Tensor x = randn({V, D}, TensorOptions(kFloat32), &gen).requires_grad_();
    sum(mul(index_select(x, 0, idx), g)).backward();
    Tensor y = randn({40, D}, TensorOptions(kFloat32), &gen).requires_grad_();
    sum(mul(gather(y, 0, idx2), g)).backward();
    return std::vector<std::vector<float>>{w.grad().to_vector<float>(), x.grad().to_vector<float>(),
                                           y.grad().to_vector<float>()};
  };
  const int saved = num_threads();
  set_num_threads(1);
  const auto serial = grads();
  set_num_threads(4);
  const auto parallel = grads();
  const auto again = grads();
  set_num_threads(saved);
  CHECK(serial == parallel);
  CHECK(parallel == again);
  // And the embedding grad is the plain sum of the rows.
  std::vector<double> expect(static_cast<size_t>(V * D), 0.0);
  const std::vector<int64_t> iv = idx.to_vector<int64_t>();
  const std::vector<float> gv = g.to_vector<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t d = 0; d < D; ++d) expect[iv[m] * D + d] += gv[m * D + d];
  for (size_t i = 0; i < expect.size(); ++i) CHECK(serial[0][i] == doctest::Approx(expect[i]).epsilon(1e-4));
}

TEST_CASE("one_hot") {
  Tensor a = one_hot(ints({0, 2, 1}, {3}));
  CHECK(a.dtype() == kInt64);
  CHECK(a.shape() == Shape{3, 3});
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0});
  Tensor b = one_hot(ints({0, 3, 1, 0}, {2, 2}), 5);
  CHECK(b.shape() == Shape{2, 2, 5});
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  CHECK(one_hot(ints({}, {0}), 3).shape() == Shape{0, 3});
}

TEST_CASE("indexing: error messages name the op, the index and the size") {
  std::string m = error_of<IndexError>([] { index_select(x34(), 0, ints({0, 5}, {2})); });
  CHECK(contains(m, "index_select"));
  CHECK(contains(m, "index 5"));
  CHECK(contains(m, "size 3"));
  m = error_of<IndexError>([] { index_select(x34(), 1, ints({-1}, {1})); });
  CHECK(contains(m, "index -1"));
  CHECK(contains(m, "size 4"));
  m = error_of<DTypeError>([] { index_select(x34(), 0, tensor({0.0, 1.0})); });
  CHECK(contains(m, "index_select"));
  CHECK(contains(m, "int64"));
  CHECK(contains(m, "float32"));
  CHECK_THROWS_AS(index_select(x34(), 0, ints({0, 1}, {1, 2})), ShapeError);
  CHECK_THROWS_AS(index_select(x34(), 2, ints({0}, {1})), IndexError);

  m = error_of<IndexError>([] { gather(x34(), 1, ints({0, 4}, {1, 2})); });
  CHECK(contains(m, "gather: index 4"));
  CHECK(contains(m, "size 4"));
  m = error_of<ShapeError>([] { gather(x34(), 0, ints({0, 0, 0, 0, 0}, {1, 5})); });
  CHECK(contains(m, "gather"));
  CHECK(contains(m, "[1, 5]"));
  CHECK(contains(m, "[3, 4]"));
  CHECK_THROWS_AS(gather(x34(), 0, ints({0, 1}, {2})), ShapeError);
  CHECK_THROWS_AS(gather(x34(), 0, zeros({1, 1})), DTypeError);

  m = error_of<IndexError>([] { scatter_add(x34(), 0, ints({3}, {1, 1}), x34()); });
  CHECK(contains(m, "scatter_add: index 3"));
  CHECK_THROWS_AS(scatter_add(x34(), 0, ints({0}, {1, 1}), x34().to(kFloat32)), DTypeError);
  CHECK_THROWS_AS(index_add(x34(), 0, ints({0}, {1}), x34()), ShapeError);

  m = error_of<IndexError>([] { embedding(zeros({5, 3}), ints({1, 5}, {2})); });
  CHECK(contains(m, "embedding: index 5"));
  CHECK(contains(m, "5 embeddings"));
  m = error_of<DTypeError>([] { embedding(zeros({5, 3}), tensor({1.0})); });
  CHECK(contains(m, "embedding"));
  CHECK_THROWS_AS(embedding(zeros({5}), ints({1}, {1})), ShapeError);
  CHECK_THROWS_AS(embedding(zeros({5, 3}), ints({1}, {1}), 5), IndexError);

  m = error_of<IndexError>([] { one_hot(ints({1, -1}, {2})); });
  CHECK(contains(m, "one_hot"));
  CHECK(contains(m, "-1"));
  m = error_of<IndexError>([] { one_hot(ints({1, 3}, {2}), 3); });
  CHECK(contains(m, "one_hot: class value 3"));
  CHECK_THROWS_AS(one_hot(ints({}, {0})), ValueError);
  CHECK_THROWS_AS(one_hot(tensor({1.0})), DTypeError);
}

TEST_CASE("index_add and embedding's backward on CUDA: long, skewed indices give the CPU's bits") {
  // Past 64 entries the CUDA kernel sorts the index by destination row (a
  // radix pass per byte of the row count) and adds each row's run in
  // increasing position, as the CPU does: the same bits, not just close.
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator gen(11);
  struct Shape3 {
    int64_t N, K;
  };
  // One radix pass (N < 256), two, three (N > 65535); 65 entries, the first
  // sorted length; rows drawn mostly from a few, as tokens are.
  for (const Shape3 s : {Shape3{7, 5000}, Shape3{300, 3000}, Shape3{70000, 2000}, Shape3{50, 65}})
    for (const DType dt : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
      CAPTURE(s.N);
      CAPTURE(s.K);
      CAPTURE(dtype_name(dt));
      const Tensor few = randint(0, std::min<int64_t>(s.N, 5), {s.K}, TensorOptions(kInt64), &gen);
      const Tensor any = randint(0, s.N, {s.K}, TensorOptions(kInt64), &gen);
      const Tensor pick = lt(rand({s.K}, TensorOptions(), &gen), 0.7);
      const Tensor idx = where(pick, few, any);
      const Tensor x = mul(randn({2, s.N, 33}, TensorOptions(), &gen), 8.0).to(dt);
      const Tensor src = mul(randn({2, s.K, 33}, TensorOptions(), &gen), 8.0).to(dt);
      const Tensor cpu = index_add(x, 1, idx, src);
      const Tensor dev = index_add(x.to(cuda), 1, idx.to(cuda), src.to(cuda));
      CHECK(max(abs(sub(dev.cpu().to(kFloat64), cpu.to(kFloat64)))).item<double>() == 0.0);
    }
  {  // rows wider than a block's 256 threads x 4 columns
    const Tensor idx = randint(0, 20, {300}, TensorOptions(kInt64), &gen);
    const Tensor x = randn({1, 20, 1100}, TensorOptions(), &gen), src = randn({1, 300, 1100}, TensorOptions(), &gen);
    const Tensor dev = index_add(x.to(cuda), 1, idx.to(cuda), src.to(cuda));
    CHECK(max(abs(sub(dev.cpu(), index_add(x, 1, idx, src)))).item<double>() == 0.0);
  }
  // embedding's backward skips its padding row.
  const Tensor idx = randint(0, 9, {40, 100}, TensorOptions(kInt64), &gen);
  const Tensor w0 = randn({9, 16}, TensorOptions(), &gen), up = randn({40, 100, 16}, TensorOptions(), &gen);
  Tensor wc = w0.clone().requires_grad_(), wd = w0.to(cuda).requires_grad_();
  autograd::backward({embedding(wc, idx, 3)}, {up});
  autograd::backward({embedding(wd, idx.to(cuda), 3)}, {up.to(cuda)});
  CHECK(max(abs(sub(wd.grad().cpu(), wc.grad()))).item<double>() == 0.0);
  CHECK(max(abs(wd.grad().cpu().select(0, 3))).item<double>() == 0.0);
}
