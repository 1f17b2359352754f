// Tests of ops/linear_gelu: known answers in both GELU forms
// (tools/reference_linear_gelu.py, PyTorch 1.13, float64), bit-identity with
// linear then gelu on the CPU, float64 gradchecks, and the fused CUDA
// kernels (emulated here) against the CPU: odd sizes, leading dims, several
// row slices, frozen inputs, 16-bit under autocast, and the launches saved.
#include <doctest/doctest.h>
#include <ember/ember.h>

#include "test_util.h"

#include <string>
#include <vector>

using namespace ember;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         a.cpu().contiguous().to(kFloat32).to_vector<float>() == b.cpu().contiguous().to(kFloat32).to_vector<float>();
}

struct Result {
  Tensor y, dx, dw, db;
};

// y = linear_gelu (fused) or gelu(linear) (composed), and the gradients of sum(y * g).
Result run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, GeluApproximation a, bool fused,
           Device dev) {
  Tensor x = x0.to(dev).detach().requires_grad_(true), w = w0.to(dev).detach().requires_grad_(true);
  Tensor b = b0.defined() ? b0.to(dev).detach().requires_grad_(true) : Tensor();
  Tensor y = fused ? linear_gelu(x, w, b, a) : gelu(linear(x, w, b), a);
  (y * g.to(dev).to(y.dtype())).sum().backward();
  return {y, x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

}  // namespace

TEST_CASE("linear_gelu: known values and gradients in both forms, on every device") {
  const Tensor x = from_vector<double>({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {1, 2, 3});
  const Tensor w = from_vector<double>({0.2, -0.4, 0.6, -1.0, 0.5, 0.3}, {2, 3});
  const Tensor b = from_vector<double>({0.1, -0.2}, {2});
  const Tensor g = from_vector<double>({1.0, -2.0, 0.5, 3.0}, {1, 2, 2});
  struct Want {
    GeluApproximation a;
    std::vector<double> y, dx, dw, db;
  };
  // tools/reference_linear_gelu.py
  const Want wants[] = {
      {GeluApproximation::None,
       {1.7353254255967336, -0.16455187065004415, -0.0660573461444636, -0.06467457440326639},
       {0.36987270519572424, -0.5167903423464673, 0.619116965888214, 0.35666093828540846, -0.23551203034174037,
        0.01880115315225694},
       {0.8389977889095225, -1.058528664829487, 2.069406028659777, -0.5521282022440703, 0.0690017376584747,
        -0.058368500945436635},
       {1.2967851698254709, -0.4671766095160385}},
      {GeluApproximation::Tanh,
       {1.7352595268459299, -0.1645848007691852, -0.06605751016707387, -0.0647404731540702},
       {0.3703999596444524, -0.5172745192863544, 0.6194439989277462, 0.35886686940952656, -0.2366156468571315,
        0.018140805912352155},
       {0.839368626535388, -1.059263288086787, 2.070874732713267, -0.5556265586294384, 0.06883058467471337,
        -0.057474820689106476},
       {1.2975225053883213, -0.4697623279763147}},
  };
  std::vector<Device> devices{Device("cpu")};
  if (test::cuda_usable()) devices.emplace_back("cuda");
  for (const Device dev : devices)
    for (const Want& want : wants) {
      CAPTURE(dev.str());
      CAPTURE(gelu_approximation_name(want.a));
      const Result r = run(x, w, b, g, want.a, true, dev);
      CHECK(r.y.shape() == Shape{1, 2, 2});
      test::check_close(r.y.cpu(), want.y, 1e-12);
      test::check_close(r.dx.cpu(), want.dx, 1e-12);
      test::check_close(r.dw.cpu(), want.dw, 1e-12);
      test::check_close(r.db.cpu(), want.db, 1e-12);
    }
}

TEST_CASE("linear_gelu: on the CPU it is linear then gelu, bit for bit") {
  // k = 300 spans two of the GEMM's 256-deep blocks, where the order in
  // which the bias joins the sums would show.
  Generator gen(5);
  const Tensor x = randn({3, 5, 300}, {}, &gen), w = mul(randn({70, 300}, {}, &gen), 0.05), b = randn({70}, {}, &gen),
               g = randn({3, 5, 70}, {}, &gen);
  for (const GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
    CAPTURE(gelu_approximation_name(a));
    const Result f = run(x, w, b, g, a, true, Device("cpu")), c = run(x, w, b, g, a, false, Device("cpu"));
    CHECK(same_bits(f.y, c.y));
    CHECK(same_bits(f.dx, c.dx));
    CHECK(same_bits(f.dw, c.dw));
    CHECK(same_bits(f.db, c.db));
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    const Result fb = run(x, w, b, g, a, true, Device("cpu")), cb = run(x, w, b, g, a, false, Device("cpu"));
    CHECK(fb.y.dtype() == kBFloat16);
    CHECK(fb.dw.dtype() == kFloat32);
    CHECK(same_bits(fb.y, cb.y));
    CHECK(same_bits(fb.dw, cb.dw));
    CHECK(same_bits(fb.db, cb.db));
  }
}

TEST_CASE("linear_gelu: float64 gradcheck, with and without a bias") {
  Generator gen(9);
  const TensorOptions f64(kFloat64);
  const Tensor x = randn({2, 3, 4}, f64, &gen).requires_grad_(true), w = randn({5, 4}, f64, &gen).requires_grad_(true),
               b = randn({5}, f64, &gen).requires_grad_(true);
  for (const GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
    CAPTURE(gelu_approximation_name(a));
    const GradcheckResult r =
        gradcheck([a](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2], a); }, {x, w, b});
    CHECK_MESSAGE(r.ok, r.message);
    const GradcheckResult nb =
        gradcheck([a](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], Tensor(), a); }, {x, w});
    CHECK_MESSAGE(nb.ok, nb.message);
  }
}

