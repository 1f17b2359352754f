// The tests of the out-of-tree rms_norm op, written as a user of the
// installed Ember would write them (plain checks, no test framework):
//   1. a known answer worked out by hand;
//   2. the fused op against the same formula composed from Ember's ops,
//      forward and both gradients;
//   3. conformance rows, run by Ember's own harness (<ember/testing/
//      conformance.h>): float64 gradchecks with contiguous and
//      non-contiguous inputs, and device "cuda" against the CPU, forward and
//      backward (the SIMT emulator in the test build, a GPU in the nvcc
//      build);
//   4. bad input: errors name the op;
//   5. the RMSNorm layer in a short training run.
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
#include <ember/testing/conformance.h>

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

// The op's rows: every layout, every backend (rms_norm's backward keeps the
// CPU's tolerances on cuda: its row sums are over at most 300 elements).
void conformance_rows() {
  using namespace ember::testing;
  const std::vector<OpCase> rows = {
      {"rms_norm", {F({4, 7}), F({7})}, [](const In& x) { return rms_norm(x[0], x[1], 1e-3); }},
      {"rms_norm 3-D, wide rows", {F({3, 5, 300}), F({300})}, [](const In& x) { return rms_norm(x[0], x[1]); }},
      {"rms_norm gain fixed", {F({37, 40}), C({40})}, [](const In& x) { return rms_norm(x[0], x[1]); }},
  };
  const Report r = check_rows(rows);
  for (const std::string& note : r.notes) std::printf("conformance: %s\n", note.c_str());
  for (const std::string& f : r.failures) check(false, "conformance: " + f);
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
bool cuda_available(std::string& why) { return !ember::testing::other_backends(why).empty(); }

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
  run("conformance rows", conformance_rows);
  run("errors", errors);
  run("training", training);
  std::string why;
  if (cuda_available(why)) {
    std::printf("cuda checks ran\n");
  } else if (require_cuda) {
    check(false, "device cuda is required but unavailable: " + why);
  } else {
    std::printf("cuda checks skipped: %s\n", why.c_str());
  }
  std::printf(g_failures ? "%d check(s) failed\n" : "all checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}
