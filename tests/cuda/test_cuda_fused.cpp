// The fused kernels of the CUDA backend against the CPU: layer_norm's
// backward in one launch (dx, and dw, db summed by the last block to
// finish; cuda/norm.cu) and cross_entropy's row kernels (cuda/loss.cu), at
// shapes that are not multiples of the block sizes, rows of one element,
// odd class counts, ignored rows and all-ignored batches, in float32,
// float64 and bfloat16; and the number of launches each takes. Linked into
// the emulated test binary and into ember_gpu_tests (a real GPU; skipped
// without one).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

const Device kCuda("cuda");

// x's layer_norm over its last dim on the CPU and on cuda, backward from
// the same upstream gradient; the gradients asked for (which inputs need
// grad) must agree within tol.
void check_layer_norm(DType dt, int64_t rows, int64_t N, bool weight, bool bias, bool grad_x, double tol,
                      uint64_t seed) {
  INFO("dtype " << std::string(dtype_name(dt)) << ", rows " << rows << ", N " << N << ", weight " << weight << ", bias "
                << bias << ", dx " << grad_x);
  Generator g(seed);
  const TensorOptions o(kFloat32);
  const Tensor x0 = randn({rows, N}, o, &g).to(dt), up0 = randn({rows, N}, o, &g).to(dt);
  const Tensor w0 = weight ? randn({N}, o, &g).to(dt) : Tensor(), b0 = bias ? randn({N}, o, &g).to(dt) : Tensor();
  struct Side {
    Tensor x, w, b;
  };
  auto make = [&](Device d) {
    Side s{x0.to(d).detach(), w0.defined() ? w0.to(d).detach() : Tensor(), b0.defined() ? b0.to(d).detach() : Tensor()};
    if (grad_x) s.x.requires_grad_();
    if (s.w.defined()) s.w.requires_grad_();
    if (s.b.defined()) s.b.requires_grad_();
    autograd::backward({layer_norm(s.x, {N}, s.w, s.b)}, {up0.to(d)});
    return s;
  };
  const Side c = make(Device("cpu")), d = make(kCuda);
  auto close = [&](const Tensor& got, const Tensor& want) {
    return allclose(got.cpu().to(kFloat64), want.to(kFloat64), tol, tol);
  };
  if (grad_x) CHECK(close(d.x.grad(), c.x.grad()));
  if (weight) CHECK(close(d.w.grad(), c.w.grad()));
  if (bias) CHECK(close(d.b.grad(), c.b.grad()));
}

}  // namespace

TEST_CASE("cuda fused: layer_norm backward matches the CPU") {
  if (!test::cuda_usable()) return;
  SUBCASE("float64 at ragged shapes, rows of one element, every mix of gradients") {
    // (rows, N): one row, N = 1, N not a multiple of 32 or of the block,
    // more rows than blocks (the second launch sums up to 1024 partials).
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 7}, {3, 1}, {5, 33}, {300, 50}, {2000, 40}, {9, 257}};
    uint64_t seed = 1;
    for (auto [rows, N] : shapes) {
      check_layer_norm(kFloat64, rows, N, true, true, true, 1e-10, seed++);
      check_layer_norm(kFloat64, rows, N, true, false, false, 1e-10, seed++);  // dw only
      check_layer_norm(kFloat64, rows, N, false, true, true, 1e-10, seed++);   // dx and db
      check_layer_norm(kFloat64, rows, N, false, false, true, 1e-10, seed++);  // dx only
    }
  }
  SUBCASE("partials too wide for shared memory go through the scratch buffer") {
    check_layer_norm(kFloat64, 40, 3000, true, true, true, 1e-10, 31);  // 2 x 3000 doubles: 48 KB
    check_layer_norm(kFloat32, 3, 6000, true, true, true, 1e-4, 32);
  }
  SUBCASE("float32 and bfloat16") {
    check_layer_norm(kFloat32, 700, 48, true, true, true, 1e-4, 41);
    check_layer_norm(kFloat32, 1, 1000, true, true, true, 1e-4, 42);
    // bf16 rounds each gradient once from float32 math; the CPU rounds its
    // own float32 result: one bf16 ulp apart at most, plus the sums' order.
    check_layer_norm(kBFloat16, 300, 50, true, true, true, 2e-2, 43);
    check_layer_norm(kBFloat16, 2, 129, true, false, true, 2e-2, 44);
  }
}

