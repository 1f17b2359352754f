// CUDA kernels of ops/loss.cpp: cross_entropy fused with log_softmax
// (forward keeps each row's logsumexp for the backward), nll_loss, and
// binary_cross_entropy_with_logits (elementwise, through cuda/loops.cuh with
// the scalar formulas of ops/loss.h).
//
// Rows: logits3 is [N, C, L]; row r = (n, l) reads C values of stride L.
// L == 1 (the classifier case) gives each row a warp (up to 4096 classes)
// or a block (more, e.g. GPT-2's 50257), which reads the row once in 16-byte
// loads with an online max and sum; the backward writes the gradient the
// same way. L > 1: one thread per row, neighbouring threads on neighbouring l.
// A mean or sum is finished in the forward launch (the last block to finish
// sums the rows' losses in a fixed order and divides by the device's count),
// and the backward divides the upstream gradient by that count itself.
#include <limits>

#include <ember/core/dtype_dispatch.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/loss.h>
#include <ember/cuda/block_reduce.cuh>
#include <ember/cuda/loops.cuh>

namespace ember::cuda {
namespace {

// The threads that share a row of the classifier case (L == 1): a warp when
// C is at most kWarpRowMax (a block of kRowsPerBlock warps takes as many rows
// at once and needs no barrier), the whole block above it.
constexpr int64_t kWarpRowMax = 4096;
constexpr int kRowsPerBlock = 8;
template <bool kWarp>
struct RowGroup {
  static __device__ __forceinline__ int lane() { return kWarp ? int(threadIdx.x % 32) : int(threadIdx.x); }
  static __device__ __forceinline__ int size() { return kWarp ? 32 : int(blockDim.x); }
  static __device__ __forceinline__ int64_t first() {
    return kWarp ? int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32 : int64_t(blockIdx.x);
  }
  static __device__ __forceinline__ int64_t stride() {
    return kWarp ? int64_t(gridDim.x) * (blockDim.x / 32) : int64_t(gridDim.x);
  }
  // scratch: __shared__ A[32] (the block case only).
  template <class A, class Op>
  static __device__ __forceinline__ A reduce(A v, Op op, A identity, A* scratch) {
    if constexpr (kWarp)
      return warp_reduce(v, op);
    else
      return block_reduce(v, op, identity, scratch);
  }
};

// Elements of a contiguous row of C values before the first 16-byte aligned
// one (all of them when the row is not even element-aligned).
template <class T>
__device__ __forceinline__ int64_t aligned_head(const T* row, int64_t C) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(row);
  const int64_t head = a % sizeof(T) ? C : int64_t((16 - a % 16) % 16 / sizeof(T));
  return head < C ? head : C;
}

// f(c, x_c) for the columns c of a row that thread `lane` of `n` owns: a
// ragged head and tail one element at a time, the aligned middle in 16-byte
// loads (4 float32, 8 bfloat16 / float16, 2 float64), lane k taking every
// n-th vector, so a warp reads 512 contiguous bytes at a time. Every element
// is read exactly once.
template <class T, class F>
__device__ __forceinline__ void visit_row(const T* row, int64_t C, int lane, int n, F&& f) {
  constexpr int V = 16 / sizeof(T);
  const int64_t head = aligned_head(row, C), nvec = (C - head) / V;
  for (int64_t c = lane; c < head; c += n) f(c, row[c]);
  const VecOf<T, V>* vp = reinterpret_cast<const VecOf<T, V>*>(row + head);
  for (int64_t k = lane; k < nvec; k += n) {
    const VecOf<T, V> v = vp[k];
#pragma unroll
    for (int j = 0; j < V; ++j) f(head + k * V + j, v.v[j]);
  }
  for (int64_t c = head + nvec * V + lane; c < C; c += n) f(c, row[c]);
}

// The online log-sum-exp: a running max m and s = sum exp(x - m), s rescaled
// by exp(m_old - m_new) when the max rises, so the row is read once. -inf
// adds nothing (exp(-inf - -inf) would be NaN); a NaN propagates into s.
template <class A>
__device__ __forceinline__ void lse_add(A x, A& m, A& s) {
  if (x > m) {
    s = s * fn::hd::exp(m - x) + A(1);
    m = x;
  } else if (x != -std::numeric_limits<A>::infinity()) {
    s += fn::hd::exp(x - m);
  }
}
// The rows' reduction inside the forward launch (reduced null: none):
// reduced = sum_r loss[r] / *count (1 without a count).
template <class A>
struct RowsReduce {
  A* reduced;
  const int64_t* count;
  unsigned int* counter;  // grid_counter(device)
};

// At the end of a forward kernel, every thread of every block: the block's
// losses are fenced and counted; the last block to finish sums all R of
// them (thread k takes rows k, k + blockDim.x, ..., then the block's tree),
// an order fixed by R and blockDim alone, so a replayed graph and an eager
// call give the same bits. scratch: __shared__ A[32]; last: a __shared__ bool.
template <class A>
__device__ __forceinline__ void reduce_rows_in_last_block(const A* loss, int64_t R, const RowsReduce<A>& red,
                                                          A* scratch, bool* last) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *last = atomicAdd(red.counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!*last) return;
  __threadfence();
  const volatile A* l = loss;  // other blocks' stores: from memory, not a stale cache
  // Eight loads issued before their sums, so eight are in flight, not one
  // (256 threads over 65,536 rows take 256 each); the additions keep the
  // order r, so the sum's bits do not change.
  constexpr int kAhead = 8;
  A s = 0;
  int64_t r = threadIdx.x;
  for (; r + (kAhead - 1) * int64_t(blockDim.x) < R; r += kAhead * int64_t(blockDim.x)) {
    A v[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) v[u] = l[r + u * int64_t(blockDim.x)];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) s += v[u];
  }
  for (; r < R; r += blockDim.x) s += l[r];
  s = block_reduce(s, SumOp{}, A(0), scratch);
  if (threadIdx.x == 0) {
    *red.reduced = red.count ? s / A(*red.count) : s;
    *red.counter = 0u;
  }
}

