// The autograd engine: accumulation, broadcasting, retain_graph, freed
// graphs, in-place detection, needed-only gradients, retain_grad, graph
// lifetime, and a user-defined op made through the public path, with its
// failure paths (no kernel, no backward, a forgotten gradient).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

using test::contains;
using test::error_of;

TEST_CASE("autograd: scalar backward, explicit gradient, non-scalar error") {
  Tensor x = tensor({1, 2, 3}).requires_grad_();
  Tensor y = mul(x, x);
  sum(y).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});

  Tensor x2 = tensor({1, 2, 3}).requires_grad_();
  mul(x2, 3.0).backward(tensor({1, 0, 2}));
  CHECK(x2.grad().to_vector<float>() == std::vector<float>{3, 0, 6});

  Tensor x3 = tensor({1, 2, 3}).requires_grad_();
  const std::string msg = error_of<AutogradError>([&] { mul(x3, 2.0).backward(); });
  CHECK(contains(msg, "one-element"));
  CHECK(contains(msg, "[3]"));
  CHECK(contains(error_of<AutogradError>([] { tensor({1.0}).backward(); }), "does not require grad"));
}

TEST_CASE("autograd: accumulation over paths and over backward calls") {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = add(mul(x, x), x);  // dy/dx = 2x + 1 = 5
  y.backward(Tensor(), /*retain_graph=*/true);
  CHECK(x.grad().item<float>() == 5.0f);
  y.backward();
  CHECK(x.grad().item<float>() == 10.0f);
  x.zero_grad();
  CHECK(!x.grad().defined());
}

TEST_CASE("autograd: broadcast gradients are summed back to each input's shape") {
  Tensor a = ones({3, 1}).requires_grad_();
  Tensor b = ones({4}).requires_grad_();
  sum(mul(add(a, b), 2.0)).backward();
  CHECK(a.grad().shape() == Shape{3, 1});
  CHECK(b.grad().shape() == Shape{4});
  CHECK(a.grad().to_vector<float>() == std::vector<float>{8, 8, 8});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{6, 6, 6, 6});
}

TEST_CASE("autograd: detach and NoGradGuard record nothing") {
  Tensor x = tensor({1, 2}).requires_grad_();
  CHECK(!x.detach().requires_grad());
  {
    NoGradGuard guard;
    Tensor y = mul(x, 2.0);
    CHECK(!y.requires_grad());
    CHECK(!y.grad_fn());
  }
  CHECK(mul(x, 2.0).requires_grad());
  CHECK(std::string(mul(x, 2.0).grad_fn()->name()) == "mul");
}

TEST_CASE("autograd: a second backward through a freed graph names the node") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward();
  const std::string msg = error_of<AutogradError>([&] { y.backward(); });
  CHECK(contains(msg, "second time"));
  CHECK(contains(msg, "sum"));
}

TEST_CASE("autograd: a saved tensor modified in place is detected and the op named") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor a = mul(x, 1.0);
  Tensor b = mul(a, a);  // saves a
  {
    NoGradGuard guard;
    add_(a, 1.0);
  }
  const std::string msg = error_of<AutogradError>([&] { sum(b).backward(); });
  CHECK(contains(msg, "'mul'"));
  CHECK(contains(msg, "modified by an in-place operation"));
  // In-place on a tensor that requires grad, with grad mode on, is refused.
  CHECK(contains(error_of<AutogradError>([&] { add_(x, 1.0); }), "in-place"));
}

TEST_CASE("autograd: retain_grad keeps a non-leaf's gradient") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor h = mul(x, 3.0);
  h.retain_grad();
  sum(mul(h, h)).backward();
  CHECK(h.grad().to_vector<float>() == std::vector<float>{6, 12});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{18, 36});
}

TEST_CASE("autograd: the graph is freed after backward, and when never run") {
  std::weak_ptr<autograd::Node> node;
  {
    Tensor x = randn({3}).requires_grad_();
    Tensor y = sum(mul(exp(x), 2.0));
    node = y.grad_fn();
    CHECK(!node.expired());
  }
  CHECK(node.expired());  // dropped without ever calling backward
  Tensor x = randn({3}).requires_grad_();
  {
    Tensor y = sum(exp(x));
    node = y.grad_fn();
    y.backward();
  }
  CHECK(node.expired());
  CHECK(x.grad().defined());
}

