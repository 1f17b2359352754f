// CUDA kernel of ops/reduce.cpp: sum over the middle dim of a contiguous
// [A, R, B] block. B == 1 (rows): one block per row (per slice of a row
// when a few rows are long), shuffles then shared memory. B > 1 (columns):
// cuda/column_sum.cuh (blocks of 32 columns by a slice of the rows, then the
// slices summed). bfloat16 and float16 accumulate in float32 and round once.
#include <algorithm>

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

// Row a's slice blockIdx.y (elements [blockIdx.y * slice_len, + slice_len)
// of its R): out[a * gridDim.y + blockIdx.y]. With one slice, out[a] is the
// row's sum; with several, the partial sums of pass 1 (Acc), which the same
// kernel then sums as rows of gridDim.y elements.
template <class TI, class TO>
__global__ void sum_rows_kernel(const TI* __restrict__ x, TO* __restrict__ out, int64_t A, int64_t R,
                                int64_t slice_len) {
  __shared__ Acc<TI> scratch[32];
  const int64_t r0 = int64_t(blockIdx.y) * slice_len, r1 = r0 + slice_len < R ? r0 + slice_len : R;
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    const TI* row = x + a * R;
    Acc<TI> s = 0;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) s += Acc<TI>(row[r]);
    s = block_reduce(s, SumOp{}, Acc<TI>(0), scratch);
    if (threadIdx.x == 0) out[a * gridDim.y + blockIdx.y] = static_cast<TO>(s);
  }
}

// Sums of A contiguous rows of R. A few long rows (a whole-tensor sum is one
// row) would leave all but A blocks of the GPU idle, so rows of 8192
// elements or more are split into slices of at least 4096 when there are fewer
// than kFillBlocks rows (cuda/column_sum.cuh), and the slices'
// partial sums (float32 for the 16-bit types) are summed by a second launch.
// The order of the additions depends on the shape alone.
template <class T>
void row_sums(const T* x, T* out, int64_t A, int64_t R, int dev) {
  const int threads = R >= 1024 ? 256 : (R >= 128 ? 128 : 32);
  const int64_t slices = std::max<int64_t>(1, std::min({(kFillBlocks + A - 1) / A, R / 4096, int64_t(1024)}));
  if (slices == 1) {
    EMBER_CUDA_LAUNCH((sum_rows_kernel<T, T>), blocks_for(A, 1, 65535), threads, 0, dev, x, out, A, R, R);
    return;
  }
  Tensor partial = partial_sums<T>(slices, A, dev);
  Acc<T>* p = static_cast<Acc<T>*>(partial.data_ptr());
  EMBER_CUDA_LAUNCH((sum_rows_kernel<T, Acc<T>>), dim3(blocks_for(A, 1, 65535), static_cast<unsigned>(slices)), 256, 0,
                    dev, x, p, A, R, (R + slices - 1) / slices);
  EMBER_CUDA_LAUNCH((sum_rows_kernel<Acc<T>, T>), blocks_for(A, 1, 65535), 32, 0, dev, p, out, A, slices, slices);
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
      profiler::add_device_launch();
      EMBER_CUDA_CHECK(cudaMemsetAsync(o, 0, sizeof(T) * A * B, stream(dev)));
      return;
    }
    if (B == 1) {
      row_sums(x, o, A, R, dev);
    } else {
      column_sum(x, o, A, R, B, dev);
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(sum_kernel, CUDA, cuda_sum);
EMBER_REGISTER_HALF_KERNEL(sum_kernel, CUDA);

}  // namespace ember::cuda
