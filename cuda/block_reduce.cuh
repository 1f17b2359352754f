/// \file
/// Warp and block reductions with shuffles: the building block of the row
/// kernels (sum, softmax, layer_norm, cross_entropy). A block reduce needs
/// blockDim.x a multiple of 32 and a __shared__ scratch of 32 values; every
/// thread of the block receives the result.
#pragma once

#include <ember/cuda/common.h>

namespace ember::cuda {

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// scratch: __shared__ T[32], not used by anything else between the calls.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // the previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nwarps ? scratch[lane] : identity;
  return warp_reduce(r, op);
}

}  // namespace ember::cuda
