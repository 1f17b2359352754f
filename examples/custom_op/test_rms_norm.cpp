// The tests of the out-of-tree rms_norm op, written as a user of the
// installed Ember would write them (plain checks, no test framework):
//   1. a known answer worked out by hand;
//   2. the fused op against the same formula composed from Ember's ops,
//      forward and both gradients;
//   3. a float64 gradcheck on the CPU, contiguous and non-contiguous input;
//   4. bad input: errors name the op;
//   5. device "cuda" against the CPU, forward and backward, float32 and
//      float64 (the SIMT emulator in the test build, a GPU in the nvcc build);
//   6. the RMSNorm layer in a short training run.
// Exits 0 when every check passes. With --require-cuda a missing CUDA
// device is a failure (the emulated build always has one); without it, the
// CUDA checks are skipped with the reason (an nvcc build on a machine
// without a GPU).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "rms_norm.h"

using namespace ember;
using myops::rms_norm;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

// The largest |a - b| relative to (atol + rtol |b|); <= 1 means close.
double worst(const Tensor& a, const Tensor& b, double rtol, double atol) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return INFINITY;
  double w = 0;
  for (size_t i = 0; i < x.size(); ++i) w = std::max(w, std::fabs(x[i] - y[i]) / (atol + rtol * std::fabs(y[i])));
  return w;
}

void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  const double w = worst(got, want, rtol, atol);
  check(w <= 1, what + " (worst error " + std::to_string(w) + " of the tolerance)");
}

// The same function from Ember's built-in ops (autograd differentiates it).
Tensor rms_norm_composed(const Tensor& x, const Tensor& w, double eps) {
  return mul(mul(x, rsqrt(add(mean(square(x), {-1}, /*keepdim=*/true), eps))), w);
}

void known_answer() {
  // Row 1: mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5, rstd = 1/sqrt(7.5).
  // Row 2: mean(x^2) = 0.5, rstd = sqrt(2).
  const Tensor x = tensor({{1, 2, 3, 4}, {0, -1, 0, 1}}, kFloat64);
  const Tensor w = tensor({1, 0.5, 2, -1}, kFloat64);
  const double r1 = 0.3651483716701107, r2 = 1.4142135623730951;
  const Tensor want = tensor({{r1, 2 * r1 * 0.5, 3 * r1 * 2, -4 * r1}, {0, -r2 * 0.5, 0, -r2}}, kFloat64);
  check_close(rms_norm(x, w, 0.0), want, 1e-15, 1e-15, "known answer");
}

void against_composed() {
  manual_seed(1);
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x0 = randn({3, 5, 40}, dt), w0 = randn({40}, dt), g = randn({3, 5, 40}, dt);
    const Tensor x1 = x0.clone().requires_grad_(), w1 = w0.clone().requires_grad_();
    const Tensor x2 = x0.clone().requires_grad_(), w2 = w0.clone().requires_grad_();
    const Tensor y1 = rms_norm(x1, w1, 1e-5), y2 = rms_norm_composed(x2, w2, 1e-5);
    y1.backward(g);
    y2.backward(g);
    const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
    const std::string name = std::string("vs composed ops, ") + dtype_name(dt);
    check_close(y1, y2, tol, tol, name + ": forward");
    check_close(x1.grad(), x2.grad(), tol, tol, name + ": dx");
    check_close(w1.grad(), w2.grad(), tol, tol, name + ": dw");
  }
}

void gradchecks() {
  manual_seed(2);
  const auto fn = [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-3); };
  const Tensor x = randn({4, 7}, kFloat64).requires_grad_();
  const Tensor w = randn({7}, kFloat64).requires_grad_();
  GradcheckResult r = gradcheck(fn, {x, w});
  check(r.ok, "gradcheck, contiguous: " + r.message);
  // A transposed (non-contiguous) input: the op makes it contiguous itself.
  const Tensor xt = randn({7, 4}, kFloat64).requires_grad_();
  r = gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0].t(), in[1], 1e-3); }, {xt, w});
  check(r.ok, "gradcheck, transposed input: " + r.message);
}