// loss = lse - (1 - eps) x_t - eps / C sum_c x_c (the smoothed target
// distribution q = (1 - eps) onehot + eps / C against log p = x - lse).
// Logits of T load as A = opmath_t<T>; loss and lse are A (float32 for the
// 16-bit types, so the reduction over rows is float32 too). Each thread
// keeps its own (max, sum) over its columns; the group reduces the maxes,
// then the sums rescaled to the group's max (a thread that saw nothing, or
// only -inf, adds 0).
template <class T, bool kWarp>
__global__ void cross_entropy_rows_kernel(const T* __restrict__ x, const int64_t* __restrict__ t, opmath_t<T>* loss,
                                          opmath_t<T>* __restrict__ lse, int64_t rows, int64_t C, int64_t ignore,
                                          opmath_t<T> keep, opmath_t<T> spread, bool smooth,
                                          RowsReduce<opmath_t<T>> red) {
  using A = opmath_t<T>;
  using G = RowGroup<kWarp>;
  __shared__ A scratch[32];
  __shared__ bool last;
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  for (int64_t r = G::first(); r < rows; r += G::stride()) {
    const int64_t tr = t[r];
    // Out of range only inside a replayed CUDA graph, whose index check
    // reports it after the replay: never read outside the row.
    if (tr == ignore || tr < 0 || tr >= C) {  // the same branch for the whole group
      if (G::lane() == 0) loss[r] = lse[r] = A(0);
      continue;
    }
    const T* row = x + r * C;
    A m = kNegInf, s = 0, sx = 0;
    visit_row(row, C, G::lane(), G::size(), [&](int64_t, T v) {
      lse_add(A(v), m, s);
      if (smooth) sx += A(v);
    });
    // The group's max first, then every partial sum rescaled to it.
    const A mx = G::reduce(m, MaxOp{}, kNegInf, scratch);
    const A sum = G::reduce(s != A(0) ? s * fn::hd::exp(m - mx) : A(0), SumOp{}, A(0), scratch);
    if (smooth) sx = G::reduce(sx, SumOp{}, A(0), scratch);
    if (G::lane() == 0) {
      const A l = mx + fn::hd::log(sum);
      lse[r] = l;
      loss[r] = l - keep * A(row[tr]) - (smooth ? spread * sx : A(0));
    }
  }
  if (red.reduced) reduce_rows_in_last_block(loss, rows, red, scratch, &last);
}

