// CUDA kernels of rms_norm (the math is in rms_norm.cpp), registered into
// the same kernel tables as the CPU kernels, so rms_norm dispatches to them
// for tensors on device "cuda".
//
// One source, two builds (CMakeLists.txt, ember_add_cuda_sources): nvcc for
// real GPUs, and the host compiler against Ember's SIMT emulator, which the
// tests run on any machine. So the kernels stay inside what both accept
// (docs/CUDA.md): launches only through EMBER_CUDA_LAUNCH, dynamic shared
// memory only through EMBER_DYNAMIC_SHARED, every __syncthreads reached by
// every thread of the block, no inline PTX, no cooperative groups.
//
// Forward and dx: one block per row (grid-stride over rows), a block-wide sum
// with Ember's shipped block reduction (warp shuffles, then one value per
// warp through shared memory: <ember/cuda/block_reduce.cuh>). dw: one thread per column summing down the rows in
// order (neighbouring threads read neighbouring addresses; no atomics, so
// the sums are the same in every run).
#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/functors.h>
#include <ember/cuda/block_reduce.cuh>

#include "rms_norm_kernels.h"

namespace myops {
namespace {

using namespace ember;

// Threads per block for the row kernels: a multiple of the warp size, as
// block_reduce needs.
constexpr int kRowThreads = 128;

// The sum of v over the block, returned to every thread; scratch: the
// __shared__ T[32] of block_reduce.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  return cuda::block_reduce(v, cuda::SumOp{}, T(0), scratch);
}

template <class T>
__global__ void rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T eps, T* __restrict__ y,
                                        T* __restrict__ rstd, int64_t rows, int64_t N) {
  __shared__ T scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * N;
    T ss = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) ss += xr[i] * xr[i];
    // fn::sqrt_ (ops/functors.h) is std::sqrt on the host and sqrt on the device.
    const T rs = T(1) / fn::hd::sqrt(block_sum(ss, scratch) / T(N) + eps);
    if (threadIdx.x == 0) rstd[row] = rs;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) y[row * N + i] = xr[i] * rs * w[i];
  }
}

template <class T>
__global__ void rms_norm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                   const T* __restrict__ rstd, T* __restrict__ dx, int64_t rows, int64_t N) {
  __shared__ T scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *gr = g + row * N, *xr = x + row * N;
    const T rs = rstd[row];
    T s = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += gr[i] * w[i] * xr[i];
    const T c = block_sum(s, scratch) / T(N) * rs * rs * rs;  // term 2's factor
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) dx[row * N + i] = rs * gr[i] * w[i] - xr[i] * c;
  }
}

template <class T>
__global__ void rms_norm_dw_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ rstd,
                                   T* __restrict__ dw, int64_t rows, int64_t N) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    T s = 0;
    for (int64_t r = 0; r < rows; ++r) s += g[r * N + i] * x[r * N + i] * rstd[r];
    dw[i] = s;
  }
}

void cuda_rms_norm(const Tensor& x2, const Tensor& w, double eps, Tensor& y2, Tensor& rstd) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  if (rows == 0) return;
  const int device = x2.device().index;
  dispatch_floating(x2.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    // EMBER_CUDA_LAUNCH(kernel, grid, block, dynamic shared bytes, device, args...):
    // <<<>>> on the device's stream under nvcc, the emulator otherwise; the
    // launch error is checked either way.
    EMBER_CUDA_LAUNCH(rms_norm_forward_kernel<T>, cuda::blocks_for(rows, 1), kRowThreads, 0, device, x2.data<T>(),
                      w.data<T>(), static_cast<T>(eps), y2.data<T>(), rstd.data<T>(), rows, N);
  });
}

void cuda_rms_norm_backward(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& rstd, Tensor& dx2,
                            Tensor& dw) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  const int device = x2.device().index;
  dispatch_floating(x2.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    if (dx2.defined() && rows > 0)
      EMBER_CUDA_LAUNCH(rms_norm_dx_kernel<T>, cuda::blocks_for(rows, 1), kRowThreads, 0, device, g2.data<T>(),
                        x2.data<T>(), w.data<T>(), rstd.data<T>(), dx2.data<T>(), rows, N);
    if (dw.defined() && N > 0)
      EMBER_CUDA_LAUNCH(rms_norm_dw_kernel<T>, cuda::blocks_for(N, 128, 4096), 128, 0, device, g2.data<T>(),
                        x2.data<T>(), rstd.data<T>(), dw.data<T>(), rows, N);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(rms_norm_kernel, CUDA, cuda_rms_norm);
EMBER_REGISTER_KERNEL(rms_norm_backward_kernel, CUDA, cuda_rms_norm_backward);

}  // namespace myops
