// Multi-head attention as one op (ops/attention.h): forward and backward
// written with matmul_into on per-head strided views and the softmax and
// dropout kernels, so it runs on every backend that has those; and a fused
// CPU kernel for short sequences (32 to 64 keys, at most 64 queries and head
// dims, float32 or bfloat16, no mask: the demo transformer's attention) that
// does one head at a time in L1 and keeps none of the (N, H, L, S) weights.
#include <ember/ops/attention.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <ember/core/autocast.h>
#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype.h>
#include <ember/core/parallel.h>
#include <ember/ops/bgemm_avx512.h>
#include <ember/ops/convert.h>
#include <ember/ops/dropout.h>
#include <ember/ops/fast_math.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/matmul.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/sgemm_avx512.h>
#include <ember/ops/softmax.h>

namespace ember {
namespace {

// x (N, T, H * D) seen per head as (N, H, T, D): head h is D columns at h * D
// of every row. A view: no copy, x's own row and batch strides.
Tensor heads(const Tensor& x, int64_t H) {
  const int64_t D = x.size(2) / H;
  return make_view(x, {x.size(0), H, x.size(1), D}, {x.stride(0), D, x.stride(1), 1}, x.offset());
}

// The same heads transposed: (N, H, D, T), each read column-major by BLAS.
Tensor heads_t(const Tensor& x, int64_t H) {
  const int64_t D = x.size(2) / H;
  return make_view(x, {x.size(0), H, D, x.size(1)}, {x.stride(0), D, 1, x.stride(1)}, x.offset());
}

}  // namespace

// A plain view with a contiguous last dim, which heads() needs.
Tensor detail::unit_last(const Tensor& x) {
  return x.stride(2) == 1 || x.size(2) <= 1 ? x.detach() : x.detach().contiguous();
}

void detail::check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t H,
                                    const Tensor& mask, double p) {
  EMBER_CHECK(q.defined() && k.defined() && v.defined(), ValueError, op, ": got an undefined tensor");
  EMBER_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, ShapeError, op,
              ": expected q (N, L, E), k and v (N, S, E), got ", q.shape().str(), ", ", k.shape().str(), ", ",
              v.shape().str());
  EMBER_CHECK(q.is_floating_point() && k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError, op,
              ": expected q, k, v of one floating dtype, got ", dtype_name(q.dtype()), ", ", dtype_name(k.dtype()),
              ", ", dtype_name(v.dtype()));
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  const int64_t N = q.size(0), E = q.size(2);
  EMBER_CHECK(k.size(0) == N && v.size(0) == N && k.size(1) == v.size(1) && k.size(2) == E && v.size(2) == E,
              ShapeError, op, ": q ", q.shape().str(), ", k ", k.shape().str(), " and v ", v.shape().str(),
              " do not fit (one batch, one width E, as many values as keys)");
  EMBER_CHECK(H > 0 && E % H == 0, ValueError, op, ": width ", E, " is not divisible into ", H, " heads");
  EMBER_CHECK(k.size(1) > 0, ShapeError, op, ": attention over zero keys (k of shape ", k.shape().str(), ")");
  EMBER_CHECK(p >= 0.0 && p < 1.0, ValueError, op, ": dropout probability must be in [0, 1), got ", p);
  if (mask.defined()) {
    EMBER_CHECK(mask.dtype() == DType::Bool, DTypeError, op, ": mask must be bool (true = masked out), got ",
                dtype_name(mask.dtype()));
    check_same_device(op, q, mask);
    const Shape full{N, H, q.size(1), k.size(1)};
    EMBER_CHECK(mask.dim() <= 4 && broadcast_shapes(full, mask.shape(), op) == full, ShapeError, op, ": mask of shape ",
                mask.shape().str(), " does not broadcast to (N, H, L, S) = ", full.str());
  }
}