TEST_CASE("cuda fused: layer_norm backward is two launches, and the same bits run after run") {
  if (!test::cuda_usable()) return;
  Generator g(5);
  const Tensor x = randn({2000, 40}, {}, &g).to(kCuda), up = randn({2000, 40}, {}, &g).to(kCuda);
  const Tensor w0 = randn({40}, {}, &g).to(kCuda), b0 = randn({40}, {}, &g).to(kCuda);
  std::vector<std::vector<float>> runs;
  for (int i = 0; i < 3; ++i) {
    Tensor xr = x.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
    const Tensor y = layer_norm(xr, {40}, w, b);
    const uint64_t l0 = profiler::device_launches();
    autograd::backward({y}, {up});
    CHECK(profiler::device_launches() - l0 == 2);  // dx and the blocks' partial dw, db; their sums
    std::vector<float> all = w.grad().cpu().to_vector<float>(), db = b.grad().cpu().to_vector<float>();
    all.insert(all.end(), db.begin(), db.end());
    runs.push_back(all);
  }
  // The blocks finish in a different order run to run; the sums do not.
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

namespace {

// cross_entropy of (N, C) logits on the CPU and on cuda: the loss and the
// logits' gradient, with targets where `ignored` rows hold ignore_index.
void check_cross_entropy(DType dt, int64_t N, int64_t C, Reduction red, double smoothing,
                         const std::vector<int64_t>& ignored, double tol, uint64_t seed) {
  INFO("dtype " << std::string(dtype_name(dt)) << ", N " << N << ", C " << C << ", reduction " << int(red)
                << ", smoothing " << smoothing << ", ignored rows " << ignored.size());
  Generator g(seed);
  const Tensor x0 = mul(randn({N, C}, {}, &g), 3.0).to(dt);
  std::vector<int64_t> tv = randint(0, C, {N}, TensorOptions(kInt64), &g).to_vector<int64_t>();
  for (int64_t r : ignored) tv[r] = -100;
  const Tensor t0 = from_vector(tv);
  const Tensor up0 = red == Reduction::None ? randn({N}, {}, &g).to(dt) : full({}, 0.7, TensorOptions(dt));
  Tensor xc = x0.detach().requires_grad_(), xd = x0.to(kCuda).detach().requires_grad_();
  const Tensor lc = cross_entropy(xc, t0, red, -100, smoothing);
  const Tensor ld = cross_entropy(xd, t0.to(kCuda), red, -100, smoothing);
  autograd::backward({lc}, {up0});
  autograd::backward({ld}, {up0.to(kCuda)});
  const Tensor lcv = lc.to(kFloat64), ldv = ld.cpu().to(kFloat64);
  if (red == Reduction::Mean && static_cast<int64_t>(ignored.size()) == N) {
    CHECK(std::isnan(ldv.item<double>()));  // 0 / 0, as on the CPU and in PyTorch
    CHECK(std::isnan(lcv.item<double>()));
  } else {
    CHECK(allclose(ldv, lcv, tol, tol));
  }
  if (red != Reduction::Mean || static_cast<int64_t>(ignored.size()) < N)
    CHECK(allclose(xd.grad().cpu().to(kFloat64), xc.grad().to(kFloat64), tol, tol));
  for (int64_t r : ignored)  // no gradient reaches an ignored row
    CHECK(equal(xd.grad().cpu().select(0, r), zeros({C}, TensorOptions(dt))));
}

}  // namespace

TEST_CASE("cuda fused: cross_entropy's row kernels match the CPU") {
  if (!test::cuda_usable()) return;
  const Reduction reds[] = {Reduction::Mean, Reduction::Sum, Reduction::None};
  SUBCASE("float64: a warp per row, a block per row, ragged and unaligned rows") {
    // (N, C): one class; C odd, so rows start off 16-byte boundaries; just
    // below and above the warp/block switch at 4096; a GPT-2-like vocabulary.
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {3, 5},    {37, 33},
                                                             {9, 4096}, {5, 4097}, {3, 50257}};
    uint64_t seed = 100;
    for (auto [N, C] : shapes)
      for (Reduction r : reds) {
        check_cross_entropy(kFloat64, N, C, r, 0.0, {}, 1e-10, seed++);
        check_cross_entropy(kFloat64, N, C, r, 0.1, {}, 1e-10, seed++);
      }
  }
  SUBCASE("ignored rows, and a batch with every row ignored") {
    uint64_t seed = 200;
    for (Reduction r : reds) {
      check_cross_entropy(kFloat64, 6, 77, r, 0.0, {0, 4}, 1e-10, seed++);
      check_cross_entropy(kFloat64, 4, 5000, r, 0.2, {1}, 1e-10, seed++);
      check_cross_entropy(kFloat64, 3, 33, r, 0.0, {0, 1, 2}, 1e-10, seed++);
      check_cross_entropy(kFloat32, 3, 4100, r, 0.1, {0, 1, 2}, 1e-5, seed++);
    }
  }
  SUBCASE("float32 and bfloat16 (float32 math, the loss in float32 before its rounding)") {
    uint64_t seed = 300;
    for (Reduction r : reds) {
      check_cross_entropy(kFloat32, 50, 257, r, 0.0, {3}, 1e-5, seed++);
      check_cross_entropy(kFloat32, 2, 50257, r, 0.1, {}, 1e-5, seed++);
      check_cross_entropy(kBFloat16, 20, 129, r, 0.0, {7}, 2e-2, seed++);
      check_cross_entropy(kBFloat16, 2, 5003, r, 0.1, {}, 2e-2, seed++);
    }
  }
}

