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

/// Whether this block is the last of the grid to arrive here, answered in
/// every thread of the block: the kernels that finish a cross-block
/// reduction in the same launch (layer_norm's dw/db, the index check,
/// kv_cache_attention's merge). Each block's writes before the call are
/// fenced before one of its threads counts the block in `counter` (the
/// device's grid_counter), and the last block fences again before it reads
/// the others' writes (through volatile or atomic loads). That block sets
/// *counter back to 0 when it is done, for the next kernel that counts.
__device__ __forceinline__ bool last_block_to_arrive(unsigned int* counter) {
  __shared__ bool last;
  __threadfence();  // this block's partials are visible to every block before the count says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  const bool is_last = last;
  if (is_last) __threadfence();
  return is_last;
}

}  // namespace ember::cuda
