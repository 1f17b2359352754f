// Causal multi-head attention (ops/causal_attention.h): the FlashAttention
// forward and backward on the CPU for float32 and float64 (and, for a few
// queries against a longer cache, decode_kernel's direct loops), through
// kernel tables (cuda/causal_attention.cu fills them for CUDA); devices,
// dtypes and head widths without a fused kernel run the composed
// multi_head_attention with a mask.
#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/attention.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/decode_attention_avx512.h>
#include <ember/ops/dropout.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/fast_math.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/philox_cpu.h>
#include <ember/ops/sgemm_avx512.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace ember {

using detail::CausalAttentionParams;
decltype(detail::causal_forward_kernel) detail::causal_forward_kernel("causal_attention");
decltype(detail::causal_backward_kernel) detail::causal_backward_kernel("causal_attention_backward");

namespace {

// Query and key block sizes. 64 x 64 scores are 16 KB in float32: the
// scores, the weights and their gradient stay in L1/L2 beside a block of Q,
// K and V. At L = S = 64 there is one block, half of it masked.
constexpr int64_t kBlock = 64;

// C (m x n, row stride ldc) = alpha op(A) op(B) + beta C: ops/sgemm_avx512.h
// for float32 when it has the kernel; plain loops otherwise (float64, which
// the tests and gradchecks run, and CPUs without AVX-512).
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::kHaveSgemmAvx512 && cpu::sgemm_avx512_fits(m, n, k)) {
      cpu::sgemm_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * s + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
    }
}

// Inlined, so the loops over a row's scores compile to vector code.
template <class T>
EMBER_FAST_INLINE T exp_fast(T x) {
  if constexpr (std::is_same_v<T, float>)
    return fast::expf(x);
  else
    return std::exp(x);
}

struct Args {
  const void *q, *k, *v;  // head h of entry n, row i: q + n * qs0 + i * qs1 + h * D
  int64_t qs0, qs1, ks0, ks1, vs0, vs1;
  int64_t N, H, L, S, D;
  double scale, p;
  uint64_t seed, offset;  // Philox stream of the dropout draws
};

Args make_args(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, double scale, double p,
               const RandomSpec& spec) {
  return Args{q.data_ptr(), k.data_ptr(),  v.data_ptr(), q.stride(0), q.stride(1), k.stride(0),
              k.stride(1),  v.stride(0),   v.stride(1),  q.size(0),   H,           q.size(1),
              k.size(1),    q.size(2) / H, scale,        p,           spec.seed,   spec.offset};
}

// Typed views of one (batch entry, head) task's rows.
template <class T>
struct Task {
  const T *q, *k, *v;
  int64_t qs, ks, vs;  // row strides
  int64_t t;           // task index n * H + h: its weights are elements [t L S, (t + 1) L S) of (N, H, L, S)
};

template <class T>
Task<T> task(const Args& a, int64_t t) {
  const int64_t n = t / a.H, h = t % a.H;
  return Task<T>{static_cast<const T*>(a.q) + n * a.qs0 + h * a.D,
                 static_cast<const T*>(a.k) + n * a.ks0 + h * a.D,
                 static_cast<const T*>(a.v) + n * a.vs0 + h * a.D,
                 a.qs1,
                 a.ks1,
                 a.vs1,
                 t};
}

// s (br x bc, row stride kBlock) = Q[i0, i0 + br) K[j0, j0 + bc)^T * scale:
// one block of scores, computed in forward and again in backward.
template <class T>
void block_scores(const Args& a, const Task<T>& tk, int64_t i0, int64_t br, int64_t j0, int64_t bc, T* s) {
  gemm<T>(false, true, br, bc, a.D, static_cast<T>(a.scale), tk.q + i0 * tk.qs, tk.qs, tk.k + j0 * tk.ks, tk.ks, T(0),
          s, kBlock);
}

// How many keys of block [j0, j0 + bc) query i sees: those with j <= i + S - L.
inline int64_t visible(const Args& a, int64_t i, int64_t j0, int64_t bc) {
  return std::clamp<int64_t>(i + a.S - a.L - j0 + 1, 0, bc);
}

