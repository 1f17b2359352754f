// CUDA kernels of ops/softmax.cpp: softmax, log_softmax and the masked
// softmax over the middle dim R of a contiguous [A, R, B] block, forward and
// backward. Rows of stride 1 (B == 1, the common case: the last dim) get one
// block per row, reduced with shuffles; rows of stride B > 1 get one thread
// per row, so neighbouring threads read neighbouring columns (coalesced).
// Three passes per row as on the CPU: max, sum of exp(x - max), normalise.
// A fully masked row gives zeros (masked softmax) and a row of -inf gives NaN,
// as the CPU kernel does. bfloat16 and float16 compute in float32 (opmath_t),
// rounded once on store.
#include <cmath>
#include <limits>

#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/functors.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/softmax.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

template <class A>
__device__ __forceinline__ A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// Elements of T are loaded as A = opmath_t<T> (float32 for the 16-bit
// types), every sum and exp is in A, and each result is rounded once on store.

// One row [R] with stride 1, one block.
template <class T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, const bool* __restrict__ mask, T* __restrict__ y,
                                    int64_t rows, int64_t R, bool log) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * R;
    const bool* mr = mask ? mask + row * R : nullptr;
    T* yr = y + row * R;
    A mx = neg_inf<A>();
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      if (!mr || !mr[r]) mx = A(xr[r]) > mx ? A(xr[r]) : mx;
    mx = block_reduce(mx, MaxOp{}, neg_inf<A>(), scratch);
    if (mx == neg_inf<A>()) {  // all masked, or all -inf (same on every thread)
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yr[r] = T(mr ? A(0) : std::numeric_limits<A>::quiet_NaN());
      continue;
    }
    A s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      if (!mr || !mr[r]) s += fn::hd::exp(A(xr[r]) - mx);
    s = block_reduce(s, SumOp{}, A(0), scratch);
    if (log) {
      const A lse = mx + fn::hd::log(s);
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) yr[r] = T(A(xr[r]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
        yr[r] = T((!mr || !mr[r]) ? fn::hd::exp(A(xr[r]) - mx) * inv : A(0));
    }
  }
}

// Rows of stride B: thread i handles row (i / B, ., i % B).
template <class T>
__global__ void softmax_cols_kernel(const T* __restrict__ x, const bool* __restrict__ mask, T* __restrict__ y,
                                    int64_t A_, int64_t R, int64_t B, bool log) {
  using A = opmath_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < A_ * B; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (i / B) * R * B + i % B;
    const T* xr = x + base;
    const bool* mr = mask ? mask + base : nullptr;
    T* yr = y + base;
    A mx = neg_inf<A>();
    for (int64_t r = 0; r < R; ++r)
      if (!mr || !mr[r * B]) mx = A(xr[r * B]) > mx ? A(xr[r * B]) : mx;
    if (mx == neg_inf<A>()) {
      for (int64_t r = 0; r < R; ++r) yr[r * B] = T(mr ? A(0) : std::numeric_limits<A>::quiet_NaN());
      continue;
    }
    A s = 0;
    for (int64_t r = 0; r < R; ++r)
      if (!mr || !mr[r * B]) s += fn::hd::exp(A(xr[r * B]) - mx);
    if (log) {
      const A lse = mx + fn::hd::log(s);
      for (int64_t r = 0; r < R; ++r) yr[r * B] = T(A(xr[r * B]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t r = 0; r < R; ++r) yr[r * B] = T((!mr || !mr[r * B]) ? fn::hd::exp(A(xr[r * B]) - mx) * inv : A(0));
    }
  }
}

// dx = y (g - sum g y)  (softmax);  dx = g - exp(y) sum g  (log_softmax).
template <class T>
__global__ void softmax_backward_rows_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                             int64_t rows, int64_t R, bool log) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *yr = y + row * R, *gr = g + row * R;
    T* dr = dx + row * R;
    A dot = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) dot += log ? A(gr[r]) : A(gr[r]) * A(yr[r]);
    dot = block_reduce(dot, SumOp{}, A(0), scratch);
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
      dr[r] = T(log ? A(gr[r]) - fn::hd::exp(A(yr[r])) * dot : A(yr[r]) * (A(gr[r]) - dot));
  }
}

template <class T>
__global__ void softmax_backward_cols_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                             int64_t A_, int64_t R, int64_t B, bool log) {
  using A = opmath_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < A_ * B; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (i / B) * R * B + i % B;
    const T *yr = y + base, *gr = g + base;
    T* dr = dx + base;
    A dot = 0;
    for (int64_t r = 0; r < R; ++r) dot += log ? A(gr[r * B]) : A(gr[r * B]) * A(yr[r * B]);
    for (int64_t r = 0; r < R; ++r)
      dr[r * B] = T(log ? A(gr[r * B]) - fn::hd::exp(A(yr[r * B])) * dot : A(yr[r * B]) * (A(gr[r * B]) - dot));
  }
}

int row_threads(int64_t R) { return R >= 1024 ? 256 : (R >= 256 ? 128 : 32); }

void cuda_softmax(const Tensor& x3, const Tensor& mask3, Tensor& y3, bool log) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  if (A * R * B == 0) return;
  const int dev = x3.device().index;
  dispatch_floating_and_half(x3.dtype(), "softmax", [&](auto tag) {
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
  dispatch_floating_and_half(y3.dtype(), "softmax_backward", [&](auto tag) {
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
EMBER_REGISTER_HALF_KERNEL(softmax_kernel, CUDA);
EMBER_REGISTER_HALF_KERNEL(softmax_backward_kernel, CUDA);

}  // namespace ember::cuda