namespace {
using detail::unit_last;

// ---- fused CPU kernel ----------------------------------------------------------
//
// Per (batch entry, head) task, everything between the GEMMs stays in a 16 KB
// buffer: S = Q K^T / sqrt(D), the softmax, dropout and O = Wd V, with the
// small products on ops/sgemm_avx512.h (float32) or ops/bgemm_avx512.h
// (bfloat16: see product()). The composed path writes and reads
// back the (N, H, L, S) scores, weights, dropped weights and mask (10 MB
// each at the demo's batch 256) between kernels; this one keeps only each
// row's log-sum-exp, and backward recomputes W = exp(S - lse) (as
// FlashAttention does) and redraws the dropout mask from the same Philox
// counters. The draws are those of the composed path (element e of the
// (N, H, L, S) weights takes word e % 4 of counter offset + e / 4), so both
// paths give the same result for the same seed.

struct FusedArgs {
  const void *q, *k, *v;  // head h of entry n, row i: q + n * qs0 + i * qs1 + h * D
  bool bf16;              // q, k, v, out, g and dq, dk, dv hold bfloat16 (else float32)
  int64_t qs0, qs1, ks0, ks1, vs0, vs1;
  int64_t N, H, L, S, D;
  float scale;
  double p;               // dropout probability (0: none)
  uint64_t seed, offset;  // Philox stream of the dropout draws
};

// From 32 keys up: at the ViT's 17 tokens the composed path, whose softmax
// puts 16 rows across the vector lanes, measured faster; at the demo
// transformer's 50 the fused one does (docs/PERFORMANCE.md, "ops/attention.cpp").
bool fused_shape_fits(const Tensor& q, const Tensor& k, int64_t H, const Tensor& mask) {
  const int64_t D = q.size(2) / H;
  return cpu::kHaveSgemmAvx512 && q.device().is_cpu() && !mask.defined() && q.size(1) <= 64 && k.size(1) >= 32 &&
         k.size(1) <= 64 && D <= 64 && q.numel() > 0 && k.numel() > 0;
}
bool fused_fits(const Tensor& q, const Tensor& k, int64_t H, const Tensor& mask) {
  return (q.dtype() == DType::Float32 || q.dtype() == DType::BFloat16) && fused_shape_fits(q, k, H, mask);
}

FusedArgs fused_args(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, double scale, double p,
                     const RandomSpec& spec) {
  FusedArgs a;
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.bf16 = q.dtype() == DType::BFloat16;
  a.qs0 = q.stride(0), a.qs1 = q.stride(1), a.ks0 = k.stride(0), a.ks1 = k.stride(1);
  a.vs0 = v.stride(0), a.vs1 = v.stride(1);
  a.N = q.size(0), a.H = H, a.L = q.size(1), a.S = k.size(1), a.D = q.size(2) / H;
  a.scale = static_cast<float>(scale);
  a.p = p;
  a.seed = spec.seed;
  a.offset = spec.offset;
  return a;
}

// The dropout multipliers (0 or 1/(1-p)) of task t's L x S weights, as
// cpu_dropout (ops/dropout.cpp) decides them (dropout_threshold).
void dropout_factors(const FusedArgs& a, int64_t t, float* f) {
  const int64_t n = a.L * a.S, e0 = t * n;
  const uint32_t th = dropout_threshold(a.p);
  const float sc = static_cast<float>(1.0 / (1.0 - a.p));
  alignas(64) uint32_t bits[256];
  // Blocks of 64 counters (256 elements) from the counter holding e0.
  for (int64_t c = e0 / 4; 4 * c < e0 + n; c += 64) {
    philox_block<64>(a.seed, a.offset + static_cast<uint64_t>(c), bits);
    const int64_t lo = std::max<int64_t>(e0, 4 * c), hi = std::min<int64_t>(e0 + n, 4 * c + 256);
    for (int64_t e = lo; e < hi; ++e) f[e - e0] = (bits[e - 4 * c] >> 8) >= th ? sc : 0.0f;
  }
}

// Bytes per element of the fused kernel's arrays.
int64_t esize(const FusedArgs& a) { return a.bf16 ? 2 : 4; }

// Asks for the cache lines of task t's rows of q, k and v (and of g in
// backward). A head is one short run in each row of a projection whose rows
// are 3E elements apart; the hardware prefetcher does not follow that, and
// without this every row of K costs a miss while sgemm_avx512 packs it: asked
// for one task ahead, the misses overlap the current task's arithmetic.
void prefetch_task(const FusedArgs& a, int64_t t, const void* g = nullptr, int64_t gs0 = 0, int64_t gs1 = 0) {
  if (t >= a.N * a.H) return;
  const int64_t n = t / a.H, h = t % a.H, es = esize(a);
  auto rows = [&](const void* x, int64_t s0, int64_t s1, int64_t count) {
    const char* base = static_cast<const char*>(x) + es * (n * s0 + h * a.D);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t b = 0; b < es * a.D; b += 64) __builtin_prefetch(base + es * i * s1 + b);
  };
  rows(a.q, a.qs0, a.qs1, a.L);
  rows(a.k, a.ks0, a.ks1, a.S);
  rows(a.v, a.vs0, a.vs1, a.S);
  if (g) rows(g, gs0, gs1, a.L);
}