// The dropout multipliers (0 or 1/(1-p)) of the block rows [i0, i0 + br) x
// keys [j0, j0 + bc) of task t, into f (row stride kBlock). Element e of the
// (N, H, L, S) weights takes word e % 4 of Philox counter offset + e / 4, as
// cpu_dropout (ops/dropout.cpp) and the composed path draw it, so forward,
// backward and the composed path all see one mask.
template <class T>
void dropout_block(const Args& a, int64_t t, int64_t i0, int64_t br, int64_t j0, int64_t bc, T* f) {
  const uint32_t th = dropout_threshold(a.p);
  const T sc = static_cast<T>(1.0 / (1.0 - a.p));
  alignas(64) uint32_t bits[64];
  for (int64_t r = 0; r < br; ++r) {
    const int64_t e0 = (t * a.L + i0 + r) * a.S + j0, e1 = e0 + bc;
    for (int64_t c = e0 / 4; 4 * c < e1; c += 16) {  // 16 counters = 64 elements per block
      cpu::philox_block16(a.seed, a.offset + static_cast<uint64_t>(c), bits);
      const int64_t lo = std::max(e0, 4 * c), hi = std::min(e1, 4 * c + 64);
      for (int64_t e = lo; e < hi; ++e) f[r * kBlock + e - e0] = (bits[e - 4 * c] >> 8) >= th ? sc : T(0);
    }
  }
}

// out (N, L, E) contiguous, lse (N, H, L).
//
// Per query block Qb (rows i0 .. i0 + br), over the key blocks it can see:
//   s = Qb Kb^T scale;  m' = max(m, rowmax s);  p = exp(s - m');
//   l = l exp(m - m') + rowsum p;  acc = acc exp(m - m') + (p * f) Vb;
// then O = acc / l and lse = m + log l. The running sum l takes p before
// dropout (softmax normalises the undropped weights), acc takes it after.
template <class T>
void forward_kernel(const Args& a, T* out, T* lse) {
  const int64_t E = a.H * a.D;
  parallel_for(0, a.N * a.H, 1, [&](int64_t lo, int64_t hi) {
    alignas(64) T s[kBlock * kBlock], f[kBlock * kBlock];
    T m[kBlock], l[kBlock];
    for (int64_t t = lo; t < hi; ++t) {
      const Task<T> tk = task<T>(a, t);
      T* o = out + (t / a.H) * a.L * E + (t % a.H) * a.D;
      for (int64_t i0 = 0; i0 < a.L; i0 += kBlock) {
        const int64_t br = std::min(kBlock, a.L - i0);
        const int64_t jend = std::min(a.S, i0 + br + a.S - a.L);  // keys the block's last row sees
        std::fill(m, m + br, -std::numeric_limits<T>::infinity());
        std::fill(l, l + br, T(0));
        for (int64_t r = 0; r < br; ++r) std::fill(o + (i0 + r) * E, o + (i0 + r) * E + a.D, T(0));
        for (int64_t j0 = 0; j0 < jend; j0 += kBlock) {
          const int64_t bc = std::min(kBlock, jend - j0);
          block_scores<T>(a, tk, i0, br, j0, bc, s);
          for (int64_t r = 0; r < br; ++r) {
            T* sr = s + r * kBlock;
            const int64_t nv = visible(a, i0 + r, j0, bc);
            T mx = m[r];
            for (int64_t j = 0; j < nv; ++j) mx = sr[j] > mx ? sr[j] : mx;
#pragma omp simd
            for (int64_t j = 0; j < nv; ++j) sr[j] = exp_fast<T>(sr[j] - mx);
            T sum = 0;  // in index order
            for (int64_t j = 0; j < nv; ++j) sum += sr[j];
            std::fill(sr + nv, sr + bc, T(0));
            if (nv == 0) continue;  // the row's running m, l and acc stand
            const T corr = m[r] == -std::numeric_limits<T>::infinity() ? T(0) : exp_fast<T>(m[r] - mx);
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            if (corr != T(1)) {
              T* orow = o + (i0 + r) * E;
              for (int64_t d = 0; d < a.D; ++d) orow[d] *= corr;
            }
          }
          if (a.p > 0) {
            dropout_block<T>(a, t, i0, br, j0, bc, f);
            for (int64_t r = 0; r < br; ++r)
              for (int64_t j = 0; j < bc; ++j) s[r * kBlock + j] *= f[r * kBlock + j];
          }
          gemm<T>(false, false, br, a.D, bc, T(1), s, kBlock, tk.v + j0 * tk.vs, tk.vs, T(1), o + i0 * E, E);
        }
        for (int64_t r = 0; r < br; ++r) {
          const T inv = T(1) / l[r];
          T* orow = o + (i0 + r) * E;
          for (int64_t d = 0; d < a.D; ++d) orow[d] *= inv;
          lse[t * a.L + i0 + r] = m[r] + std::log(l[r]);
        }
      }
    }
  });
}