TEST_CASE("cuda fused: cross_entropy's backward is one launch, the mean's count divided inside it") {
  if (!test::cuda_usable()) return;
  Generator g(9);
  const Tensor t = from_vector(std::vector<int64_t>{3, -100, 0, 39, 7, -100}).to(kCuda);
  for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
    Tensor x = randn({6, 40}, {}, &g).to(kCuda).detach().requires_grad_();
    const Tensor loss = cross_entropy(x, t, red, -100, 0.1);
    const Tensor up = full({}, 2.0, TensorOptions(kCuda));
    const uint64_t l0 = profiler::device_launches();
    autograd::backward({loss}, {up});
    CHECK(profiler::device_launches() - l0 == 1);
    // Against the CPU: 4 rows take part, so the mean's rows get 2 / 4.
    Tensor xc = x.detach().cpu().requires_grad_();
    autograd::backward({cross_entropy(xc, t.cpu(), red, -100, 0.1)}, {full({}, 2.0)});
    CHECK(allclose(x.grad().cpu(), xc.grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("cuda fused: cross_entropy's forward reduces its rows in its own launch") {
  if (!test::cuda_usable()) return;
  Generator g(10);
  const Tensor x = randn({300, 40}, {}, &g), t = randint(0, 40, {300}, TensorOptions(kInt64), &g);
  const Tensor xd = x.to(kCuda), td = t.to(kCuda);
  auto launches = [&](Reduction red) {
    const uint64_t l0 = profiler::device_launches();
    const Tensor loss = cross_entropy(xd, td, red, -100, 0.1);
    return profiler::device_launches() - l0;
  };
  // The mean and the sum cost what the per-row losses cost: no sum, count
  // conversion or division launches of their own.
  CHECK(launches(Reduction::Mean) == launches(Reduction::None));
  // In all: the index check (one kernel, its result read back) and the loss.
  CHECK(launches(Reduction::Mean) == 3);
  CHECK(launches(Reduction::Sum) == launches(Reduction::None));
  for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
    const Tensor want = cross_entropy(x, t, red, -100, 0.1), got = cross_entropy(xd, td, red, -100, 0.1).cpu();
    CHECK(got.dim() == 0);
    CHECK(allclose(got, want, 1e-5, 1e-6));
    CHECK(equal(cross_entropy(xd, td, red, -100, 0.1).cpu(), got));  // the same bits again
  }
  // More rows than eight a thread of the last block: its loads run ahead of the sum.
  const Tensor xl = randn({5003, 40}, {}, &g), tl = randint(0, 40, {5003}, TensorOptions(kInt64), &g);
  for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
    const Tensor got = cross_entropy(xl.to(kCuda), tl.to(kCuda), red).cpu();
    CHECK(allclose(got, cross_entropy(xl, tl, red), 1e-5, 1e-5));
    CHECK(equal(cross_entropy(xl.to(kCuda), tl.to(kCuda), red).cpu(), got));
  }
}

TEST_CASE("cuda fused: a captured cross_entropy is two kernels, and checks its targets at every replay") {
  if (!test::cuda_usable()) return;
  Generator g(12);
  const Tensor logits = randn({50, 33}, {}, &g).to(kCuda);
  Tensor target = randint(0, 33, {50}, TensorOptions(kInt64), &g).to(kCuda);
  Tensor loss;
  CudaGraph graph;
  graph.capture(kCuda, [&] { loss = cross_entropy(logits, target, Reduction::Mean, -100, 0.1); });
  CHECK(graph.captured_launches() == 2);  // the index check, the loss with its mean
  graph.replay();
  CHECK(equal(loss.cpu(), cross_entropy(logits, target, Reduction::Mean, -100, 0.1).cpu()));
  target.copy_(from_vector(std::vector<int64_t>(50, -100)).to(kCuda));  // every row ignored: 0 / 0
  graph.replay();
  CHECK(std::isnan(loss.cpu().item<float>()));
  std::vector<int64_t> bad(50, 1);
  bad[17] = 33;
  target.copy_(from_vector(bad).to(kCuda));
  CHECK_THROWS_AS(graph.replay(), IndexError);
  target.copy_(from_vector(std::vector<int64_t>(50, 2)).to(kCuda));
  graph.replay();  // the device's words were set back: a good batch passes again
  CHECK(equal(loss.cpu(), cross_entropy(logits, target, Reduction::Mean, -100, 0.1).cpu()));
}