// One product of a task, C = alpha op(A) op(B), on one head's rows (row
// strides lda, ldb, ldc; a head's pointer is x + n * s0 + h * D elements).
// float32: ops/sgemm_avx512.h. bfloat16 (autocast's q, k, v): the bf16 GEMM
// (ops/bgemm_avx512.h), as torch.autocast runs attention's two bmm in bf16:
// q, k, v, g are read in place, a float32 A (the weights W, their gradient)
// is rounded to bfloat16 once (as_a), the sums are float32, and a bf16 C
// (the output, dq, dk, dv) is rounded once. B is always q, k, v or g.
struct Mat {
  const void* p;
  bool f32;  // float32 (else bfloat16)
  int64_t ld;
};
void product(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, Mat A, Mat B, void* c,
             bool c_f32, int64_t ldc) {
  if (!bf16) {
    cpu::sgemm_avx512(ta, tb, m, n, k, alpha, static_cast<const float*>(A.p), A.ld, static_cast<const float*>(B.p),
                      B.ld, 0.0f, static_cast<float*>(c), ldc);
    return;
  }
  const auto elem = [](bool f32) { return f32 ? cpu::GemmElem::kFloat32 : cpu::GemmElem::kBFloat16; };
  cpu::bgemm(cpu::BgemmArgs{.trans_a = ta,
                            .trans_b = tb,
                            .m = m,
                            .n = n,
                            .k = k,
                            .alpha = alpha,
                            .a = A.p,
                            .lda = A.ld,
                            .a_type = elem(A.f32),
                            .b = B.p,
                            .ldb = B.ld,
                            .b_type = elem(B.f32),
                            .c = c,
                            .ldc = ldc,
                            .c_type = elem(c_f32)});
}
// Head h of batch entry n of an (N, T, E) array of the kernel's dtype.
Mat head(const FusedArgs& a, const void* x, int64_t s0, int64_t s1, int64_t n, int64_t h) {
  return {static_cast<const char*>(x) + esize(a) * (n * s0 + h * a.D), !a.bf16, s1};
}
void* head_ptr(const FusedArgs& a, void* x, int64_t s0, int64_t n, int64_t h) {
  return static_cast<char*>(x) + esize(a) * (n * s0 + h * a.D);
}

// Per-thread float32 buffers of one task: the L x S weights, dropout factors
// and weight gradients, 64 x 64 each: the most the fused kernel takes.
// Kept per thread (48 KB: too much for a stack array, and a fresh one per
// call would be a fresh mapping to fault in).
struct TaskBuffers {
  alignas(64) float w[64 * 64], f[64 * 64], dw[64 * 64];
  alignas(64) uint16_t wb[64 * 64];  // bfloat16: a float32 A rounded once (as_a)
};

// The float32 L x S array x as a product's A operand. For bfloat16 it is
// rounded into wb first (the rounding the bf16 GEMM would make as it packed
// x, so the same bits), and the GEMM reads a row-major bf16 A in place
// instead of transposing and rounding the float32 array while it packs it:
// one rounding pass, though dQ and dK both read dS.
Mat as_a(const FusedArgs& a, const float* x, uint16_t* wb) {
  if (!a.bf16) return {x, true, a.S};
  const int64_t n = a.L * a.S;
  cpu::float_to_bf16(x, reinterpret_cast<bfloat16*>(wb), n);
  return {wb, false, a.S};
}
TaskBuffers& task_buffers() {
  thread_local std::unique_ptr<TaskBuffers> b = std::make_unique<TaskBuffers>();
  return *b;
}