// A few queries against many keys without dropout (decoding with a KV
// cache: one new token against the context): each query row on its own, its
// scores against every visible key as dot products, one softmax over them,
// then O = sum_j w_j V_j row by row of V. The same math as forward_kernel,
// which at one query row would pack each 64-key block of K and of V for two
// GEMMs of one row each; here K and V are read once, in place. In float32
// arithmetic on AVX-512, ops/decode_attention_avx512.h; otherwise (float64, other
// head widths) decode_kernel's loops: the heads split into one group per
// thread, a group's heads side by side, key by key.
constexpr int64_t kDecodeRows = 4;

// T: the arithmetic (float32 for float32 and bfloat16 arrays, float64 for
// float64); S: the arrays' element. lse may be null (no backward to feed).
template <class T, class S = T>
void decode_kernel(const Args& a, S* out, T* lse) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::decode_attention_supported(a.H, a.D, a.S)) {
      cpu::DecodeAttention d{
          a.q, a.k, a.v, std::is_same_v<S, bfloat16>, a.qs0, a.qs1, a.ks0, a.ks1, a.vs0, a.vs1, a.N, a.H,
          a.L, a.S, a.D, static_cast<float>(a.scale), out,   lse};
      return cpu::decode_attention(d);
    }
  }
  const int64_t E = a.H * a.D, D = a.D, L = a.L;
  const int64_t G = std::min<int64_t>(a.H, num_threads());  // head groups
  parallel_for(0, a.N * G, 1, [&](int64_t lo, int64_t hi) {
    // Per thread: the group's scores (S apiece per head), query and output rows in T.
    thread_local std::vector<T> scores, qrow, acc;
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / G, g = t % G, h0 = g * a.H / G, nh = (g + 1) * a.H / G - h0, w = nh * D;
      if (static_cast<int64_t>(scores.size()) < nh * a.S) scores.resize(static_cast<size_t>(nh * a.S));
      if (static_cast<int64_t>(qrow.size()) < w)
        qrow.resize(static_cast<size_t>(w)), acc.resize(static_cast<size_t>(w));
      T *sc = scores.data(), *q = qrow.data(), *o = acc.data();
      const S* K = static_cast<const S*>(a.k) + n * a.ks0 + h0 * D;
      const S* V = static_cast<const S*>(a.v) + n * a.vs0 + h0 * D;
      for (int64_t i = 0; i < L; ++i) {
        const S* qs = static_cast<const S*>(a.q) + n * a.qs0 + i * a.qs1 + h0 * D;
        for (int64_t e = 0; e < w; ++e) q[e] = static_cast<T>(qs[e]);
        const int64_t nv = i + a.S - L + 1;  // keys 0 .. i + S - L
        for (int64_t j = 0; j < nv; ++j) {
          const S* kr = K + j * a.ks1;
          for (int64_t hh = 0; hh < nh; ++hh) {
            T dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < D; ++d) dot += q[hh * D + d] * static_cast<T>(kr[hh * D + d]);
            sc[hh * a.S + j] = dot * static_cast<T>(a.scale);
          }
        }
        T sums[64];  // nh <= H <= 64 (more heads take the general kernel)
        for (int64_t hh = 0; hh < nh; ++hh) {
          T* r = sc + hh * a.S;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j < nv; ++j) mx = r[j] > mx ? r[j] : mx;
          T sum = 0;
          for (int64_t j = 0; j < nv; ++j) sum += r[j] = exp_fast<T>(r[j] - mx);
          sums[hh] = sum;
          if (lse) lse[(n * a.H + h0 + hh) * L + i] = mx + std::log(sum);
        }
        std::fill(o, o + w, T(0));
        for (int64_t j = 0; j < nv; ++j) {
          const S* vr = V + j * a.vs1;
          for (int64_t hh = 0; hh < nh; ++hh) {
            const T wt = sc[hh * a.S + j];
            T* oh = o + hh * D;
            const S* vh = vr + hh * D;
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) oh[d] += wt * static_cast<T>(vh[d]);
          }
        }
        S* os = out + n * L * E + i * E + h0 * D;
        for (int64_t hh = 0; hh < nh; ++hh) {
          const T inv = T(1) / sums[hh];
          for (int64_t d = 0; d < D; ++d) os[hh * D + d] = static_cast<S>(o[hh * D + d] * inv);
        }
      }
    }
  });
}

