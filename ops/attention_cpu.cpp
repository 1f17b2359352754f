// The fused CPU attention kernel (tables in ops/attention_fused.h; the op,
// its composed path and when it takes this one: ops/attention.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <ember/core/dispatch.h>

#include <ember/core/parallel.h>
#include <ember/ops/attention_fused.h>
#include <ember/ops/bgemm_avx512.h>
#include <ember/ops/convert.h>
#include <ember/ops/dropout.h>
#include <ember/ops/fast_math.h>
#include <ember/ops/philox_cpu.h>
#include <ember/ops/sgemm_avx512.h>

namespace ember {
namespace {

using detail::FusedAttentionParams;

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
    cpu::philox_block64(a.seed, a.offset + static_cast<uint64_t>(c), bits);
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

void cpu_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionParams& fp,
                           Tensor& out, Tensor& lse) {
  fused_forward(fused_args(q, k, v, fp.heads, fp.scale, fp.p, fp.spec), out.data_ptr(),
                static_cast<float*>(lse.data_ptr()));
}

void cpu_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& /*out*/,
                            const Tensor& lse, const FusedAttentionParams& fp, Tensor& dq, Tensor& dk, Tensor& dv) {
  auto ptr = [](Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; };
  auto st = [](const Tensor& t, int i) { return t.defined() ? t.stride(i) : 0; };
  fused_backward(fused_args(q, k, v, fp.heads, fp.scale, fp.p, fp.spec), static_cast<const float*>(lse.data_ptr()),
                 g.data_ptr(), g.stride(0), g.stride(1), ptr(dq), st(dq, 0), st(dq, 1), ptr(dk), st(dk, 0), st(dk, 1),
                 ptr(dv), st(dv, 0), st(dv, 1));
}

}  // namespace

decltype(detail::attention_forward_kernel) detail::attention_forward_kernel("multi_head_attention");
decltype(detail::attention_backward_kernel) detail::attention_backward_kernel("multi_head_attention_backward");
EMBER_REGISTER_KERNEL(detail::attention_forward_kernel, CPU, cpu_attention_forward);
EMBER_REGISTER_KERNEL(detail::attention_backward_kernel, CPU, cpu_attention_backward);

}  // namespace ember
