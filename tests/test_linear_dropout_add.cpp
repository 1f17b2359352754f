// Tests of ops/linear_dropout_add: known answers with a dropout mask and in
// eval mode (tools/reference_linear_dropout_add.py, PyTorch 1.13, float64),
// bit-identity with linear, dropout and add on the CPU (values, gradients,
// the generator's counters), float64 gradchecks, and the fused CUDA kernels
// (emulated here) against the CPU: the same masks, odd sizes, leading dims,
// row slices, frozen inputs, 16-bit and autocast with a float32 residual,
// and the launches saved.
#include <doctest/doctest.h>
#include <ember/ember.h>

#include "test_util.h"

#include <string>
#include <vector>

using namespace ember;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.cpu().contiguous().to(kFloat64).to_vector<double>() == b.cpu().contiguous().to(kFloat64).to_vector<double>();
}

struct Result {
  Tensor y, dx, dw, db, dr;
  double next;  // the generator's next draw after the op: the counters it took
};

// y = linear_dropout_add (fused) or add(r, dropout(linear)) (composed), with
// the mask from Generator(seed), and the gradients of sum(y * g).
Result run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& r0, const Tensor& g, double p,
           bool training, bool fused, Device dev, uint64_t seed = 21) {
  Tensor x = x0.to(dev).detach().requires_grad_(true), w = w0.to(dev).detach().requires_grad_(true);
  Tensor b = b0.defined() ? b0.to(dev).detach().requires_grad_(true) : Tensor();
  Tensor r = r0.to(dev).detach().requires_grad_(true);
  Generator gen(seed);
  Tensor y =
      fused ? linear_dropout_add(x, w, b, r, p, training, &gen) : add(r, dropout(linear(x, w, b), p, training, &gen));
  (y * g.to(dev).to(y.dtype())).sum().backward();
  const double next = rand({1}, {}, &gen).item<double>();
  return {y, x.grad(), w.grad(), b.defined() ? b.grad() : Tensor(), r.grad(), next};
}

bool close(const Tensor& a, const Tensor& b, double tol) {
  return a.shape() == b.shape() && allclose(a.cpu().to(kFloat64), b.cpu().to(kFloat64), tol, tol);
}

}  // namespace