// g = dO and out = O (N, L, E), unit last stride; dq (N, L, E), dk and dv
// (N, S, E): views with unit last stride, or null when not wanted.
//
// With W = exp(S - lse) recomputed per block, f the dropout multipliers and
// Delta_i = dO_i . O_i (= rowsum(dW * W), since O = (W * f) V):
//   dV_j += (W * f)^T dO_i                 (O = Wd V, term by term over query blocks)
//   dW    = (dO_i V_j^T) * f               (back through Wd = W * f)
//   dS    = W * (dW - Delta_i)             (softmax's backward, row by row)
//   dQ_i += dS K_j scale;  dK_j += dS^T Q_i scale.
// dK and dV accumulate over query blocks, dQ over key blocks; a task owns its
// head's columns, so no two threads write one element.
template <class T>
void backward_kernel(const Args& a, const T* lse, const T* g, int64_t gs0, int64_t gs1, const T* out, T* dq,
                     int64_t dqs0, int64_t dqs1, T* dk, int64_t dks0, int64_t dks1, T* dv, int64_t dvs0, int64_t dvs1) {
  const int64_t E = a.H * a.D;
  parallel_for(0, a.N * a.H, 1, [&](int64_t lo, int64_t hi) {
    alignas(64) T w[kBlock * kBlock], f[kBlock * kBlock], dw[kBlock * kBlock], wd[kBlock * kBlock];
    T delta[kBlock];
    for (int64_t t = lo; t < hi; ++t) {
      const Task<T> tk = task<T>(a, t);
      const int64_t n = t / a.H, h = t % a.H;
      const T* gh = g + n * gs0 + h * a.D;
      const T* oh = out + n * a.L * E + h * a.D;
      T* dqh = dq ? dq + n * dqs0 + h * a.D : nullptr;
      T* dkh = dk ? dk + n * dks0 + h * a.D : nullptr;
      T* dvh = dv ? dv + n * dvs0 + h * a.D : nullptr;
      for (int64_t j = 0; j < a.S; ++j) {
        if (dkh) std::fill(dkh + j * dks1, dkh + j * dks1 + a.D, T(0));
        if (dvh) std::fill(dvh + j * dvs1, dvh + j * dvs1 + a.D, T(0));
      }
      for (int64_t i0 = 0; i0 < a.L; i0 += kBlock) {
        const int64_t br = std::min(kBlock, a.L - i0);
        const int64_t jend = std::min(a.S, i0 + br + a.S - a.L);
        for (int64_t r = 0; r < br; ++r) {
          const T *gr = gh + (i0 + r) * gs1, *orow = oh + (i0 + r) * E;
          T dot = 0;
          for (int64_t d = 0; d < a.D; ++d) dot += gr[d] * orow[d];
          delta[r] = dot;
          if (dqh) std::fill(dqh + (i0 + r) * dqs1, dqh + (i0 + r) * dqs1 + a.D, T(0));
        }
        for (int64_t j0 = 0; j0 < jend; j0 += kBlock) {
          const int64_t bc = std::min(kBlock, jend - j0);
          block_scores<T>(a, tk, i0, br, j0, bc, w);
          for (int64_t r = 0; r < br; ++r) {
            T* wr = w + r * kBlock;
            const int64_t nv = visible(a, i0 + r, j0, bc);
            const T ls = lse[t * a.L + i0 + r];
#pragma omp simd
            for (int64_t j = 0; j < nv; ++j) wr[j] = exp_fast<T>(wr[j] - ls);
            std::fill(wr + nv, wr + bc, T(0));
          }
          const T* wdrop = w;
          if (a.p > 0) {
            dropout_block<T>(a, t, i0, br, j0, bc, f);
            for (int64_t r = 0; r < br; ++r)
              for (int64_t j = 0; j < bc; ++j) wd[r * kBlock + j] = w[r * kBlock + j] * f[r * kBlock + j];
            wdrop = wd;
          }
          if (dvh)
            gemm<T>(true, false, bc, a.D, br, T(1), wdrop, kBlock, gh + i0 * gs1, gs1, T(1), dvh + j0 * dvs1, dvs1);
          if (!dqh && !dkh) continue;
          gemm<T>(false, true, br, bc, a.D, T(1), gh + i0 * gs1, gs1, tk.v + j0 * tk.vs, tk.vs, T(0), dw, kBlock);
          for (int64_t r = 0; r < br; ++r) {
            T* dr = dw + r * kBlock;
            const T* wr = w + r * kBlock;
            const T* fr = f + r * kBlock;
            if (a.p > 0)
              for (int64_t j = 0; j < bc; ++j) dr[j] = wr[j] * (dr[j] * fr[j] - delta[r]);
            else
              for (int64_t j = 0; j < bc; ++j) dr[j] = wr[j] * (dr[j] - delta[r]);
          }
          const T sc = static_cast<T>(a.scale);
          if (dqh)
            gemm<T>(false, false, br, a.D, bc, sc, dw, kBlock, tk.k + j0 * tk.ks, tk.ks, T(1), dqh + i0 * dqs1, dqs1);
          if (dkh)
            gemm<T>(true, false, bc, a.D, br, sc, dw, kBlock, tk.q + i0 * tk.qs, tk.qs, T(1), dkh + j0 * dks1, dks1);
        }
      }
    }
  });
}

