// CUDA kernel of ops/reduce_stats.cpp: max/min (values and the index of the
// first extreme) over the middle dim of [A, R, B]. NaN wins, as on the CPU
// (the first NaN). Rows of stride 1 (B == 1): one block per row, each thread
// scanning a strided part, then a shuffle reduction of (value, index) pairs
// whose combine keeps the CPU's answer (NaN first, then the better value,
// ties to the lower index). Rows of stride B > 1: one thread per row.
#include <type_traits>

#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/tensor.h>
#include <ember/cuda/common.h>
#include <ember/ops/reduce.h>

namespace ember::cuda {
namespace {

template <class T>
__device__ __forceinline__ bool nan_(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// Whether (v2, i2) beats (v1, i1).
template <class T>
__device__ __forceinline__ bool better(T v1, int64_t i1, T v2, int64_t i2, bool is_max) {
  const bool n1 = nan_(v1), n2 = nan_(v2);
  if (n1 || n2) return n2 && (!n1 || i2 < i1);
  if (v2 != v1) return is_max ? v2 > v1 : v2 < v1;
  return i2 < i1;
}

template <class T>
__global__ void minmax_rows_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices,
                                   int64_t A, int64_t R, bool is_max) {
  __shared__ T sv[32];
  __shared__ int64_t si[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    const T* row = x + a * R;
    // Every thread starts from a real element (R >= 1 is guaranteed).
    const int64_t first = threadIdx.x < R ? threadIdx.x : 0;
    T v = row[first];
    int64_t i = first;
    for (int64_t r = first + blockDim.x; r < R; r += blockDim.x)
      if (better(v, i, row[r], r, is_max)) v = row[r], i = r;
    for (int o = 16; o > 0; o >>= 1) {
      const T v2 = __shfl_xor_sync(0xffffffffu, v, o);
      const int64_t i2 = __shfl_xor_sync(0xffffffffu, i, o);
      if (better(v, i, v2, i2, is_max)) v = v2, i = i2;
    }
    __syncthreads();  // the previous row's readers are done with sv/si
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned w = 1; w < nwarps; ++w)
        if (better(v, i, sv[w], si[w], is_max)) v = sv[w], i = si[w];
      values[a] = v;
      if (indices) indices[a] = i;
    }
  }
}

template <class T>
__global__ void minmax_cols_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices,
                                   int64_t A, int64_t R, int64_t B, bool is_max) {
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < A * B;
       row += int64_t(gridDim.x) * blockDim.x) {
    const T* xr = x + (row / B) * R * B + row % B;
    T best = xr[0];
    int64_t bi = 0;
    for (int64_t r = 1; r < R && !nan_(best); ++r)
      if (better(best, bi, xr[r * B], r, is_max)) best = xr[r * B], bi = r;
    values[row] = best;
    if (indices) indices[row] = bi;
  }
}

void cuda_minmax(const Tensor& x3, Tensor& values2, Tensor& indices2, bool is_max) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  if (A * B == 0) return;
  const int dev = x3.device().index;
  dispatch_numeric(x3.dtype(), is_max ? "max" : "min", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    T* v = static_cast<T*>(values2.data_ptr());
    int64_t* ix = indices2.defined() ? static_cast<int64_t*>(indices2.data_ptr()) : nullptr;
    if (B == 1) {
      const int threads = R >= 1024 ? 256 : (R >= 128 ? 128 : 32);
      EMBER_CUDA_LAUNCH(minmax_rows_kernel<T>, blocks_for(A, 1, 65535), threads, 0, dev, x, v, ix, A, R, is_max);
    } else {
      EMBER_CUDA_LAUNCH(minmax_cols_kernel<T>, blocks_for(A * B, 128, 4096), 128, 0, dev, x, v, ix, A, R, B, is_max);
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(minmax_kernel, CUDA, cuda_minmax);

}  // namespace ember::cuda