TEST_CASE("linear_dropout_add: known values and gradients, with a mask and in eval mode, on every device") {
  const Tensor x = from_vector<double>({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {1, 2, 3});
  const Tensor w = from_vector<double>({0.2, -0.4, 0.6, -1.0, 0.5, 0.3, 0.7, 0.1, -0.2, 0.05, -0.3, 0.9}, {4, 3});
  const Tensor b = from_vector<double>({0.1, -0.2, 0.3, -0.4}, {4});
  const Tensor r = from_vector<double>({1.0, 2.0, -3.0, 0.5, -0.25, 0.75, 1.5, -2.0}, {1, 2, 4});
  const Tensor g = from_vector<double>({1.0, -2.0, 0.5, 3.0, -1.5, 0.25, 2.0, -0.5}, {1, 2, 4});
  // The mask the reference applies is dropout's from Generator(21).
  Generator mg(21);
  test::check_close(dropout(ones({1, 2, 4}, kFloat64), 0.5, true, &mg), {0, 0, 2, 0, 2, 2, 0, 0}, 0);
  struct Want {
    bool training;
    std::vector<double> y, dx, dw, db;
  };
  // tools/reference_linear_dropout_add.py
  const Want wants[] = {
      {true,
       {1.0, 2.0, -2.7, 0.5, -0.5499999999999998, -2.85, 1.5, -2.0},
       {0.7, 0.1, -0.2, -1.1, 1.4500000000000002, -1.65},
       {-4.5, -0.75, 2.25, 0.75, 0.125, -0.375, 0.5, -1.0, 2.0, 0.0, 0.0, 0.0},
       {-3.0, 0.5, 1.0, 0.0}},
      {false,
       {2.8, 1.4, -2.85, 2.225, -0.3999999999999999, -1.05, 3.0249999999999995, -3.075},
       {2.7, -2.25, 2.6, 0.8249999999999998, 1.075, -1.675},
       {-1.75, -1.375, 3.125, -0.625, 2.0625, -4.1875, 3.25, 0.0, -0.5, 0.75, -3.125, 6.375},
       {-0.5, -1.75, 2.5, 2.5}},
  };
  std::vector<Device> devices{Device("cpu")};
  if (test::cuda_usable()) devices.emplace_back("cuda");
  for (const Device dev : devices)
    for (const Want& want : wants) {
      CAPTURE(dev.str());
      CAPTURE(want.training);
      const Result res = run(x, w, b, r, g, 0.5, want.training, true, dev);
      CHECK(res.y.shape() == Shape{1, 2, 4});
      test::check_close(res.y.cpu(), want.y, 1e-12);
      test::check_close(res.dx.cpu(), want.dx, 1e-12);
      test::check_close(res.dw.cpu(), want.dw, 1e-12);
      test::check_close(res.db.cpu(), want.db, 1e-12);
      test::check_close(res.dr.cpu(), g.flatten().to_vector<double>(), 0);
    }
}

TEST_CASE("linear_dropout_add: on the CPU it is linear, dropout and add, bit for bit") {
  // k = 300 spans two of the GEMM's 256-deep blocks, where the order in
  // which the bias joins the sums would show.
  Generator gen(5);
  const Tensor x = randn({3, 5, 300}, {}, &gen), w = mul(randn({70, 300}, {}, &gen), 0.05), b = randn({70}, {}, &gen),
               r = randn({3, 5, 70}, {}, &gen), g = randn({3, 5, 70}, {}, &gen);
  const Device cpu("cpu");
  struct Mode {
    double p;
    bool training;
  };
  for (const Mode m : {Mode{0.1, true}, Mode{0.0, true}, Mode{0.3, false}}) {
    CAPTURE(m.p);
    CAPTURE(m.training);
    const Result f = run(x, w, b, r, g, m.p, m.training, true, cpu),
                 c = run(x, w, b, r, g, m.p, m.training, false, cpu);
    CHECK(same_bits(f.y, c.y));
    CHECK(same_bits(f.dx, c.dx));
    CHECK(same_bits(f.dw, c.dw));
    CHECK(same_bits(f.db, c.db));
    CHECK(same_bits(f.dr, c.dr));
    CHECK(f.next == c.next);
    // Autocast: a bfloat16 product over a float32 residual makes a float32
    // sum, as add makes it; a bfloat16 residual a bfloat16 one.
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    for (const DType rd : {kFloat32, kBFloat16}) {
      CAPTURE(dtype_name(rd));
      const Tensor rr = r.to(rd);
      const Result fb = run(x, w, b, rr, g, m.p, m.training, true, cpu),
                   cb = run(x, w, b, rr, g, m.p, m.training, false, cpu);
      CHECK(fb.y.dtype() == rd);
      CHECK(fb.dw.dtype() == kFloat32);
      CHECK(same_bits(fb.y, cb.y));
      CHECK(same_bits(fb.dx, cb.dx));
      CHECK(same_bits(fb.dw, cb.dw));
      CHECK(same_bits(fb.db, cb.db));
      CHECK(same_bits(fb.dr, cb.dr));
    }
  }
}

TEST_CASE("linear_dropout_add: float64 gradcheck, with and without a bias and a mask") {
  Generator gen(9);
  const TensorOptions f64(kFloat64);
  const Tensor x = randn({2, 3, 4}, f64, &gen).requires_grad_(true), w = randn({5, 4}, f64, &gen).requires_grad_(true),
               b = randn({5}, f64, &gen).requires_grad_(true), r = randn({2, 3, 5}, f64, &gen).requires_grad_(true);
  for (const double p : {0.0, 0.4}) {
    CAPTURE(p);
    // A generator per call: every evaluation draws the same mask.
    const GradcheckResult with_bias = gradcheck(
        [p](const std::vector<Tensor>& in) {
          Generator g(3);
          return linear_dropout_add(in[0], in[1], in[2], in[3], p, true, &g);
        },
        {x, w, b, r});
    CHECK_MESSAGE(with_bias.ok, with_bias.message);
    const GradcheckResult no_bias = gradcheck(
        [p](const std::vector<Tensor>& in) {
          Generator g(3);
          return linear_dropout_add(in[0], in[1], Tensor(), in[2], p, true, &g);
        },
        {x, w, r});
    CHECK_MESSAGE(no_bias.ok, no_bias.message);
  }
}

TEST_CASE("linear_dropout_add: the fused CUDA kernels match the CPU (masks, odd sizes, row slices, frozen inputs)") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda"), cpu("cpu");
  Generator gen(13);
  struct Case {
    Shape x;
    int64_t n;
    bool bias;
  };
  // (2, 3, 7) rows: one slice; 300 rows: five slices and column_sum_finish;
  // a 1-D input (an odd count of elements: a Philox counter's words left
  // over); no bias.
  const Case cases[] = {{{2, 3, 7, 13}, 45, true}, {{300, 9}, 37, true}, {{13}, 5, true}, {{4, 11, 6}, 33, false}};
  for (const DType dt : {kFloat64, kFloat32})
    for (const Case& c : cases)
      for (const double p : {0.0, 0.3}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(c.x.str());
        CAPTURE(p);
        const TensorOptions o(dt);
        const Tensor x = randn(c.x, o, &gen), w = randn({c.n, c.x[c.x.size() - 1]}, o, &gen);
        const Tensor b = c.bias ? randn({c.n}, o, &gen) : Tensor();
        Shape ys = c.x;
        ys[ys.size() - 1] = c.n;
        const Tensor r = randn(ys, o, &gen), g = randn(ys, o, &gen);
        const Result want = run(x, w, b, r, g, p, true, false, cpu), got = run(x, w, b, r, g, p, true, true, cuda);
        CHECK(got.y.device() == cuda);
        const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
        CHECK(close(got.y, want.y, tol));  // a mask that differed would differ by O(1)
        CHECK(close(got.dx, want.dx, tol));
        CHECK(close(got.dw, want.dw, tol));
        if (c.bias) CHECK(close(got.db, want.db, tol));
        CHECK(same_bits(got.dr, want.dr));
        CHECK(got.next == want.next);  // the same counters taken
      }
  // Only the bias frozen; only x needing a gradient; only the residual.
  const Tensor x = randn({6, 8}, {}, &gen), w = randn({10, 8}, {}, &gen), b = randn({10}, {}, &gen),
               r = randn({6, 10}, {}, &gen);
  for (const int frozen : {0, 1, 2}) {
    CAPTURE(frozen);
    Tensor xc = x.to(cuda).requires_grad_(true), wc = w.to(cuda).requires_grad_(frozen == 0),
           rc = r.to(cuda).requires_grad_(frozen == 2);
    if (frozen == 2) xc = x.to(cuda);
    Generator g1(4), g2(4);
    square(linear_dropout_add(xc, wc, b.to(cuda), rc, 0.25, true, &g1)).sum().backward();
    Tensor xr = x.clone().requires_grad_(frozen != 2), wr = w.clone().requires_grad_(frozen == 0),
           rr = r.clone().requires_grad_(frozen == 2);
    square(add(rr, dropout(linear(xr, wr, b), 0.25, true, &g2))).sum().backward();
    if (frozen != 2) CHECK(close(xc.grad(), xr.grad(), 1e-5));
    if (frozen == 0) CHECK(close(wc.grad(), wr.grad(), 1e-5));
    if (frozen == 2) CHECK(close(rc.grad(), rr.grad(), 1e-5));
  }
}