template <class T>
__global__ void cross_entropy_cols_kernel(const T* __restrict__ x, const int64_t* __restrict__ t, opmath_t<T>* loss,
                                          opmath_t<T>* __restrict__ lse, int64_t N, int64_t C, int64_t L,
                                          int64_t ignore, opmath_t<T> keep, opmath_t<T> spread, bool smooth,
                                          RowsReduce<opmath_t<T>> red) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  __shared__ bool last;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < N * L; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tr = t[r];
    if (tr == ignore || tr < 0 || tr >= C) {
      loss[r] = lse[r] = A(0);
      continue;
    }
    const T* row = x + (r / L) * C * L + r % L;
    A mx = -std::numeric_limits<A>::infinity();
    for (int64_t c = 0; c < C; ++c) mx = A(row[c * L]) > mx ? A(row[c * L]) : mx;
    A s = 0, sx = 0;
    for (int64_t c = 0; c < C; ++c) {
      s += fn::hd::exp(A(row[c * L]) - mx);
      if (smooth) sx += A(row[c * L]);
    }
    const A l = mx + fn::hd::log(s);
    lse[r] = l;
    loss[r] = l - keep * A(row[tr * L]) - (smooth ? spread * sx : A(0));
  }
  if (red.reduced) reduce_rows_in_last_block(loss, N * L, red, scratch, &last);
}

// Row r's upstream gradient, divided by the mean's count when there is one
// (as div(g, count) would, rounded to A before the scale).
template <class A>
__device__ __forceinline__ A row_grad(const A* g, const int64_t* count, int64_t r) {
  return count ? g[r] / A(*count) : g[r];
}

// The classifier case (L == 1) of the backward: a row group per row, the
// logits read and the gradient written in 16-byte accesses where both rows
// share their alignment; lse, the target and g read once per row. The
// probabilities are never stored: d = (exp(x - lse) - eps / C - (1 - eps)
// [c == t]) g_r scale straight from the logits.
template <class T, bool kWarp>
__global__ void cross_entropy_backward_rows_kernel(const T* __restrict__ x, const int64_t* __restrict__ t,
                                                   const opmath_t<T>* __restrict__ lse,
                                                   const opmath_t<T>* __restrict__ g, const int64_t* __restrict__ count,
                                                   T* __restrict__ d, int64_t rows, int64_t C, int64_t ignore,
                                                   opmath_t<T> keep, opmath_t<T> spread, opmath_t<T> scale,
                                                   bool per_row) {
  using A = opmath_t<T>;
  using G = RowGroup<kWarp>;
  constexpr int V = 16 / sizeof(T);
  for (int64_t r = G::first(); r < rows; r += G::stride()) {
    const int64_t tr = t[r];
    const T* xr = x + r * C;
    T* dr = d + r * C;
    const bool skip = tr == ignore || tr < 0 || tr >= C;
    const A l = skip ? A(0) : lse[r], gr = skip ? A(0) : row_grad(g, count, per_row ? r : 0) * scale;
    auto grad = [&](int64_t c, T v) {
      return skip ? T(0) : T((fn::hd::exp(A(v) - l) - spread - (c == tr ? keep : A(0))) * gr);
    };
    // The head is the x row's; a d row aligned differently goes one element at a time.
    const int64_t head = aligned_head(xr, C) == aligned_head(dr, C) ? aligned_head(xr, C) : C;
    const int64_t nvec = (C - head) / V;
    for (int64_t c = G::lane(); c < head; c += G::size()) dr[c] = grad(c, xr[c]);
    const VecOf<T, V>* xv = reinterpret_cast<const VecOf<T, V>*>(xr + head);
    VecOf<T, V>* dv = reinterpret_cast<VecOf<T, V>*>(dr + head);
    for (int64_t k = G::lane(); k < nvec; k += G::size()) {
      const VecOf<T, V> v = xv[k];
      VecOf<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = grad(head + k * V + j, v.v[j]);
      dv[k] = o;
    }
    for (int64_t c = head + nvec * V + G::lane(); c < C; c += G::size()) dr[c] = grad(c, xr[c]);
  }
}