using Params = CausalAttentionParams;

void cpu_causal_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Params& pr, Tensor& out, Tensor& lse) {
  const Args a = make_args(q, k, v, pr.heads, pr.scale, pr.p, pr.spec);
  if (a.L <= kDecodeRows && a.S > a.L && a.p == 0 && a.H <= 64) {
    if (q.dtype() == DType::Float32)
      decode_kernel<float>(a, static_cast<float*>(out.data_ptr()), static_cast<float*>(lse.data_ptr()));
    else
      decode_kernel<double>(a, static_cast<double*>(out.data_ptr()), static_cast<double*>(lse.data_ptr()));
    return;
  }
  if (q.dtype() == DType::Float32)
    forward_kernel<float>(a, static_cast<float*>(out.data_ptr()), static_cast<float*>(lse.data_ptr()));
  else
    forward_kernel<double>(a, static_cast<double*>(out.data_ptr()), static_cast<double*>(lse.data_ptr()));
}

template <class T>
void cpu_causal_backward_t(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& lse, const Params& pr, Tensor& dq, Tensor& dk, Tensor& dv) {
  auto ptr = [](Tensor& x) { return x.defined() ? static_cast<T*>(x.data_ptr()) : nullptr; };
  auto st = [](const Tensor& x, int i) { return x.defined() ? x.stride(i) : 0; };
  backward_kernel<T>(make_args(q, k, v, pr.heads, pr.scale, pr.p, pr.spec), static_cast<const T*>(lse.data_ptr()),
                     static_cast<const T*>(g.data_ptr()), g.stride(0), g.stride(1),
                     static_cast<const T*>(out.data_ptr()), ptr(dq), st(dq, 0), st(dq, 1), ptr(dk), st(dk, 0),
                     st(dk, 1), ptr(dv), st(dv, 0), st(dv, 1));
}