TEST_CASE("linear_gelu: the fused CUDA kernels match the CPU (odd sizes, leading dims, row slices, frozen inputs)") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator gen(13);
  struct Case {
    Shape x;
    int64_t n;
    bool bias;
  };
  // (2, 3, 7) rows: one slice; 300 rows: five slices and column_sum_finish;
  // a 1-D input; no bias.
  const Case cases[] = {{{2, 3, 7, 13}, 45, true}, {{300, 9}, 37, true}, {{13}, 5, true}, {{4, 11, 6}, 33, false}};
  for (const DType dt : {kFloat64, kFloat32})
    for (const Case& c : cases)
      for (const GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(c.x.str());
        CAPTURE(gelu_approximation_name(a));
        const TensorOptions o(dt);
        const Tensor x = randn(c.x, o, &gen), w = randn({c.n, c.x[c.x.size() - 1]}, o, &gen);
        const Tensor b = c.bias ? randn({c.n}, o, &gen) : Tensor();
        Shape ys = c.x;
        ys[ys.size() - 1] = c.n;
        const Tensor g = randn(ys, o, &gen);
        const Result want = run(x, w, b, g, a, false, Device("cpu")), got = run(x, w, b, g, a, true, cuda);
        CHECK(got.y.device() == cuda);
        const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
        CHECK(allclose(got.y.cpu(), want.y, tol, tol));
        CHECK(allclose(got.dx.cpu(), want.dx, tol, tol));
        CHECK(allclose(got.dw.cpu(), want.dw, tol, tol));
        if (c.bias) CHECK(allclose(got.db.cpu(), want.db, tol, tol));
      }
  // Only the bias frozen, and only x needing a gradient.
  const Tensor x = randn({6, 8}, {}, &gen), w = randn({10, 8}, {}, &gen), b = randn({10}, {}, &gen);
  const Tensor xc = x.to(cuda).requires_grad_(true), wc = w.to(cuda).requires_grad_(true), bc = b.to(cuda);
  linear_gelu(xc, wc, bc).sum().backward();
  Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
  gelu(linear(xr, wr, b)).sum().backward();
  CHECK(allclose(xc.grad().cpu(), xr.grad(), 1e-5, 1e-5));
  CHECK(allclose(wc.grad().cpu(), wr.grad(), 1e-5, 1e-5));
  const Tensor xo = x.to(cuda).requires_grad_(true);
  linear_gelu(xo, w.to(cuda), b.to(cuda), GeluApproximation::Tanh).sum().backward();
  Tensor xs = x.clone().requires_grad_(true);
  gelu(linear(xs, w, b), GeluApproximation::Tanh).sum().backward();
  CHECK(allclose(xo.grad().cpu(), xs.grad(), 1e-5, 1e-5));
}