// The general case (L > 1): one thread per logit.
// d loss / d x_c = (softmax_c - q_c) g_r scale.
template <class T>
__global__ void cross_entropy_backward_kernel_impl(const T* __restrict__ x, const int64_t* __restrict__ t,
                                                   const opmath_t<T>* __restrict__ lse,
                                                   const opmath_t<T>* __restrict__ g, const int64_t* __restrict__ count,
                                                   T* __restrict__ d, int64_t N, int64_t C, int64_t L, int64_t ignore,
                                                   opmath_t<T> keep, opmath_t<T> spread, opmath_t<T> scale,
                                                   bool per_row) {
  using A = opmath_t<T>;
  const int64_t total = N * C * L;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i % L, c = (i / L) % C, n = i / (C * L), r = n * L + l, tr = t[r];
    if (tr == ignore || tr < 0 || tr >= C) {
      d[i] = T(0);
      continue;
    }
    const A gr = row_grad(g, count, per_row ? r : 0) * scale;
    d[i] = T((fn::hd::exp(A(x[i]) - lse[r]) - spread - (c == tr ? keep : A(0))) * gr);
  }
}

// Threads of a block that owns a row of more than kWarpRowMax classes.
constexpr int kBlockRowThreads = 512;

void cuda_cross_entropy(const Tensor& logits3, const Tensor& target, const Tensor& count, Tensor& loss, Tensor& lse,
                        Tensor& reduced, int64_t ignore, double eps) {
  const int64_t N = logits3.size(0), C = logits3.size(1), L = logits3.size(2);
  if (N * L == 0) return;
  const int dev = logits3.device().index;
  const double keep = 1.0 - eps, spread = C > 0 ? eps / static_cast<double>(C) : 0.0;
  dispatch_floating_and_half(logits3.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    const T* x = static_cast<const T*>(logits3.data_ptr());
    A* lo = static_cast<A*>(loss.data_ptr());
    A* ls = static_cast<A*>(lse.data_ptr());
    const RowsReduce<A> red{reduced.defined() ? static_cast<A*>(reduced.data_ptr()) : nullptr,
                            count.defined() ? count.data<int64_t>() : nullptr, grid_counter(dev)};
    if (L == 1 && C <= kWarpRowMax)
      EMBER_CUDA_LAUNCH((cross_entropy_rows_kernel<T, true>), blocks_for(N, kRowsPerBlock, 65535), 32 * kRowsPerBlock,
                        0, dev, x, target.data<int64_t>(), lo, ls, N, C, ignore, A(keep), A(spread), eps > 0, red);
    else if (L == 1)
      EMBER_CUDA_LAUNCH((cross_entropy_rows_kernel<T, false>), blocks_for(N, 1, 65535), kBlockRowThreads, 0, dev, x,
                        target.data<int64_t>(), lo, ls, N, C, ignore, A(keep), A(spread), eps > 0, red);
    else
      EMBER_CUDA_LAUNCH(cross_entropy_cols_kernel<T>, blocks_for(N * L, 128, 4096), 128, 0, dev, x,
                        target.data<int64_t>(), lo, ls, N, C, L, ignore, A(keep), A(spread), eps > 0, red);
  });
}