// out (N, L, E) contiguous; lse (N, H, L) float32.
void fused_forward(const FusedArgs& a, void* out, float* lse) {
  const int64_t E = a.H * a.D;
  parallel_for(0, a.N * a.H, 4, [&](int64_t lo, int64_t hi) {
    TaskBuffers* buf = &task_buffers();
    float *w = buf->w, *f = buf->f;
    prefetch_task(a, lo);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / a.H, h = t % a.H;
      prefetch_task(a, t + 1);
      const Mat Q = head(a, a.q, a.qs0, a.qs1, n, h), K = head(a, a.k, a.ks0, a.ks1, n, h),
                V = head(a, a.v, a.vs0, a.vs1, n, h);
      // S = Q K^T * scale
      product(a.bf16, false, true, a.L, a.S, a.D, a.scale, Q, K, w, true, a.S);
      float* lt = lse + t * a.L;
      for (int64_t i = 0; i < a.L; ++i) {
        float* r = w + i * a.S;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < a.S; ++j) mx = r[j] > mx ? r[j] : mx;
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < a.S; ++j) {
          r[j] = fast::expf(r[j] - mx);
          sum += r[j];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < a.S; ++j) r[j] *= inv;
        lt[i] = mx + std::log(sum);
      }
      if (a.p > 0) {
        dropout_factors(a, t, f);
#pragma omp simd
        for (int64_t e = 0; e < a.L * a.S; ++e) w[e] *= f[e];
      }
      // O = Wd V
      product(a.bf16, false, false, a.L, a.D, a.S, 1.0f, as_a(a, w, buf->wb), V, head_ptr(a, out, a.L * E, n, h),
              !a.bf16, E);
    }
  });
}

// g (N, L, E) with unit last stride (row stride gs1, batch gs0); dq, dk, dv
// (N, T, E) views with unit last stride, or null when not wanted.
void fused_backward(const FusedArgs& a, const float* lse, const void* g, int64_t gs0, int64_t gs1, void* dq,
                    int64_t dqs0, int64_t dqs1, void* dk, int64_t dks0, int64_t dks1, void* dv, int64_t dvs0,
                    int64_t dvs1) {
  parallel_for(0, a.N * a.H, 4, [&](int64_t lo, int64_t hi) {
    TaskBuffers* buf = &task_buffers();
    float *w = buf->w, *f = buf->f, *dw = buf->dw;
    prefetch_task(a, lo, g, gs0, gs1);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / a.H, h = t % a.H, LS = a.L * a.S;
      prefetch_task(a, t + 1, g, gs0, gs1);
      const Mat Q = head(a, a.q, a.qs0, a.qs1, n, h), K = head(a, a.k, a.ks0, a.ks1, n, h),
                V = head(a, a.v, a.vs0, a.vs1, n, h), G = head(a, g, gs0, gs1, n, h);
      // W = exp(S - lse), the forward's weights recomputed (S by the same product).
      product(a.bf16, false, true, a.L, a.S, a.D, a.scale, Q, K, w, true, a.S);
      const float* lt = lse + t * a.L;
      for (int64_t i = 0; i < a.L; ++i) {
        float* r = w + i * a.S;
        const float l = lt[i];
#pragma omp simd
        for (int64_t j = 0; j < a.S; ++j) r[j] = fast::expf(r[j] - l);
      }
      if (a.p > 0) dropout_factors(a, t, f);
      // dV = Wd^T G, Wd = W * f.
      if (dv) {
        const float* wd = w;
        if (a.p > 0) {
#pragma omp simd
          for (int64_t e = 0; e < LS; ++e) dw[e] = w[e] * f[e];
          wd = dw;
        }
        product(a.bf16, true, false, a.S, a.D, a.L, 1.0f, as_a(a, wd, buf->wb), G, head_ptr(a, dv, dvs0, n, h), !a.bf16,
                dvs1);
      }
      if (!dq && !dk) continue;
      // dW = (G V^T) * f; dS = W * (dW - rowsum(dW * W)), into dw.
      product(a.bf16, false, true, a.L, a.S, a.D, 1.0f, G, V, dw, true, a.S);
      if (a.p > 0) {
#pragma omp simd
        for (int64_t e = 0; e < LS; ++e) dw[e] *= f[e];
      }
      for (int64_t i = 0; i < a.L; ++i) {
        float* d = dw + i * a.S;
        const float* r = w + i * a.S;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < a.S; ++j) dot += d[j] * r[j];
#pragma omp simd
        for (int64_t j = 0; j < a.S; ++j) d[j] = r[j] * (d[j] - dot);
      }
      const Mat dS = as_a(a, dw, buf->wb);
      if (dq)  // dQ = dS K * scale
        product(a.bf16, false, false, a.L, a.D, a.S, a.scale, dS, K, head_ptr(a, dq, dqs0, n, h), !a.bf16, dqs1);
      if (dk)  // dK = dS^T Q * scale
        product(a.bf16, true, false, a.S, a.D, a.L, a.scale, dS, Q, head_ptr(a, dk, dks0, n, h), !a.bf16, dks1);
    }
  });
}