void cpu_causal_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Params& pr, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (q.dtype() == DType::Float32)
    cpu_causal_backward_t<float>(g, q, k, v, out, lse, pr, dq, dk, dv);
  else
    cpu_causal_backward_t<double>(g, q, k, v, out, lse, pr, dq, dk, dv);
}

using detail::causal_backward_kernel;
using detail::causal_forward_kernel;
EMBER_REGISTER_KERNEL(causal_forward_kernel, CPU, cpu_causal_forward);
EMBER_REGISTER_KERNEL(causal_backward_kernel, CPU, cpu_causal_backward);

// Neither op is on an autocast list (PyTorch 1.13's has no fused attention).
// The fused kernels compute float32 and float64, and on CUDA bfloat16 and
// float16 at head dims 64 and 128 (tensor cores); other 16-bit inputs, and
// devices without the kernels, take the composed path (multi_head_attention
// with a causal mask, which has its own bf16 path). FLOPs: the kept half of
// S = Q K^T and O = W V, about 2 N L S E.
void lower_causal_attention(lowering::Graph& g, const lowering::Call& c) {
  EMBER_CHECK(c.f(4) == 0.0, ValueError, "ONNX export: causal_attention ran with attention dropout (training mode)");
  const int64_t heads = c.i(3), E = c.tensor(0).size(-1);
  g.bind(c.outputs[0], lowering::attention(g, g.value(c.tensor(0)), g.value(c.tensor(1)), g.value(c.tensor(2)), heads,
                                           E / heads, "", true));
}
void lower_causal_self_attention(lowering::Graph& g, const lowering::Call& c) {
  EMBER_CHECK(c.f(2) == 0.0, ValueError,
              "ONNX export: causal_self_attention ran with attention dropout (training mode)");
  const int64_t heads = c.i(1), E = c.tensor(0).size(-1) / 3;
  const auto qkv = g.node("Split", {g.value(c.tensor(0)), g.constant_ints({E, E, E})}, {{"axis", int64_t{-1}}}, 3);
  g.bind(c.outputs[0], lowering::attention(g, qkv[0], qkv[1], qkv[2], heads, E / heads, "", true));
}
constexpr OpDef causal_attention_op{
    .name = "causal_attention",
    .half = Half::InBody,
    .fast_paths = {{{.table = &causal_forward_kernel,
                     .without = "multi_head_attention with causal_attention_mask (the (L, S) weights materialised)"}}},
    .flops = [](const Tensor* const* in, int, const Tensor& out) { return 2 * out.numel() * in[1]->size(1); },
    .onnx = lower_causal_attention,
};
constexpr OpDef causal_self_attention_op{
    .name = "causal_self_attention",
    .half = Half::InBody,
    .fast_paths = {{{.table = &causal_forward_kernel,
                     .without =
                         "multi_head_self_attention with causal_attention_mask (the (T, T) weights materialised)"}}},
    .flops = [](const Tensor* const*, int, const Tensor& out) { return 2 * out.numel() * out.size(1); },
    .onnx = lower_causal_self_attention,
};
EMBER_REGISTER_OP(causal_attention_op);
EMBER_REGISTER_OP(causal_self_attention_op);

// Whether the fused kernels take q (width E = H * D): float32 or float64 on
// a device that registered them; on CUDA only heads up to
// kCudaCausalMaxHeadDim wide (the kernels keep a row's D accumulators in
// registers, four per lane), wider ones run the composed path; bfloat16 and
// float16 on CUDA at the head dims of its tensor-core kernels.
template <const OpDef& D>
bool fused(const Tensor& q, int64_t H) {
  if (!op::fast_path<D>(causal_forward_kernel, q.device())) return false;
  const bool cuda = q.device().type == DeviceType::CUDA;
  if (cuda && detail::cuda_causal_tensor_core(q.dtype(), q.size(2) / H)) return true;
  if (q.dtype() != DType::Float32 && q.dtype() != DType::Float64) return false;
  return !cuda || q.size(2) / H <= detail::kCudaCausalMaxHeadDim;
}