TEST_CASE("linear_dropout_add: 16-bit on CUDA, and autocast over a float32 residual") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda"), cpu("cpu");
  Generator gen(17);
  const Tensor x = randn({5, 7, 24}, {}, &gen), w = mul(randn({40, 24}, {}, &gen), 0.2), b = randn({40}, {}, &gen);
  const Tensor r = randn({5, 7, 40}, {}, &gen), g = randn({5, 7, 40}, {}, &gen);
  const Result want = run(x, w, b, r, g, 0.2, true, false, cpu);
  // Where the mask dropped an element the sum is the residual exactly
  // (kept ones differ from it by O(1), which the tolerances see).
  const Tensor dropped = eq(want.y, r).to(kFloat32);
  REQUIRE(sum(dropped).item<float>() > 0);
  auto drops_there = [&](const Tensor& y, const Tensor& res) {
    return sum(mul(dropped, abs(sub(y.cpu().to(kFloat32), res.to(kFloat32))))).item<float>() == 0;
  };
  for (const DType low : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(low));
    const double tol = low == kBFloat16 ? 5e-2 : 1e-2;
    // 16-bit tensors outside a region: the CPU's composed ops, to the product's rounding.
    const Result h = run(x.to(low), w.to(low), b.to(low), r.to(low), g, 0.2, true, true, cuda);
    const Result hc = run(x.to(low), w.to(low), b.to(low), r.to(low), g, 0.2, true, false, cpu);
    CHECK(h.y.dtype() == low);
    CHECK(h.db.dtype() == low);
    CHECK(close(h.y, hc.y, tol));
    CHECK(close(h.y, want.y, 2 * tol));
    CHECK(close(h.db, want.db, 4 * tol));
    CHECK(close(h.dx, hc.dx, tol));
    CHECK(drops_there(h.y, r.to(low)));
    // Autocast: float32 parameters and residual, a 16-bit product, a float32
    // sum (as add makes it), float32 gradients; the residual's is dout.
    AutocastGuard guard(DeviceType::CUDA, low);
    const Result a = run(x, w, b, r, g, 0.2, true, true, cuda);
    const Result ac = run(x, w, b, r, g, 0.2, true, false, cuda);
    CHECK(a.y.dtype() == kFloat32);
    CHECK(a.dw.dtype() == kFloat32);
    CHECK(a.db.dtype() == kFloat32);
    CHECK(same_bits(a.dr, g));
    CHECK(close(a.y, ac.y, tol));
    CHECK(close(a.y, want.y, 2 * tol));
    CHECK(close(a.dx, want.dx, 4 * tol));
    CHECK(close(a.db, ac.db, tol));
    CHECK(drops_there(a.y, r));
  }
}

