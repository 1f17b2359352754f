// CUDA kernels of ops/loss.cpp: cross_entropy fused with log_softmax
// (forward keeps each row's logsumexp for the backward), nll_loss, and
// binary_cross_entropy_with_logits (elementwise, through cuda/loops.cuh with
// the scalar formulas of ops/loss.h).
//
// Rows: logits3 is [N, C, L]; row r = (n, l) reads C values of stride L.
// L == 1 (the classifier case) gets one block per row reduced with shuffles;
// L > 1 one thread per row, neighbouring threads on neighbouring l.
#include <limits>

#include <ember/core/dtype_dispatch.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/loss.h>
#include <ember/cuda/block_reduce.cuh>
#include <ember/cuda/loops.cuh>

namespace ember::cuda {
namespace {

// loss = lse - (1 - eps) x_t - eps / C sum_c x_c (the smoothed target
// distribution q = (1 - eps) onehot + eps / C against log p = x - lse).
// Logits of T load as A = opmath_t<T>; loss and lse are A (float32 for the
// 16-bit types, so the reduction over rows is float32 too).
template <class T>
__global__ void cross_entropy_rows_kernel(const T* __restrict__ x, const int64_t* __restrict__ t,
                                          opmath_t<T>* __restrict__ loss, opmath_t<T>* __restrict__ lse, int64_t rows,
                                          int64_t C, int64_t ignore, opmath_t<T> keep, opmath_t<T> spread,
                                          bool smooth) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t tr = t[r];
    // Out of range only inside a replayed CUDA graph, whose index check
    // reports it after the replay: never read outside the row.
    if (tr == ignore || tr < 0 || tr >= C) {  // the same branch for the whole block
      if (threadIdx.x == 0) loss[r] = lse[r] = A(0);
      continue;
    }
    const T* row = x + r * C;
    A mx = -std::numeric_limits<A>::infinity();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = A(row[c]) > mx ? A(row[c]) : mx;
    mx = block_reduce(mx, MaxOp{}, -std::numeric_limits<A>::infinity(), scratch);
    A s = 0, sx = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      s += fn::hd::exp(A(row[c]) - mx);
      if (smooth) sx += A(row[c]);
    }
    s = block_reduce(s, SumOp{}, A(0), scratch);
    if (smooth) sx = block_reduce(sx, SumOp{}, A(0), scratch);
    if (threadIdx.x == 0) {
      const A l = mx + fn::hd::log(s);
      lse[r] = l;
      loss[r] = l - keep * A(row[tr]) - (smooth ? spread * sx : A(0));
    }
  }
}

template <class T>
__global__ void cross_entropy_cols_kernel(const T* __restrict__ x, const int64_t* __restrict__ t,
                                          opmath_t<T>* __restrict__ loss, opmath_t<T>* __restrict__ lse, int64_t N,
                                          int64_t C, int64_t L, int64_t ignore, opmath_t<T> keep, opmath_t<T> spread,
                                          bool smooth) {
  using A = opmath_t<T>;
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
}

// d loss / d x_c = (softmax_c - q_c) g_r scale; one thread per logit.
template <class T>
__global__ void cross_entropy_backward_kernel_impl(const T* __restrict__ x, const int64_t* __restrict__ t,
                                                   const opmath_t<T>* __restrict__ lse,
                                                   const opmath_t<T>* __restrict__ g, T* __restrict__ d, int64_t N,
                                                   int64_t C, int64_t L, int64_t ignore, opmath_t<T> keep,
                                                   opmath_t<T> spread, opmath_t<T> scale, bool per_row) {
  using A = opmath_t<T>;
  const int64_t total = N * C * L;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i % L, c = (i / L) % C, n = i / (C * L), r = n * L + l, tr = t[r];
    if (tr == ignore || tr < 0 || tr >= C) {
      d[i] = T(0);
      continue;
    }
    const A gr = g[per_row ? r : 0] * scale;
    d[i] = T((fn::hd::exp(A(x[i]) - lse[r]) - spread - (c == tr ? keep : A(0))) * gr);
  }
}

int row_threads(int64_t C) { return C >= 1024 ? 256 : (C >= 256 ? 128 : 32); }

void cuda_cross_entropy(const Tensor& logits3, const Tensor& target, Tensor& loss, Tensor& lse, int64_t ignore,
                        double eps) {
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
    if (L == 1)
      EMBER_CUDA_LAUNCH(cross_entropy_rows_kernel<T>, blocks_for(N, 1, 65535), row_threads(C), 0, dev, x,
                        target.data<int64_t>(), lo, ls, N, C, ignore, A(keep), A(spread), eps > 0);
    else
      EMBER_CUDA_LAUNCH(cross_entropy_cols_kernel<T>, blocks_for(N * L, 128, 4096), 128, 0, dev, x,
                        target.data<int64_t>(), lo, ls, N, C, L, ignore, A(keep), A(spread), eps > 0);
  });
}

void cuda_cross_entropy_backward(const Tensor& logits3, const Tensor& target, const Tensor& lse, const Tensor& grad,
                                 Tensor& dlogits3, int64_t ignore, double eps, double scale) {
  const int64_t N = logits3.size(0), C = logits3.size(1), L = logits3.size(2);
  if (N * C * L == 0) return;
  const double keep = 1.0 - eps, spread = C > 0 ? eps / static_cast<double>(C) : 0.0;
  dispatch_floating_and_half(logits3.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    EMBER_CUDA_LAUNCH(cross_entropy_backward_kernel_impl<T>, blocks_for(N * C * L, 256, 8192), 256, 0,
                      logits3.device().index, static_cast<const T*>(logits3.data_ptr()), target.data<int64_t>(),
                      static_cast<const A*>(lse.data_ptr()), static_cast<const A*>(grad.data_ptr()),
                      static_cast<T*>(dlogits3.data_ptr()), N, C, L, ignore, A(keep), A(spread), A(scale),
                      grad.numel() != 1);
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
