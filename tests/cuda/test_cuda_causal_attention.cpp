// Causal attention's CUDA kernels (cuda/causal_attention.cu) on device
// "cuda" (the SIMT emulator here): the fused forward and backward against
// the CPU's fused kernel in float32 and float64, with dropout (the same mask
// as the CPU, drawn again identically in backward: a float64 gradcheck
// through the device), one query, ragged query and key tiles, several
// heads, head dims up to the limit, and the composed path beyond it. The
// profiler shows which path ran. Shapes stay small: the emulator runs every
// CUDA thread as a fiber.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/ops/copy.h>

using namespace ember;

namespace {
const Device kCuda("cuda");

// Whether a CUDA backend is linked and has a device (the emulator has one
// unless EMBER_EMU_DEVICES=0).
bool have_cuda() {
  if (!cross_device_copy_kernel.has(DeviceType::CUDA)) return false;
  try {
    (void)empty({1}, TensorOptions(kCuda));
  } catch (const DeviceError&) {
    return false;
  }
  return true;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.cpu().to(DType::Float64), b.cpu().to(DType::Float64)))).item<double>();
}

// The kernels the profiler saw since its last reset.
std::vector<std::string> kernels_seen() {
  std::vector<std::string> names;
  for (const profiler::Row& r : profiler::rows()) names.push_back(r.name);
  return names;
}
bool seen(const std::vector<std::string>& names, const std::string& name) {
  for (const std::string& n : names)
    if (n == name) return true;
  return false;
}

struct Case {
  int64_t N, L, S, H, D;
  bool packed;  // causal_self_attention on (N, L, 3E), else causal_attention
};

// out and the input gradients of sum(out * w), run on device dev: for the
// packed form one gradient (N, L, 3E), else dq and the (N, S, 2E) gradient
// of the buffer k and v are views of.
struct Run {
  Tensor out, gq, gkv;
};

Run run(const Case& c, double p, DType dt, Device dev) {
  const int64_t E = c.H * c.D;
  Generator gen(5);
  // Strided views into wider buffers, as a projection leaves them.
  const Tensor wq = randn({c.N, c.L, 3 * E + 1}, TensorOptions(DType::Float64), &gen);
  const Tensor wkv = randn({c.N, c.S, 2 * E + 1}, TensorOptions(DType::Float64), &gen);
  const Tensor w = randn({c.N, c.L, E}, TensorOptions(DType::Float64), &gen);
  const Tensor bq = wq.to(dt).to(dev).detach().requires_grad_();
  const Tensor bkv = wkv.to(dt).to(dev).detach().requires_grad_();
  Generator drop(42);
  const Tensor out =
      c.packed ? causal_self_attention(bq.narrow(2, 1, 3 * E), c.H, p, &drop)
               : causal_attention(bq.narrow(2, 1, E), bkv.narrow(2, 0, E), bkv.narrow(2, E + 1, E), c.H, p, &drop);
  sum(mul(out, w.to(dt).to(dev))).backward();
  return Run{out, bq.grad(), c.packed ? Tensor() : bkv.grad()};
}
}  // namespace

TEST_CASE("cuda causal_attention: the fused kernels match the CPU, float32 and float64, dropout and ragged tiles") {
  if (!have_cuda()) {
    MESSAGE("skipped: no CUDA backend or device");
    return;
  }
  // One query (alone and against a cache of keys), a single ragged tile,
  // several query tiles (16 rows per block in float32) and key tiles (32 or
  // fewer keys) with tails, fewer queries than keys across tiles, head dims
  // 1, 33 (two lane columns, ragged) and 128 (the limit).
  const std::vector<Case> cases = {{2, 1, 1, 1, 1, true},    {1, 1, 5, 2, 4, false},   {2, 5, 5, 2, 4, true},
                                   {1, 37, 37, 3, 8, true},  {1, 7, 41, 2, 16, false}, {1, 19, 19, 2, 33, true},
                                   {1, 9, 12, 1, 128, false}};
  for (const Case& c : cases)
    for (const DType dt : {DType::Float32, DType::Float64})
      for (const double p : {0.0, 0.3}) {
        CAPTURE(c.L);
        CAPTURE(c.S);
        CAPTURE(c.H);
        CAPTURE(c.D);
        CAPTURE(p);
        CAPTURE(dtype_name(dt));
        const Run cpu = run(c, p, dt, kCPU);
        profiler::reset();
        Run dev;
        {
          profiler::Guard guard;
          dev = run(c, p, dt, kCuda);
        }
        // The fused kernels ran, not the composed path's softmax and GEMMs.
        const std::vector<std::string> names = kernels_seen();
        CHECK(seen(names, "causal_attention"));
        CHECK(seen(names, "causal_attention_backward"));
        CHECK_FALSE(seen(names, "matmul"));
        CHECK_FALSE(seen(names, "softmax"));
        CHECK(dev.out.device() == kCuda);
        const double tol = dt == DType::Float64 ? 1e-12 : 3e-5;
        CHECK(max_diff(dev.out, cpu.out) < tol);
        CHECK(max_diff(dev.gq, cpu.gq) < tol);
        if (!c.packed) CHECK(max_diff(dev.gkv, cpu.gkv) < tol);
        CHECK(max(abs(cpu.gq)).item<double>() > 0.1);  // not vacuous
      }
}