// The fused path: forward through the table, and a node whose backward runs
// the backward kernel into dq, dk, dv made by make_grads (one packed
// gradient for causal_self_attention, three for causal_attention).
struct Saved {
  Tensor lse;
  Params pr;
};

Saved run_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, double p, Generator* gen, Tensor& out) {
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  Saved sv;
  sv.pr = Params{H, 1.0 / std::sqrt(static_cast<double>(q.size(2) / H)), p,
                 RandomSpec{RandomKind::Uniform, 0, 0, 0.0, 1.0}};
  if (p > 0) {
    // As many counters as the composed path reserves for (N, H, L, S) weights.
    Generator& g = gen ? *gen : default_generator();
    sv.pr.spec =
        reserve_random(RandomKind::Uniform, g, (static_cast<uint64_t>(N * H * L * S) + 3) / 4, q.device(), 0.0, 1.0);
  }
  const TensorOptions o(q.dtype(), q.device());
  out = empty({N, L, q.size(2)}, o);
  // 16-bit inputs keep the log-sum-exp in float32, as their arithmetic is.
  const bool half = q.dtype() == DType::BFloat16 || q.dtype() == DType::Float16;
  sv.lse = empty({N, H, L}, half ? TensorOptions(DType::Float32, q.device()) : o);
  if (out.numel() > 0) causal_forward_kernel(q.device(), q, k, v, sv.pr, out, sv.lse);
  return sv;
}

void check(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t H, double p) {
  detail::check_attention_inputs(op, q, k, v, H, Tensor(), p);
  EMBER_CHECK(k.size(1) >= q.size(1), ShapeError, op,
              ": causal attention needs at least as many keys as queries, got q ", q.shape().str(), " and k ",
              k.shape().str());
}

// The fused kernel's backward: it recomputes each block's weights from the
// saved log-sum-exp (and redraws the dropout mask from sv.pr's counters);
// q, k, v are the unit-stride copies the forward ran on, out its output.
void causal_attention_backward(autograd::BackwardContext& ctx, const autograd::SavedTensor& sq,
                               const autograd::SavedTensor& sk, const autograd::SavedTensor& svv,
                               const autograd::SavedTensor& so, const Saved& sv) {
  const Tensor &q = sq.get(), &k = sk.get(), &v = svv.get();
  auto grad = [&](int i, const Tensor& like) {
    return ctx.needs_grad(i) ? empty(like.shape(), TensorOptions(like.dtype(), like.device())) : Tensor();
  };
  Tensor dq = grad(0, q), dk = grad(1, k), dv = grad(2, v);
  causal_backward_kernel(q.device(), detail::unit_last(ctx.grad_output()), q, k, v, so.get(), sv.lse, sv.pr, dq, dk,
                         dv);
  if (dq.defined()) ctx.set_grad(0, dq);
  if (dk.defined()) ctx.set_grad(1, dk);
  if (dv.defined()) ctx.set_grad(2, dv);
}

}  // namespace

Tensor causal_attention_mask(int64_t L, int64_t S, Device device) {
  EMBER_CHECK(L >= 0 && S >= L, ShapeError, "causal_attention_mask: needs 0 <= L <= S, got L = ", L, ", S = ", S);
  // Query i sits at position i + (S - L) of the keys.
  const TensorOptions o(DType::Int64, device);
  const Tensor rows = arange(static_cast<double>(S - L), static_cast<double>(S), 1.0, o).unsqueeze(1);
  const Tensor cols = arange(static_cast<double>(S), o).unsqueeze(0);
  return gt(cols, rows);
}