// The fused kernel's entry points, through kernel tables so that the
// profiler and anomaly mode see them like every other kernel. q, k, v:
// (N, T, E) with unit last stride, float32 or bfloat16; out (N, L, E) of
// their dtype and lse (N, H, L) float32, contiguous; g, dq, dk, dv of their
// dtype (dq, dk, dv: views with unit last stride, or undefined).
struct FusedParams {
  int64_t heads;
  double scale, p;
  RandomSpec spec;
};

void cpu_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedParams& fp, Tensor& out,
                           Tensor& lse) {
  fused_forward(fused_args(q, k, v, fp.heads, fp.scale, fp.p, fp.spec), out.data_ptr(),
                static_cast<float*>(lse.data_ptr()));
}

void cpu_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                            const FusedParams& fp, Tensor& dq, Tensor& dk, Tensor& dv) {
  auto ptr = [](Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; };
  auto st = [](const Tensor& t, int i) { return t.defined() ? t.stride(i) : 0; };
  fused_backward(fused_args(q, k, v, fp.heads, fp.scale, fp.p, fp.spec), static_cast<const float*>(lse.data_ptr()),
                 g.data_ptr(), g.stride(0), g.stride(1), ptr(dq), st(dq, 0), st(dq, 1), ptr(dk), st(dk, 0), st(dk, 1),
                 ptr(dv), st(dv, 0), st(dv, 1));
}

KernelTable<void(const Tensor& q, const Tensor& k, const Tensor& v, const FusedParams& fp, Tensor& out, Tensor& lse)>
    attention_forward_kernel("multi_head_attention");
KernelTable<void(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                 const FusedParams& fp, Tensor& dq, Tensor& dk, Tensor& dv)>
    attention_backward_kernel("multi_head_attention_backward");
EMBER_REGISTER_KERNEL(attention_forward_kernel, CPU, cpu_attention_forward);
EMBER_REGISTER_KERNEL(attention_backward_kernel, CPU, cpu_attention_backward);

// What the forward keeps for backward: the weights W = softmax(S), the
// dropout mask and Wd = dropout(W) (Wd is W when p = 0); or, from the fused
// kernel, only each row's log-sum-exp and the dropout draws' Philox stream.
struct Forward {
  Tensor out, w, keep, wd;
  Tensor lse;  // fused: (N, H, L) float32
  RandomSpec spec{RandomKind::Uniform, 0, 0, 0.0, 1.0};
};

Forward forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, const Tensor& mask, double p,
                Generator* gen, double scale) {
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2);
  const TensorOptions o(q.dtype(), q.device());
  // Scores, weights and their gradients: float32 for bfloat16 q, k, v (the
  // composed path's bf16 form, bf16_path), else q's dtype.
  const TensorOptions wo(q.dtype() == DType::BFloat16 ? DType::Float32 : q.dtype(), q.device());
  const Shape ws{N, H, L, S}, rows{N * H * L, S, 1};  // softmax over S, one row per (n, h, query)
  Forward f;
  f.out = empty({N, L, E}, o);
  if (fused_fits(q, k, H, mask)) {
    if (p > 0) {
      Generator& g = gen ? *gen : default_generator();
      f.spec = RandomSpec{RandomKind::Uniform, g.seed(), g.reserve((static_cast<uint64_t>(N * H * L * S) + 3) / 4), 0.0,
                          1.0};
    }
    f.lse = empty({N, H, L}, TensorOptions(DType::Float32, q.device()));
    attention_forward_kernel(q.device(), q, k, v, FusedParams{H, scale, p, f.spec}, f.out, f.lse);
    return f;
  }
  f.w = empty(ws, wo);
  if (f.out.numel() == 0) return f;
  {
    Tensor scores = empty(ws, wo);
    matmul_into(heads(q, H), heads_t(k, H), scores, scale);
    const Tensor m3 = mask.defined() ? broadcast_view(mask, ws).contiguous().view(rows) : Tensor();
    Tensor w3 = f.w.view(rows);
    softmax_kernel(q.device(), scores.view(rows), m3, w3, false);
  }
  f.wd = f.w;
  if (p > 0) {
    Generator& g = gen ? *gen : default_generator();
    const RandomSpec spec{RandomKind::Uniform, g.seed(), g.reserve((static_cast<uint64_t>(f.w.numel()) + 3) / 4), 0.0,
                          1.0};
    f.wd = empty(ws, wo);
    f.keep = empty(ws, TensorOptions(DType::Bool, q.device()));
    dropout_kernel(q.device(), f.w, f.wd, f.keep, spec, p);
  }
  matmul_into(f.wd, heads(v, H), heads(f.out, H));
  return f;
}