TEST_CASE("linear_gelu: 16-bit on CUDA, and under autocast with float32 parameters") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator gen(17);
  const Tensor x = randn({5, 7, 24}, {}, &gen), w = mul(randn({40, 24}, {}, &gen), 0.2), b = randn({40}, {}, &gen);
  const Tensor g = randn({5, 7, 40}, {}, &gen);
  const Result want = run(x, w, b, g, GeluApproximation::None, false, Device("cpu"));
  for (const DType low : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(low));
    const double tol = low == kBFloat16 ? 5e-2 : 1e-2;
    // 16-bit tensors outside a region.
    const Result h = run(x.to(low), w.to(low), b.to(low), g, GeluApproximation::None, true, cuda);
    CHECK(h.y.dtype() == low);
    CHECK(h.db.dtype() == low);
    CHECK(allclose(h.y.cpu().to(kFloat32), want.y, tol, tol));
    CHECK(allclose(h.db.cpu().to(kFloat32), want.db, tol, 4 * tol));
    // Autocast: float32 parameters, a 16-bit result, float32 gradients.
    AutocastGuard guard(DeviceType::CUDA, low);
    const Result r = run(x, w, b, g, GeluApproximation::None, true, cuda);
    CHECK(r.y.dtype() == low);
    CHECK(r.dw.dtype() == kFloat32);
    CHECK(r.db.dtype() == kFloat32);
    CHECK(allclose(r.y.cpu().to(kFloat32), want.y, tol, tol));
    CHECK(allclose(r.dx.cpu(), want.dx, tol, 4 * tol));
    CHECK(allclose(r.db.cpu(), want.db, tol, 4 * tol));
  }
}

TEST_CASE("linear_gelu: on CUDA the GEMM plus one kernel forward, one pass fewer backward") {
  if (!test::cuda_usable()) return;
  const Device cuda("cuda");
  Generator gen(19);
  // 512 rows: the column sums take two passes.
  const Tensor x = randn({512, 16}, {}, &gen).to(cuda), w = randn({24, 16}, {}, &gen).to(cuda),
               b = randn({24}, {}, &gen).to(cuda), g = randn({512, 24}, {}, &gen).to(cuda);
  auto count = [&](bool fused) {
    Tensor xr = x.detach().requires_grad_(true), wr = w.detach().requires_grad_(true),
           br = b.detach().requires_grad_(true);
    uint64_t l0 = profiler::device_launches();
    Tensor y = fused ? linear_gelu(xr, wr, br) : gelu(linear(xr, wr, br));
    const uint64_t forward = profiler::device_launches() - l0;
    l0 = profiler::device_launches();
    y.backward(g);
    return std::pair<uint64_t, uint64_t>(forward, profiler::device_launches() - l0);
  };
  auto composed = count(false), fused = count(true);
  // Composed: the bias copy, the GEMM, gelu. Fused: the GEMM, bias + gelu.
  CHECK(composed.first == 3);
  CHECK(fused.first == 2);
  // Backward: gelu's backward and the bias's two-pass column sum become one
  // pass with the sum's first half in it (plus the same two GEMMs).
  CHECK(fused.second + 1 == composed.second);
  // Under autocast the same, after the same three casts (x, weight, bias).
  AutocastGuard guard(DeviceType::CUDA, kBFloat16);
  composed = count(false), fused = count(true);
  CHECK(composed.first == 6);
  CHECK(fused.first == 5);
  CHECK(fused.second + 1 <= composed.second);
}

TEST_CASE("linear_gelu: errors name the op that refuses the operands") {
  const Tensor x = randn({2, 3}), w = randn({4, 5});
  CHECK(test::contains(test::error_of<ShapeError>([&] { (void)linear_gelu(x, w); }), "linear: input [2, 3]"));
  CHECK(test::contains(test::error_of<ShapeError>([&] {
                         (void)linear_gelu(x, randn({4, 3}), randn({3}));
                       }),
                       "linear: bias of shape [3]"));
  CHECK(test::contains(test::error_of<ValueError>([&] { (void)linear_gelu(Tensor(), w); }),
                       "linear_gelu: got an undefined tensor"));
}