namespace {

Tensor causal_attention_body(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads, double dropout_p,
                             Generator* gen) {
  check("causal_attention", q, k, v, num_heads, dropout_p);
  // bfloat16 queries, keys and values on the CPU without a graph (a KV cache
  // kept in bfloat16 under autocast, decoding): the decode loops, in float32.
  const bool bf16 = q.dtype() == DType::BFloat16 && k.dtype() == DType::BFloat16 && v.dtype() == DType::BFloat16;
  if (bf16 && q.device().is_cpu() && q.size(1) <= kDecodeRows && k.size(1) > q.size(1) && dropout_p == 0 &&
      num_heads <= 64 && !autograd::needs_grad({q, k, v})) {
    const Tensor qp = detail::unit_last(q), kp = detail::unit_last(k), vp = detail::unit_last(v);
    Tensor out = empty({q.size(0), q.size(1), q.size(2)}, TensorOptions(DType::BFloat16, q.device()));
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2) / num_heads));
    decode_kernel<float, bfloat16>(make_args(qp, kp, vp, num_heads, scale, 0.0, RandomSpec{}),
                                   static_cast<bfloat16*>(out.data_ptr()), nullptr);
    return out;
  }
  if (!fused<causal_attention_op>(q, num_heads))
    return multi_head_attention(q, k, v, num_heads, causal_attention_mask(q.size(1), k.size(1), q.device()), dropout_p,
                                gen);
  const Tensor qp = detail::unit_last(q), kp = detail::unit_last(k), vp = detail::unit_last(v);
  Tensor out;
  Saved sv = run_forward(qp, kp, vp, num_heads, dropout_p, gen, out);
  if (autograd::needs_grad({q, k, v}))
    autograd::record("causal_attention", {q, k, v}, out,
                     [sq = autograd::SavedTensor(qp), sk = autograd::SavedTensor(kp), svv = autograd::SavedTensor(vp),
                      so = autograd::SavedTensor(out), sv = std::move(sv)](autograd::BackwardContext& ctx) {
                       causal_attention_backward(ctx, sq, sk, svv, so, sv);
                     });
  return out;
}

Tensor causal_self_attention_body(const Tensor& qkv, int64_t num_heads, double dropout_p, Generator* gen) {
  EMBER_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % 3 == 0, ShapeError,
              "causal_self_attention: expected a packed projection (N, T, 3E), got ",
              qkv.defined() ? qkv.shape().str() : std::string("an undefined tensor"));
  const int64_t E = qkv.size(2) / 3, T = qkv.size(1);
  const Tensor packed = detail::unit_last(qkv);
  const Tensor q = packed.narrow(2, 0, E), k = packed.narrow(2, E, E), v = packed.narrow(2, 2 * E, E);
  check("causal_self_attention", q, k, v, num_heads, dropout_p);
  if (!fused<causal_self_attention_op>(q, num_heads))
    return multi_head_self_attention(qkv, num_heads, causal_attention_mask(T, T, qkv.device()), dropout_p, gen);
  Tensor out;
  Saved sv = run_forward(q, k, v, num_heads, dropout_p, gen, out);
  if (autograd::needs_grad({qkv}))
    autograd::record("causal_self_attention", {qkv}, out,
                     [sp = autograd::SavedTensor(packed), so = autograd::SavedTensor(out), sv = std::move(sv),
                      E](autograd::BackwardContext& ctx) {
                       const Tensor& x = sp.get();
                       // The three slices of one gradient, each written by its GEMMs.
                       Tensor d = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
                       Tensor dq = d.narrow(2, 0, E), dk = d.narrow(2, E, E), dv = d.narrow(2, 2 * E, E);
                       causal_backward_kernel(x.device(), detail::unit_last(ctx.grad_output()), x.narrow(2, 0, E),
                                              x.narrow(2, E, E), x.narrow(2, 2 * E, E), so.get(), sv.lse, sv.pr, dq, dk,
                                              dv);
                       ctx.set_grad(0, d);
                     });
  return out;
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads, double dropout_p,
                        Generator* gen) {
  return op::call<causal_attention_op>(causal_attention_body, q, k, v, num_heads, dropout_p, gen);
}

Tensor causal_self_attention(const Tensor& qkv, int64_t num_heads, double dropout_p, Generator* gen) {
  return op::call<causal_self_attention_op>(causal_self_attention_body, qkv, num_heads, dropout_p, gen);
}

}  // namespace ember