TEST_CASE("cuda causal_attention: dropout is deterministic for a seed and the backward redraws the forward's mask") {
  if (!have_cuda()) {
    MESSAGE("skipped: no CUDA backend or device");
    return;
  }
  Generator gen(8);
  const Tensor x = randn({1, 6, 18}, TensorOptions(DType::Float64), &gen);
  // Two runs from one seed drop the same weights; another seed drops others.
  auto fwd = [&](uint64_t seed) {
    Generator d(seed);
    return causal_self_attention(x.to(kCuda), 3, 0.4, &d).cpu();
  };
  CHECK(max_diff(fwd(3), fwd(3)) == 0.0);
  CHECK(max_diff(fwd(3), fwd(4)) > 1e-3);
  // The gradients the device's backward gives are those of the function its
  // forward computes (a fresh generator per evaluation: one fixed mask), so
  // forward and backward drew the same mask. Packed and separate q, k, v.
  auto r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        Generator d(4);
        return causal_self_attention(in[0].to(kCuda), 3, 0.4, &d).cpu();
      },
      {x.detach().requires_grad_()});
  CHECK_MESSAGE(r.ok, r.message);
  const Tensor q = randn({2, 3, 4}, TensorOptions(DType::Float64), &gen).requires_grad_();
  const Tensor k = randn({2, 7, 4}, TensorOptions(DType::Float64), &gen).requires_grad_();
  const Tensor v = randn({2, 7, 4}, TensorOptions(DType::Float64), &gen).requires_grad_();
  auto r2 = gradcheck(
      [&](const std::vector<Tensor>& in) {
        Generator d(6);
        return causal_attention(in[0].to(kCuda), in[1].to(kCuda), in[2].to(kCuda), 2, 0.3, &d).cpu();
      },
      {q, k, v});
  CHECK_MESSAGE(r2.ok, r2.message);
  // The device's mask is the CPU's: the same seed, the same result.
  Generator a(11), b(11);
  CHECK(max_diff(causal_self_attention(x.to(kCuda), 3, 0.4, &a), causal_self_attention(x, 3, 0.4, &b)) < 1e-12);
}

TEST_CASE(
    "cuda causal_attention: only the gradients asked for, and heads wider than the limit take the composed path") {
  if (!have_cuda()) {
    MESSAGE("skipped: no CUDA backend or device");
    return;
  }
  // dv alone (q and k frozen): the dK/dV kernel without dQ.
  Generator gen(2);
  const Tensor q = randn({1, 4, 8}, TensorOptions(DType::Float64), &gen),
               k = randn({1, 6, 8}, TensorOptions(DType::Float64), &gen);
  const Tensor v = randn({1, 6, 8}, TensorOptions(DType::Float64), &gen);
  const Tensor vc = v.to(kCuda).detach().requires_grad_(), vh = v.detach().requires_grad_();
  sum(causal_attention(q.to(kCuda), k.to(kCuda), vc, 2)).backward();
  sum(causal_attention(q, k, vh, 2)).backward();
  CHECK(max_diff(vc.grad(), vh.grad()) < 1e-12);
  // D = 130 > kCudaCausalMaxHeadDim: multi_head_attention with the mask.
  const int64_t D = detail::kCudaCausalMaxHeadDim + 2;
  const Tensor x = randn({1, 3, 3 * D}, TensorOptions(DType::Float64), &gen);
  const Tensor xc = x.to(kCuda).detach().requires_grad_(), xh = x.detach().requires_grad_();
  profiler::reset();
  {
    profiler::Guard guard;
    sum(causal_self_attention(xc, 1)).backward();
  }
  CHECK_FALSE(seen(kernels_seen(), "causal_attention"));
  CHECK(seen(kernels_seen(), "softmax"));
  sum(causal_self_attention(xh, 1)).backward();
  CHECK(max_diff(xc.grad(), xh.grad()) < 1e-12);
}
