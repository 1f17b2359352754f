// CUDA kernel of ops/reduce.cpp: sum over the middle dim of a contiguous
// [A, R, B] block. B == 1 (rows): one block per row, shuffles then shared
// memory. B > 1 (columns): cuda/column_sum.cuh (blocks of 32 columns by a
// slice of the rows, then the slices summed). bfloat16 and float16
// accumulate in float32 and round once.
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/reduce.h>
#include <ember/cuda/block_reduce.cuh>
#include <ember/cuda/column_sum.cuh>

namespace ember::cuda {
namespace {

// The accumulator: int64 for integers, float32 for the 16-bit types
// (rounded once on store), the type itself otherwise.
template <class T>
using Acc = column_acc_t<T>;

// dispatch_numeric plus the 16-bit types.
template <class F>
void dispatch_sum(DType dt, F&& f) {
  if (dt == DType::BFloat16) return f(bfloat16{});
  if (dt == DType::Float16) return f(float16{});
  dispatch_numeric(dt, "sum", f);
}

template <class T>
__global__ void sum_rows_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t A, int64_t R) {
  __shared__ Acc<T> scratch[32];
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    const T* row = x + a * R;
    Acc<T> s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) s += Acc<T>(row[r]);
    s = block_reduce(s, SumOp{}, Acc<T>(0), scratch);
    if (threadIdx.x == 0) out[a] = static_cast<T>(s);
  }
}

void cuda_sum(const Tensor& x3, Tensor& out) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  const int dev = x3.device().index;
  dispatch_sum(x3.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    if (A * B == 0) return;
    if (R == 0) {
      EMBER_CUDA_CHECK(cudaMemsetAsync(o, 0, sizeof(T) * A * B, stream(dev)));
      return;
    }
    if (B == 1) {
      const int threads = R >= 1024 ? 256 : (R >= 128 ? 128 : 32);
      EMBER_CUDA_LAUNCH(sum_rows_kernel<T>, blocks_for(A, 1, 65535), threads, 0, dev, x, o, A, R);
    } else {
      column_sum(x, o, A, R, B, dev);
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(sum_kernel, CUDA, cuda_sum);
EMBER_REGISTER_HALF_KERNEL(sum_kernel, CUDA);

}  // namespace ember::cuda
