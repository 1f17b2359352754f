// CUDA kernels of ops/softmax.cpp: softmax, log_softmax and the masked
// softmax over the middle dim R of a contiguous [A, R, B] block, forward and
// backward. Rows of stride 1 (B == 1, the common case: the last dim) get one
// block per row, reduced with shuffles; rows of stride B > 1 get one thread
// per row, so neighbouring threads read neighbouring columns (coalesced).
// Three passes per row as on the CPU: max, sum of exp(x - max), normalise.
// A fully masked row gives zeros (masked softmax) and a row of -inf gives NaN,
// as the CPU kernel does.
#include <cmath>
#include <limits>

#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/functors.h>
#include <ember/ops/softmax.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

template <class T>
__device__ __forceinline__ T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// One row [R] with stride 1, one block.
template <class T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, const bool* __restrict__ mask, T* __restrict__ y,
                                    int64_t rows, int64_t R, bool log) {
  __shared__ T scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * R;
    const bool* mr = mask ? mask + row * R : nullptr;
    T* yr = y + row * R;
    T mx = neg_inf<T>();
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      if (!mr || !mr[r]) mx = xr[r] > mx ? xr[r] : mx;
    mx = block_reduce(mx, MaxOp{}, neg_inf<T>(), scratch);
    if (mx == neg_inf<T>()) {  // all masked, or all -inf (same on every thread)
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yr[r] = mr ? T(0) : std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    T s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      if (!mr || !mr[r]) s += fn::exp_(xr[r] - mx);
    s = block_reduce(s, SumOp{}, T(0), scratch);
    if (log) {
      const T lse = mx + fn::log_(s);
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yr[r] = xr[r] - lse;
    } else {
      const T inv = T(1) / s;
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yr[r] = (!mr || !mr[r]) ? fn::exp_(xr[r] - mx) * inv : T(0);
    }
  }
}

// Rows of stride B: thread i handles row (i / B, ., i % B).
template <class T>
__global__ void softmax_cols_kernel(const T* __restrict__ x, const bool* __restrict__ mask, T* __restrict__ y,
                                    int64_t A, int64_t R, int64_t B, bool log) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < A * B; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (i / B) * R * B + i % B;
    const T* xr = x + base;
    const bool* mr = mask ? mask + base : nullptr;
    T* yr = y + base;
    T mx = neg_inf<T>();
    for (int64_t r = 0; r < R; ++r)
      if (!mr || !mr[r * B]) mx = xr[r * B] > mx ? xr[r * B] : mx;
    if (mx == neg_inf<T>()) {
      for (int64_t r = 0; r < R; ++r) yr[r * B] = mr ? T(0) : std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    T s = 0;
    for (int64_t r = 0; r < R; ++r)
      if (!mr || !mr[r * B]) s += fn::exp_(xr[r * B] - mx);
    if (log) {
      const T lse = mx + fn::log_(s);
      for (int64_t r = 0; r < R; ++r) yr[r * B] = xr[r * B] - lse;
    } else {
      const T inv = T(1) / s;
      for (int64_t r = 0; r < R; ++r) yr[r * B] = (!mr || !mr[r * B]) ? fn::exp_(xr[r * B] - mx) * inv : T(0);
    }
  }
}

// dx = y (g - sum g y)  (softmax);  dx = g - exp(y) sum g  (log_softmax).
template <class T>
__global__ void softmax_backward_rows_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                             int64_t rows, int64_t R, bool log) {
  __shared__ T scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *yr = y + row * R, *gr = g + row * R;
    T* dr = dx + row * R;
    T dot = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) dot += log ? gr[r] : gr[r] * yr[r];
    dot = block_reduce(dot, SumOp{}, T(0), scratch);
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      dr[r] = log ? gr[r] - fn::exp_(yr[r]) * dot : yr[r] * (gr[r] - dot);
  }
}

template <class T>
__global__ void softmax_backward_cols_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                             int64_t A, int64_t R, int64_t B, bool log) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < A * B; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (i / B) * R * B + i % B;
    const T *yr = y + base, *gr = g + base;
    T* dr = dx + base;
    T dot = 0;
    for (int64_t r = 0; r < R; ++r) dot += log ? gr[r * B] : gr[r * B] * yr[r * B];
    for (int64_t r = 0; r < R; ++r)
      dr[r * B] = log ? gr[r * B] - fn::exp_(yr[r * B]) * dot : yr[r * B] * (gr[r * B] - dot);
  }
}

int row_threads(int64_t R) { return R >= 1024 ? 256 : (R >= 256 ? 128 : 32); }

void cuda_softmax(const Tensor& x3, const Tensor& mask3, Tensor& y3, bool log) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  if (A * R * B == 0) return;
  const int dev = x3.device().index;
  dispatch_floating(x3.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    const bool* m = mask3.defined() ? static_cast<const bool*>(mask3.data_ptr()) : nullptr;
    T* y = static_cast<T*>(y3.data_ptr());
    if (B == 1)
      EMBER_CUDA_LAUNCH(softmax_rows_kernel<T>, blocks_for(A, 1, 65535), row_threads(R), 0, dev, x, m, y, A, R, log);
    else
      EMBER_CUDA_LAUNCH(softmax_cols_kernel<T>, blocks_for(A * B, 128, 4096), 128, 0, dev, x, m, y, A, R, B, log);
  });
}

void cuda_softmax_backward(const Tensor& y3, const Tensor& g3, Tensor& dx3, bool log) {
  const int64_t A = y3.size(0), R = y3.size(1), B = y3.size(2);
  if (A * R * B == 0) return;
  const int dev = y3.device().index;
  dispatch_floating(y3.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* y = static_cast<const T*>(y3.data_ptr());
    const T* g = static_cast<const T*>(g3.data_ptr());
    T* dx = static_cast<T*>(dx3.data_ptr());
    if (B == 1)
      EMBER_CUDA_LAUNCH(softmax_backward_rows_kernel<T>, blocks_for(A, 1, 65535), row_threads(R), 0, dev, y, g, dx, A,
                        R, log);
    else
      EMBER_CUDA_LAUNCH(softmax_backward_cols_kernel<T>, blocks_for(A * B, 128, 4096), 128, 0, dev, y, g, dx, A, R, B,
                        log);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(softmax_kernel, CUDA, cuda_softmax);
EMBER_REGISTER_KERNEL(softmax_backward_kernel, CUDA, cuda_softmax_backward);

}  // namespace ember::cuda
