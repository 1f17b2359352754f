// CUDA kernels of ops/norm.cpp: layer_norm forward and backward, fused.
//
// Forward: one block per row; mean, then the variance in a second pass over
// the row (no E[x^2] - E[x]^2 cancellation), then y = (x - mean) rstd w + b.
// Backward, with xhat = (x - mean) rstd and gw = g w (g when no weight):
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat))   term 1: gw; term 2: the
//        mean's gradient; term 3: the variance's gradient;
//   dw = sum over rows of g xhat,  db = sum over rows of g;
// dx is one block per row; dw/db one thread per column summing down the rows
// (neighbouring threads read neighbouring columns; no atomics, so the sums
// are deterministic).
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/functors.h>
#include <ember/ops/norm.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

template <class T>
__global__ void layer_norm_kernel_impl(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T eps,
                                       T* __restrict__ y, T* __restrict__ mean, T* __restrict__ rstd, int64_t rows,
                                       int64_t N) {
  __shared__ T scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * N;
    T* yr = y + row * N;
    T s = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += xr[i];
    const T mu = block_reduce(s, SumOp{}, T(0), scratch) / T(N);
    T v = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const T d = xr[i] - mu;
      v += d * d;
    }
    const T var = block_reduce(v, SumOp{}, T(0), scratch) / T(N);
    const T rs = T(1) / fn::sqrt_(var + eps);
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      T h = (xr[i] - mu) * rs;
      if (w) h *= w[i];
      if (b) h += b[i];
      yr[i] = h;
    }
  }
}

template <class T>
__global__ void layer_norm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                     const T* __restrict__ mean, const T* __restrict__ rstd, T* __restrict__ dx,
                                     int64_t rows, int64_t N) {
  __shared__ T scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *gr = g + row * N, *xr = x + row * N;
    const T m = mean[row], rs = rstd[row];
    T sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const T gi = w ? gr[i] * w[i] : gr[i];
      sg += gi;
      sgx += gi * ((xr[i] - m) * rs);
    }
    const T mg = block_reduce(sg, SumOp{}, T(0), scratch) / T(N);
    const T mgx = block_reduce(sgx, SumOp{}, T(0), scratch) / T(N);
    T* dr = dx + row * N;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const T gi = w ? gr[i] * w[i] : gr[i];
      dr[i] = rs * (gi - mg - (xr[i] - m) * rs * mgx);
    }
  }
}

template <class T>
__global__ void layer_norm_dwdb_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ mean,
                                       const T* __restrict__ rstd, T* __restrict__ dw, T* __restrict__ db, int64_t rows,
                                       int64_t N) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    T sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T gi = g[r * N + i];
      sw += gi * ((x[r * N + i] - mean[r]) * rstd[r]);
      sb += gi;
    }
    if (dw) dw[i] = sw;
    if (db) db[i] = sb;
  }
}

int row_threads(int64_t N) { return N >= 1024 ? 256 : (N >= 256 ? 128 : 32); }

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mut_ptr_or_null(Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

void cuda_layer_norm(const Tensor& x2, const Tensor& w, const Tensor& b, double eps, Tensor& y2, Tensor& mean,
                     Tensor& rstd) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  if (rows == 0) return;
  const int dev = x2.device().index;
  dispatch_floating(x2.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(layer_norm_kernel_impl<T>, blocks_for(rows, 1, 65535), row_threads(N), 0, dev,
                      static_cast<const T*>(x2.data_ptr()), ptr_or_null<T>(w), ptr_or_null<T>(b), static_cast<T>(eps),
                      static_cast<T*>(y2.data_ptr()), static_cast<T*>(mean.data_ptr()),
                      static_cast<T*>(rstd.data_ptr()), rows, N);
  });
}

void cuda_layer_norm_backward(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& mean,
                              const Tensor& rstd, Tensor& dx2, Tensor& dw, Tensor& db) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  const int dev = x2.device().index;
  dispatch_floating(x2.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(g2.data_ptr());
    const T* x = static_cast<const T*>(x2.data_ptr());
    const T* m = static_cast<const T*>(mean.data_ptr());
    const T* r = static_cast<const T*>(rstd.data_ptr());
    if (dx2.defined() && rows > 0)
      EMBER_CUDA_LAUNCH(layer_norm_dx_kernel<T>, blocks_for(rows, 1, 65535), row_threads(N), 0, dev, g, x,
                        ptr_or_null<T>(w), m, r, static_cast<T*>(dx2.data_ptr()), rows, N);
    if ((dw.defined() || db.defined()) && N > 0)
      EMBER_CUDA_LAUNCH(layer_norm_dwdb_kernel<T>, blocks_for(N, 128, 4096), 128, 0, dev, g, x, m, r,
                        mut_ptr_or_null<T>(dw), mut_ptr_or_null<T>(db), rows, N);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_kernel, CUDA, cuda_layer_norm);
EMBER_REGISTER_KERNEL(layer_norm_backward_kernel, CUDA, cuda_layer_norm_backward);

}  // namespace ember::cuda