TEST_CASE("linear_dropout_add: a CUDA graph's replays draw the eager op's masks and advance the generator") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator init(23);
  const Tensor x = randn({6, 8}, TensorOptions(cuda), &init), w = randn({12, 8}, TensorOptions(cuda), &init),
               b = randn({12}, TensorOptions(cuda), &init), r = randn({6, 12}, TensorOptions(cuda), &init);
  Generator eager_gen(5), graph_gen(5);
  Tensor y;
  CudaGraph graph;
  graph.capture(cuda, [&] { y = linear_dropout_add(x, w, b, r, 0.4, true, &graph_gen); });
  CHECK(graph_gen.offset() == eager_gen.offset());  // capturing draws nothing
  for (int i = 0; i < 3; ++i) {
    const Tensor ye = linear_dropout_add(x, w, b, r, 0.4, true, &eager_gen);
    graph.replay();
    INFO("replay " << i);
    CHECK(same_bits(y, ye));
    CHECK(graph_gen.offset() == eager_gen.offset());
  }
}

TEST_CASE("linear_dropout_add: on CUDA the GEMM plus one kernel forward, one pass fewer backward") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator gen(19);
  // 512 rows: the column sums take two passes.
  const Tensor x = randn({512, 16}, {}, &gen).to(cuda), w = randn({24, 16}, {}, &gen).to(cuda),
               b = randn({24}, {}, &gen).to(cuda), r = randn({512, 24}, {}, &gen).to(cuda),
               g = randn({512, 24}, {}, &gen).to(cuda);
  auto count = [&](bool fused, double p) {
    Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true),
           br = b.detach().requires_grad_(true), rr = r.detach().requires_grad_(true);
    uint64_t l0 = profiler::device_launches();
    Tensor y = fused ? linear_dropout_add(xr, wr, br, rr, p) : add(rr, dropout(linear(xr, wr, br), p));
    const uint64_t forward = profiler::device_launches() - l0;
    l0 = profiler::device_launches();
    y.backward(g);
    return std::pair<uint64_t, uint64_t>(forward, profiler::device_launches() - l0);
  };
  // Composed: the bias copy, the GEMM, dropout, add. Fused: the GEMM, one pass.
  auto composed = count(false, 0.1), fused = count(true, 0.1);
  CHECK(composed.first == 4);
  CHECK(fused.first == 2);
  // Backward: dropout's backward and the bias's two-pass column sum become
  // one pass with the sum's first half in it (plus the same two GEMMs).
  CHECK(fused.second + 1 == composed.second);
  // Without dropout: the bias copy and the add gone forward.
  composed = count(false, 0.0), fused = count(true, 0.0);
  CHECK(composed.first == 3);
  CHECK(fused.first == 2);
  CHECK(fused.second == composed.second);
}

TEST_CASE("linear_dropout_add: errors name the op that refuses the operands") {
  const Tensor x = randn({2, 3}), w = randn({4, 5});
  CHECK(test::contains(test::error_of<ShapeError>([&] {
                         (void)linear_dropout_add(x, w, Tensor(), randn({2, 4}), 0.1);
                       }),
                       "linear: input [2, 3]"));
  CHECK(test::contains(test::error_of<ValueError>([&] {
                         (void)linear_dropout_add(x, randn({4, 3}), Tensor(), randn({2, 4}), 1.5);
                       }),
                       "linear_dropout_add: dropout probability has to be between 0 and 1, got 1.5"));
  CHECK(test::contains(test::error_of<ValueError>([&] {
                         (void)linear_dropout_add(x, randn({4, 3}), Tensor(), Tensor(), 0.1);
                       }),
                       "linear_dropout_add: got an undefined tensor"));
  CHECK(test::contains(test::error_of<ShapeError>([&] {
                         (void)linear_dropout_add(x, randn({4, 3}), Tensor(), randn({3, 4}), 0.1);
                       }),
                       "add"));
}