void cuda_cross_entropy_backward(const Tensor& logits3, const Tensor& target, const Tensor& lse, const Tensor& grad,
                                 const Tensor& count, Tensor& dlogits3, int64_t ignore, double eps, double scale) {
  const int64_t N = logits3.size(0), C = logits3.size(1), L = logits3.size(2);
  if (N * C * L == 0) return;
  const double keep = 1.0 - eps, spread = C > 0 ? eps / static_cast<double>(C) : 0.0;
  dispatch_floating_and_half(logits3.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    const T* x = static_cast<const T*>(logits3.data_ptr());
    const int64_t* t = target.data<int64_t>();
    const A* l = static_cast<const A*>(lse.data_ptr());
    const A* g = static_cast<const A*>(grad.data_ptr());
    const int64_t* n = count.defined() ? count.data<int64_t>() : nullptr;
    T* d = static_cast<T*>(dlogits3.data_ptr());
    const int dev = logits3.device().index;
    const bool per_row = grad.numel() != 1;
    if (L == 1 && C <= kWarpRowMax)
      EMBER_CUDA_LAUNCH((cross_entropy_backward_rows_kernel<T, true>), blocks_for(N, kRowsPerBlock, 65535),
                        32 * kRowsPerBlock, 0, dev, x, t, l, g, n, d, N, C, ignore, A(keep), A(spread), A(scale),
                        per_row);
    else if (L == 1)
      EMBER_CUDA_LAUNCH((cross_entropy_backward_rows_kernel<T, false>), blocks_for(N, 1, 65535), kBlockRowThreads, 0,
                        dev, x, t, l, g, n, d, N, C, ignore, A(keep), A(spread), A(scale), per_row);
    else
      EMBER_CUDA_LAUNCH(cross_entropy_backward_kernel_impl<T>, blocks_for(N * C * L, 256, 8192), 256, 0, dev, x, t, l,
                        g, n, d, N, C, L, ignore, A(keep), A(spread), A(scale), per_row);
  });
}

template <class T>
__global__ void nll_loss_kernel_impl(const T* __restrict__ x, const int64_t* __restrict__ t, T* __restrict__ loss,
                                     int64_t N, int64_t C, int64_t L, int64_t ignore) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < N * L; r += int64_t(gridDim.x) * blockDim.x)
    loss[r] = t[r] == ignore || t[r] < 0 || t[r] >= C ? T(0) : -x[(r / L) * C * L + t[r] * L + r % L];
}

// One thread per element of dlog_probs: -g_r scale where c == t_r, else 0.
template <class T>
__global__ void nll_loss_backward_kernel_impl(const int64_t* __restrict__ t, const T* __restrict__ g, T* __restrict__ d,
                                              int64_t N, int64_t C, int64_t L, int64_t ignore, T scale, bool per_row) {
  const int64_t total = N * C * L;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i % L, c = (i / L) % C, r = (i / (C * L)) * L + l;
    d[i] = (t[r] != ignore && t[r] == c) ? -g[per_row ? r : 0] * scale : T(0);
  }
}

void cuda_nll_loss(const Tensor& lp3, const Tensor& target, Tensor& loss, int64_t ignore) {
  const int64_t N = lp3.size(0), C = lp3.size(1), L = lp3.size(2);
  if (N * L == 0) return;
  dispatch_floating(lp3.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(nll_loss_kernel_impl<T>, blocks_for(N * L, 256, 8192), 256, 0, lp3.device().index,
                      static_cast<const T*>(lp3.data_ptr()), target.data<int64_t>(), static_cast<T*>(loss.data_ptr()),
                      N, C, L, ignore);
  });
}