// Gradients of q, k, v into dq, dk, dv (each (N, T, E) views with a unit
// last stride, or undefined when not wanted), from g = d out.
void backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Forward& f, int64_t H, double p,
              double scale, Tensor dq, Tensor dk, Tensor dv) {
  if (f.lse.defined()) {
    attention_backward_kernel(q.device(), unit_last(g), q, k, v, f.lse, FusedParams{H, scale, p, f.spec}, dq, dk, dv);
    return;
  }
  if (!f.wd.defined()) {  // no queries, or no batch: nothing flows back
    for (Tensor* d : {&dq, &dk, &dv})
      if (d->defined()) d->zero_();
    return;
  }
  const Tensor gh = heads(unit_last(g), H);
  if (dv.defined()) matmul_into(f.wd.transpose(-2, -1), gh, heads(dv, H));  // dV = Wd^T G
  if (!dq.defined() && !dk.defined()) return;
  const TensorOptions o(f.w.dtype(), f.w.device());
  const Shape rows{f.w.numel() / f.w.size(-1), f.w.size(-1), 1};
  Tensor dw = empty(f.w.shape(), o);
  matmul_into(gh, heads_t(v, H), dw);  // dWd = G V^T
  if (p > 0) {
    Tensor dwk = empty(f.w.shape(), o);
    masked_scale_kernel(dw.device(), dw, f.keep, dwk, 1.0 / (1.0 - p));
    dw = dwk;
  }
  Tensor ds = empty(f.w.shape(), o);
  Tensor ds3 = ds.view(rows);
  softmax_backward_kernel(ds.device(), f.w.view(rows), dw.view(rows), ds3, false);
  dw = Tensor();
  if (dq.defined()) matmul_into(ds, heads(k, H), heads(dq, H), scale);                    // dQ = dS K / sqrt(D)
  if (dk.defined()) matmul_into(ds.transpose(-2, -1), heads(q, H), heads(dk, H), scale);  // dK = dS^T Q / sqrt(D)
}

// bfloat16 q, k, v on the CPU run without float32 copies. Both paths read
// the bf16 inputs in place and write the bf16 outputs through the bf16 GEMM
// (ops/bgemm_avx512.h), with the scores, softmax, dropout and their
// gradients in float32; the weights are rounded to bfloat16 (by the GEMM as
// it packs them; in the fused kernel once, into a buffer: as_a), as
// PyTorch's autocast runs the softmax output through a bf16 bmm. The fused kernel (32-64 keys, no mask) does the
// composed path's products one head at a time, so the two agree but for a rounding flipped by their softmax kernels'
// float32 differences. Either saves converting the packed projection, the output and their gradients as whole tensors.
// float16 still takes float32 copies.
bool bf16_path(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  return q.device().is_cpu() && q.dtype() == DType::BFloat16 && k.dtype() == DType::BFloat16 &&
         v.dtype() == DType::BFloat16 && (!mask.defined() || mask.dtype() == DType::Bool);
}

