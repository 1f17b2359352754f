// The tensor-core attention tests' shared cases (test_cuda_attention_tc.cpp,
// causal; test_cuda_attention_bidir_tc.cpp, bidirectional): one op on
// device "cuda" in a 16-bit dtype against the float64 CPU op on the same
// 16-bit values, outputs and input gradients, with the profiler showing the
// fused kernels ran and not the composed path.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include <ember/ember.h>

namespace ember::attention_tc_test {

inline const Device kCuda("cuda");

inline bool seen(const std::string& name) {
  for (const profiler::Row& r : profiler::rows())
    if (r.name == name) return true;
  return false;
}

// max |a - b| / max |b|: 16-bit results are compared relative to their scale.
inline double rel_diff(const Tensor& a, const Tensor& b) {
  const Tensor a64 = a.cpu().to(kFloat64), b64 = b.cpu().to(kFloat64);
  return max(abs(sub(a64, b64))).item<double>() / max(abs(b64)).item<double>();
}

struct Case {
  int64_t N, L, S, H, D;
};

struct Run {
  Tensor out, gq, gkv;
};

// out and the input gradients of sum(out * w) on device dev in dtype dt;
// L = S runs the self-attention form (causal_self_attention or
// multi_head_self_attention) on a packed (N, L, 3E) view whose columns start
// one element into a wider buffer (odd offsets, as a projection's slices
// leave them), else the q, k, v form on q and on k, v slices of one
// (N, S, 2E) buffer. The inputs are 16-bit values either way (float64 runs
// take them upcast), so both sides multiply the same numbers. aligned drops
// the extra column: every row then starts on 16 bytes, and the kernels
// stage the tiles with cp.async instead of element loads.
inline Run run(const Case& c, DType half, DType dt, Device dev, double p, bool causal, bool aligned = false) {
  const int64_t E = c.H * c.D, pad = aligned ? 0 : 1;
  Generator gen(causal ? 17 : 29);
  const Tensor wq = randn({c.N, c.L, 3 * E + pad}, TensorOptions(kFloat32), &gen).to(half).to(dt);
  const Tensor wkv = randn({c.N, c.S, 2 * E + pad}, TensorOptions(kFloat32), &gen).to(half).to(dt);
  const Tensor w = randn({c.N, c.L, E}, TensorOptions(kFloat32), &gen).to(half).to(dt);
  const Tensor bq = wq.to(dev).detach().requires_grad_(), bkv = wkv.to(dev).detach().requires_grad_();
  Generator drop(causal ? 23 : 31);
  const bool packed = c.L == c.S;
  const Tensor q = bq.narrow(2, pad, E), k = bkv.narrow(2, 0, E), v = bkv.narrow(2, E + pad, E);
  Tensor out;
  if (causal)
    out = packed ? causal_self_attention(bq.narrow(2, pad, 3 * E), c.H, p, &drop)
                 : causal_attention(q, k, v, c.H, p, &drop);
  else
    out = packed ? multi_head_self_attention(bq.narrow(2, pad, 3 * E), c.H, Tensor(), p, &drop)
                 : multi_head_attention(q, k, v, c.H, Tensor(), p, &drop);
  sum(mul(out, w.to(dev))).backward();
  return Run{out, bq.grad(), packed ? Tensor() : bkv.grad()};
}

inline void check_case(const Case& c, DType half, double p, bool causal, bool aligned = false) {
  CAPTURE(c.N);
  CAPTURE(c.L);
  CAPTURE(c.S);
  CAPTURE(c.H);
  CAPTURE(c.D);
  CAPTURE(p);
  CAPTURE(aligned);
  CAPTURE(dtype_name(half));
  const Run ref = run(c, half, kFloat64, kCPU, p, causal, aligned);
  profiler::reset();
  Run dev;
  {
    profiler::Guard guard;
    dev = run(c, half, half, kCuda, p, causal, aligned);
  }
  // The fused kernels, not the composed path's GEMMs and softmax.
  CHECK(seen(causal ? "causal_attention" : "multi_head_attention_backward"));
  CHECK_FALSE(seen("matmul"));
  CHECK_FALSE(seen("softmax"));
  CHECK(dev.out.dtype() == half);
  CHECK(dev.gq.dtype() == half);
  // bfloat16 keeps 8 significand bits, float16 11: the output and the
  // weights P (rounded for the second product) carry one rounding each,
  // the gradients one rounding of float32 sums.
  const double tol = half == kBFloat16 ? 2e-2 : 4e-3;
  CHECK(rel_diff(dev.out, ref.out) < tol);
  CHECK(rel_diff(dev.gq, ref.gq) < tol);
  if (ref.gkv.defined()) CHECK(rel_diff(dev.gkv, ref.gkv) < tol);
  CHECK(max(abs(ref.gq)).item<double>() > 0.05);  // not vacuous
}

}  // namespace ember::attention_tc_test