void errors() {
  const Tensor x = randn({2, 3});
  try {
    rms_norm(x, ones({4}));
    check(false, "a weight of the wrong shape is refused");
  } catch (const ShapeError& e) {
    check(std::string(e.what()).find("rms_norm: weight of shape [4]") == 0, std::string("shape error: ") + e.what());
  }
  try {
    rms_norm(ones({2, 3}, kInt64), ones({3}));
    check(false, "an int64 input is refused");
  } catch (const DTypeError& e) {
    check(std::string(e.what()).find("rms_norm") == 0, std::string("dtype error: ") + e.what());
  }
}

// Whether device "cuda" exists in this program; the reason when it does not.
bool cuda_available(std::string& why) {
  try {
    (void)empty({1}, TensorOptions(Device("cuda")));
    return true;
  } catch (const DeviceError& e) {
    why = e.what();
    return false;
  }
}

void cuda_vs_cpu() {
  manual_seed(3);
  const Device cuda("cuda");
  // 37 rows and N = 300: more than one pass of a 128-thread block, and a tail.
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = randn({37, 300}, dt), w = randn({300}, dt), g = randn({37, 300}, dt);
    const Tensor xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
    const Tensor xd = x.to(cuda).requires_grad_(), wd = w.to(cuda).requires_grad_();
    const Tensor yc = rms_norm(xc, wc), yd = rms_norm(xd, wd);
    check(yd.device() == cuda, "the output stays on cuda");
    yc.backward(g);
    yd.backward(g.to(cuda));
    const double tol = dt == kFloat64 ? 1e-12 : 2e-5;
    const std::string name = std::string("cuda vs cpu, ") + dtype_name(dt);
    check_close(yd.cpu(), yc, tol, tol, name + ": forward");
    check_close(xd.grad().cpu(), xc.grad(), tol, tol, name + ": dx");
    check_close(wd.grad().cpu(), wc.grad(), tol, tol, name + ": dw");
  }
}

// y = sum of the inputs, through Linear -> RMSNorm -> Linear, 200 Adam steps.
void training() {
  manual_seed(4);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(8, 32));
  model->push_back(std::make_shared<myops::RMSNorm>(32));
  model->push_back(std::make_shared<nn::Linear>(32, 1));
  optim::Adam opt(model->parameters(), {0.01});
  const Tensor x = randn({64, 8});
  const Tensor y = sum(x, {1}, /*keepdim=*/true);
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss((*model)(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  const auto named = model->named_parameters();
  check(named.size() == 5 && named[2].first == "1.weight", "RMSNorm's gain is a named parameter");
  check(named[2].second.grad().defined(), "the gain receives a gradient");
  check(last < first / 20, "training: the loss fell from " + std::to_string(first) + " to " + std::to_string(last));
}

}  // namespace

// Runs one group of checks; an exception (a kernel the emulator rejects, a
// shape error) fails the group instead of ending the program.
void run(const char* name, void (*checks)()) {
  try {
    checks();
  } catch (const std::exception& e) {
    check(false, std::string(name) + " threw: " + e.what());
  }
}

int main(int argc, char** argv) {
  const bool require_cuda = argc > 1 && std::strcmp(argv[1], "--require-cuda") == 0;
  run("known answer", known_answer);
  run("against composed ops", against_composed);
  run("gradcheck", gradchecks);
  run("errors", errors);
  run("training", training);
  std::string why;
  if (cuda_available(why)) {
    run("cuda vs cpu", cuda_vs_cpu);
    std::printf("cuda checks ran\n");
  } else if (require_cuda) {
    check(false, "device cuda is required but unavailable: " + why);
  } else {
    std::printf("cuda checks skipped: %s\n", why.c_str());
  }
  std::printf(g_failures ? "%d check(s) failed\n" : "all checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}