void cuda_nll_loss_backward(const Tensor& target, const Tensor& grad, Tensor& dlp3, int64_t ignore, double scale) {
  const int64_t N = dlp3.size(0), C = dlp3.size(1), L = dlp3.size(2);
  if (N * C * L == 0) return;
  dispatch_floating(dlp3.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(nll_loss_backward_kernel_impl<T>, blocks_for(N * C * L, 256, 8192), 256, 0, dlp3.device().index,
                      target.data<int64_t>(), static_cast<const T*>(grad.data_ptr()), static_cast<T*>(dlp3.data_ptr()),
                      N, C, L, ignore, T(scale), grad.numel() != 1);
  });
}

template <class T>
struct Bce {
  EMBER_HD T operator()(T x, T t) const { return fn::bce_with_logits(x, t); }
};
template <class T>
struct BcePw {
  EMBER_HD T operator()(T x, T t, T pw) const { return fn::bce_with_logits(x, t, pw); }
};
template <class T>
struct BceDxPw {
  EMBER_HD T operator()(T x, T t, T pw, T g) const { return g * fn::bce_with_logits_dx(x, t, pw); }
};
template <class T>
struct BceDx {
  EMBER_HD T operator()(T x, T t, T g) const { return g * (fn::Sigmoid{}(x)-t); }
};
template <class T>
struct BceDtPw {
  EMBER_HD T operator()(T x, T pw, T g) const { return g * fn::bce_with_logits_dt(x, pw); }
};
template <class T>
struct BceDt {
  EMBER_HD T operator()(T x, T g) const { return -g * x; }
};
template <class T>
struct BceDpw {
  EMBER_HD T operator()(T x, T t, T g) const { return g * fn::bce_with_logits_dpw(x, t); }
};

void cuda_bce_with_logits(const Tensor& x, const Tensor& t, const Tensor& pw, Tensor& out) {
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits", [&](auto tag) {
    using T = decltype(tag);
    if (pw.defined())
      map<T, T, T, T>(out, {&x, &t, &pw}, BcePw<T>{});
    else
      map<T, T, T>(out, {&x, &t}, Bce<T>{});
  });
}

void cuda_bce_with_logits_backward(const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& g, Tensor& out,
                                   int wrt) {
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits_backward", [&](auto tag) {
    using T = decltype(tag);
    if (wrt == 0) {
      if (pw.defined())
        map<T, T, T, T, T>(out, {&x, &t, &pw, &g}, BceDxPw<T>{});
      else
        map<T, T, T, T>(out, {&x, &t, &g}, BceDx<T>{});
    } else if (wrt == 1) {
      if (pw.defined())
        map<T, T, T, T>(out, {&x, &pw, &g}, BceDtPw<T>{});
      else
        map<T, T, T>(out, {&x, &g}, BceDt<T>{});
    } else {
      map<T, T, T, T>(out, {&x, &t, &g}, BceDpw<T>{});
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(cross_entropy_kernel, CUDA, cuda_cross_entropy);
EMBER_REGISTER_KERNEL(cross_entropy_backward_kernel, CUDA, cuda_cross_entropy_backward);
EMBER_REGISTER_HALF_KERNEL(cross_entropy_kernel, CUDA);
EMBER_REGISTER_HALF_KERNEL(cross_entropy_backward_kernel, CUDA);
EMBER_REGISTER_KERNEL(nll_loss_kernel, CUDA, cuda_nll_loss);
EMBER_REGISTER_KERNEL(nll_loss_backward_kernel, CUDA, cuda_nll_loss_backward);
EMBER_REGISTER_KERNEL(bce_with_logits_kernel, CUDA, cuda_bce_with_logits);
EMBER_REGISTER_KERNEL(bce_with_logits_backward_kernel, CUDA, cuda_bce_with_logits_backward);

}  // namespace ember::cuda