// ---- a user-defined op, made exactly as built-in ops are ---------------------
namespace {

// cube(x) = x^3, with its own kernel table and CPU kernel.
KernelTable<void(const Tensor& x, Tensor& out)> cube_kernel("cube");

void cube_cpu(const Tensor& x, Tensor& out) {
  dispatch_floating(x.dtype(), "cube", [&](auto tag) {
    using T = decltype(tag);
    const Tensor xc = x.contiguous();
    const T* p = static_cast<const T*>(xc.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = p[i] * p[i] * p[i];
  });
}
EMBER_REGISTER_KERNEL(cube_kernel, CPU, cube_cpu);

std::vector<bool> g_needed;  // what the backward was asked to compute

Tensor cube(const Tensor& x) {
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
  cube_kernel(x.device(), x, out);
  if (autograd::needs_grad({x}))
    autograd::record("cube", {x}, out, [sx = autograd::SavedTensor(x)](autograd::BackwardContext& ctx) {
      ctx.set_grad(0, mul(ctx.grad_output(), mul(square(sx.get()), 3.0)));  // d x^3 = 3 x^2
    });
  return out;
}

// weighted(a, b) = a * b, recording which input gradients were requested.
Tensor weighted(const Tensor& a, const Tensor& b) {
  Tensor out = mul(a.detach(), b.detach());
  if (autograd::needs_grad({a, b}))
    autograd::record("weighted", {a, b}, out,
                     [sa = autograd::SavedTensor(a), sb = autograd::SavedTensor(b)](autograd::BackwardContext& ctx) {
                       g_needed = {ctx.needs_grad(0), ctx.needs_grad(1)};
                       if (ctx.needs_grad(0)) ctx.set_grad(0, mul(ctx.grad_output(), sb.get()));
                       if (ctx.needs_grad(1)) ctx.set_grad(1, mul(ctx.grad_output(), sa.get()));
                     });
  return out;
}

}  // namespace

TEST_CASE("autograd: a user-defined op passes gradcheck and names itself when a kernel is missing") {
  const Tensor x = randn({3, 4}, kFloat64).requires_grad_();
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return cube(in[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  const Tensor t = tensor({2.0});
  CHECK(cube(t).item<float>() == 8.0f);
  Tensor out;
  const std::string msg = error_of<DeviceError>([&] { cube_kernel(Device("cuda"), t, out); });
  CHECK(contains(msg, "cube: no kernel for device cuda:0"));
  CHECK(contains(msg, "EMBER_REGISTER_KERNEL"));
}

// ---- a user op's failure paths: each names the op, none loses a gradient -----
namespace {

// twice(x) = 2x, recorded without a backward.
Tensor twice_no_backward(const Tensor& x) {
  Tensor out = mul(x.detach(), 2.0);
  if (autograd::needs_grad({x})) autograd::record_no_backward("twice", {x}, {out});
  return out;
}

// a * b whose backward forgets b's gradient.
Tensor forgets_b(const Tensor& a, const Tensor& b) {
  Tensor out = mul(a.detach(), b.detach());
  if (autograd::needs_grad({a, b}))
    autograd::record("forgets_b", {a, b}, out, [sb = autograd::SavedTensor(b)](autograd::BackwardContext& ctx) {
      if (ctx.needs_grad(0)) ctx.set_grad(0, mul(ctx.grad_output(), sb.get()));
    });
  return out;
}

}  // namespace

TEST_CASE("autograd: an op without a backward runs forward and names itself when backward reaches it") {
  const Tensor x = tensor({1.0, 2.0}).requires_grad_();
  const Tensor y = twice_no_backward(x);
  CHECK(y.requires_grad());  // in the graph, like any op on an input that requires grad
  test::check_close(y, {2, 4}, 0);
  // A training step through it: the loss also depends on a later parameter w,
  // so without the node backward would succeed and leave x.grad() missing.
  const Tensor w = tensor({3.0}).requires_grad_();
  const std::string msg = error_of<AutogradError>([&] { sum(mul(y, w)).backward(); });
  CHECK(contains(msg, "backward of 'twice'"));
  CHECK(contains(msg, "no backward"));
  CHECK(!x.grad().defined());
  // Inference is unaffected, and under NoGradGuard nothing is recorded.
  NoGradGuard no_grad;
  CHECK(!twice_no_backward(x).requires_grad());
}

TEST_CASE("autograd: a backward that sets no gradient for an input needing one names the op and the input") {
  const Tensor a = tensor({1.0, 2.0}).requires_grad_();
  const Tensor b = tensor({3.0, 4.0}).requires_grad_();
  const std::string msg = error_of<AutogradError>([&] { sum(forgets_b(a, b)).backward(); });
  CHECK(contains(msg, "backward of 'forgets_b'"));
  CHECK(contains(msg, "input 1"));
  CHECK(contains(msg, "[2]"));
  // With b frozen the same backward is complete.
  const Tensor frozen = tensor({3.0, 4.0});
  sum(forgets_b(a, frozen)).backward();
  test::check_close(a.grad(), {3, 4}, 0);
}

TEST_CASE("autograd: backward on the output of an op that records nothing says what may be missing") {
  const Tensor x = tensor({1.0, 2.0}).requires_grad_();
  const Tensor y = mul(x.detach(), 2.0);  // what a user op forgetting autograd::record returns
  const std::string msg = error_of<AutogradError>([&] { sum(y).backward(); });
  CHECK(contains(msg, "does not require grad"));
  CHECK(contains(msg, "autograd::record"));
}

TEST_CASE("autograd: only inputs that need a gradient get one computed") {
  const Tensor w = randn({3});                   // frozen
  const Tensor x = randn({3}).requires_grad_();  // trained
  sum(weighted(w, x)).backward();
  CHECK(g_needed == std::vector<bool>{false, true});
  CHECK(!w.grad().defined());
  CHECK(allclose(x.grad(), w));
}

TEST_CASE("autograd: dtype rules for gradients") {
  Tensor i = tensor({1, 2}, kInt64);
  CHECK(contains(error_of<DTypeError>([&] { i.requires_grad_(); }), "floating"));
  // A float64 input mixed into a float32 op gets a float64 gradient.
  Tensor a = tensor({1, 2}, kFloat64).requires_grad_();
  Tensor b = tensor({3, 4}).requires_grad_();
  sum(mul(a, b)).backward();
  CHECK(a.grad().dtype() == kFloat64);
  CHECK(b.grad().dtype() == kFloat32);
}

TEST_CASE("autograd: post-accumulate-grad hooks see each leaf's finished gradient") {
  // y = w1 * x + w2 * (w1 * x): w1 is used twice, so its hook must run once,
  // after both paths delivered (dy/dw1 = x + w2 x = 3 * 2 = 6; dy/dw2 = w1 x = 2).
  Tensor w1 = tensor({1.0}).requires_grad_(), w2 = tensor({2.0}).requires_grad_();
  const Tensor x = tensor({2.0});
  std::vector<std::pair<std::string, double>> seen;
  const uint64_t h1 = autograd::register_post_accumulate_grad_hook(
      w1, [&](const Tensor& leaf) { seen.emplace_back("w1", leaf.grad().item()); });
  autograd::register_post_accumulate_grad_hook(
      w2, [&](const Tensor& leaf) { seen.emplace_back("w2", leaf.grad().item()); });
  Tensor a = mul(w1, x);
  add(a, mul(w2, a)).backward();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<std::pair<std::string, double>>{{"w1", 6.0}, {"w2", 2.0}});

  // A second backward without zero_grad: the hook sees the accumulated sum.
  seen.clear();
  add(mul(w1, x), mul(w2, mul(w1, x))).backward();
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<std::pair<std::string, double>>{{"w1", 12.0}, {"w2", 4.0}});

  // Removed hooks stop; an unknown id is reported.
  CHECK(autograd::remove_post_accumulate_grad_hook(w1, h1));
  CHECK_FALSE(autograd::remove_post_accumulate_grad_hook(w1, h1));
  seen.clear();
  mul(w1, x).backward();
  CHECK(seen.empty());
  CHECK(w1.grad().item() == 14.0);

  // Only leaves that require grad take hooks.
  const auto noop = [](const Tensor&) {};
  CHECK(
      contains(error_of<AutogradError>([&] { autograd::register_post_accumulate_grad_hook(a, noop); }), "not a leaf"));
  CHECK(contains(error_of<AutogradError>([&] { autograd::register_post_accumulate_grad_hook(tensor({1.0}), noop); }),
                 "requires_grad false"));
}

// A weight used as an embedding table and as the output projection (GPT's
// tied head): its gradient is the projection's plus the looked-up rows',
// and the rows are added into the projection's gradient rather than into a
// second table-sized buffer.
TEST_CASE("autograd: a tied embedding adds its rows into the projection's gradient") {
  const int64_t V = 4096, D = 256;
  const Tensor idx = from_vector(std::vector<int64_t>{1, 3, 1, 4095, 7, 3, 0, 1}).view({8});
  const Tensor c = randn({8, V});
  Tensor w = mul(randn({V, D}), 0.02).requires_grad_();
  const Tensor loss = sum(mul(linear(embedding(w, idx), w), c));
  reset_peak_memory_stats();
  const size_t base = memory_stats().allocated;
  loss.backward();
  const size_t table_bytes = static_cast<size_t>(V * D) * sizeof(float);
  CHECK(memory_stats().peak_allocated - base < table_bytes + table_bytes / 4);  // one table-sized gradient

  // The two uses' gradients taken separately, in float64.
  Tensor w64 = w.detach().to(DType::Float64);
  Tensor a = w64.clone().requires_grad_(), b = w64.clone().requires_grad_();
  const Tensor c64 = c.to(DType::Float64);
  sum(mul(linear(embedding(a, idx), b), c64)).backward();
  const std::vector<double> want = add(a.grad(), b.grad()).to_vector<double>();
  const std::vector<float> got = w.grad().to_vector<float>();
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  CHECK(worst < 1e-5);
  // Row 1 is looked up three times: its gradient holds all three and the projection's part.
  CHECK(std::abs(got[D + 5] - want[D + 5]) < 1e-5);
}