double scale_of(const Tensor& q, int64_t H) { return 1.0 / std::sqrt(static_cast<double>(q.size(2) / H)); }

}  // namespace

Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads, const Tensor& mask,
                            double dropout_p, Generator* gen) {
  if (auto ac = autocast_dtype_for("multi_head_attention", q)) {  // core/autocast.h
    AutocastSuspend off;
    return multi_head_attention(autocast_cast(q, *ac), autocast_cast(k, *ac), autocast_cast(v, *ac), num_heads,
                                autocast_cast(mask, *ac), dropout_p, gen);
  }
  detail::check_attention_inputs("multi_head_attention", q, k, v, num_heads, mask, dropout_p);
  if (any_half({&q, &k, &v, &mask}) && !bf16_path(q, k, v, mask))  // float32 copies, rounded once
    return multi_head_attention(upcast_half(q), upcast_half(k), upcast_half(v), num_heads, upcast_half(mask), dropout_p,
                                gen)
        .to(q.dtype());
  const Tensor qp = unit_last(q), kp = unit_last(k), vp = unit_last(v);
  const int64_t H = num_heads;
  const double scale = scale_of(q, H);
  Forward f = forward(qp, kp, vp, H, mask, dropout_p, gen, scale);
  Tensor out = std::move(f.out);  // not kept by the node: the output holds the node
  if (autograd::needs_grad({q, k, v}))
    autograd::record("multi_head_attention", {q, k, v}, out,
                     [sq = autograd::SavedTensor(qp), sk = autograd::SavedTensor(kp), sv = autograd::SavedTensor(vp),
                      f = std::move(f), H, p = dropout_p, scale](autograd::BackwardContext& ctx) {
                       const Tensor &q = sq.get(), &k = sk.get(), &v = sv.get();
                       auto grad = [&](int i, const Tensor& like) {
                         return ctx.needs_grad(i) ? empty(like.shape(), TensorOptions(like.dtype(), like.device()))
                                                  : Tensor();
                       };
                       const Tensor dq = grad(0, q), dk = grad(1, k), dv = grad(2, v);
                       backward(ctx.grad_output(), q, k, v, f, H, p, scale, dq, dk, dv);
                       if (dq.defined()) ctx.set_grad(0, dq);
                       if (dk.defined()) ctx.set_grad(1, dk);
                       if (dv.defined()) ctx.set_grad(2, dv);
                     });
  return out;
}

Tensor multi_head_self_attention(const Tensor& qkv, int64_t num_heads, const Tensor& mask, double dropout_p,
                                 Generator* gen) {
  if (auto ac = autocast_dtype_for("multi_head_self_attention", qkv)) {  // core/autocast.h
    AutocastSuspend off;
    return multi_head_self_attention(autocast_cast(qkv, *ac), num_heads, autocast_cast(mask, *ac), dropout_p, gen);
  }
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, ShapeError,
              "multi_head_self_attention: expected a packed projection (N, L, 3E), got ",
              qkv.defined() ? qkv.shape().str() : std::string("an undefined tensor"));
  const Tensor packed = unit_last(qkv);
  const int64_t E = qkv.size(2) / 3, H = num_heads;
  const Tensor q = packed.narrow(2, 0, E), k = packed.narrow(2, E, E), v = packed.narrow(2, 2 * E, E);
  detail::check_attention_inputs("multi_head_self_attention", q, k, v, H, mask, dropout_p);
  if (any_half({&qkv, &mask}) && !bf16_path(q, k, v, mask))
    return multi_head_self_attention(upcast_half(qkv), num_heads, upcast_half(mask), dropout_p, gen).to(qkv.dtype());
  const double scale = scale_of(q, H);
  Forward f = forward(q, k, v, H, mask, dropout_p, gen, scale);
  Tensor out = std::move(f.out);  // not kept by the node: the output holds the node
  if (autograd::needs_grad({qkv}))
    autograd::record("multi_head_self_attention", {qkv}, out,
                     [sp = autograd::SavedTensor(packed), f = std::move(f), H, E, p = dropout_p,
                      scale](autograd::BackwardContext& ctx) {
                       const Tensor& x = sp.get();
                       // The three slices of one gradient, each written by its GEMM.
                       Tensor d = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
                       backward(ctx.grad_output(), x.narrow(2, 0, E), x.narrow(2, E, E), x.narrow(2, 2 * E, E), f, H, p,
                                scale, d.narrow(2, 0, E), d.narrow(2, E, E), d.narrow(2, 2 * E, E));
                       ctx.set_grad(0, d);
                     });
  return out;
}

}  // namespace ember
