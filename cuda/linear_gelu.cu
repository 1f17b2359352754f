// CUDA kernels of ops/linear_gelu.cpp: the elementwise half of linear_gelu,
// after a GEMM that ran without the bias.
//
// Forward, one pass: pre = y + b (written back over y: the pre-activation
// backward needs), out = gelu(pre). Backward, one pass over the rows:
// dpre = dout gelu'(pre), written, and summed down each column into db
// (the bias's gradient), blocks of 32 columns by slices of the rows as in
// cuda/column_sum.cuh, so the sum is deterministic and needs no atomics;
// with more than one slice, column_sum_finish adds the slices' partials.
// bfloat16 and float16 compute in float32: pre is rounded once, gelu and
// gelu' are taken of the rounded pre (what a 16-bit linear then gelu see),
// and db is summed in float32 and rounded once.
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/functors.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/linear_gelu.h>
#include <ember/cuda/column_sum.cuh>

namespace ember::cuda {
namespace {

template <class T, class G>
__global__ void bias_gelu_forward(T* __restrict__ pre, const T* __restrict__ bias, T* __restrict__ out, int64_t total,
                                  int64_t n) {
  using A = opmath_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const T p = bias ? T(A(pre[i]) + A(bias[i % n])) : pre[i];
    pre[i] = p;
    out[i] = T(G{}(A(p)));
  }
}

// dpre over rows [r0, r1) of blockIdx.y's slice for 32 columns per block
// tile; each column's partial sum of dpre to db[blockIdx.y][column] when db
// is not null.
template <class T, class TO, class GB>
__global__ void bias_gelu_backward(const T* __restrict__ g, const T* __restrict__ pre, T* __restrict__ dpre,
                                   TO* __restrict__ db, int64_t rows, int64_t n, int64_t slice_rows) {
  using A = opmath_t<T>;
  __shared__ A tile[kColumnRows][kColumnTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * slice_rows, r1 = r0 + slice_rows < rows ? r0 + slice_rows : rows;
  const int64_t tiles = (n + kColumnTile - 1) / kColumnTile;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t j = t * kColumnTile + threadIdx.x;
    A s = 0;
    if (j < n)
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) {
        const T d = T(GB{}(A(g[r * n + j]), A(pre[r * n + j])));
        dpre[r * n + j] = d;
        s += A(d);  // the sum of the dpre that is stored, as sum(dpre) would add
      }
    if (db) {  // uniform over the grid: every thread reaches the barriers or none
      s = column_combine(s, tile);
      if (threadIdx.y == 0 && j < n) db[int64_t(blockIdx.y) * n + j] = TO(s);
    }
  }
}

template <class T, class GB>
void bias_gelu_backward_launch(const T* g, const T* pre, T* dpre, T* db, int64_t rows, int64_t n, int dev) {
  using A = opmath_t<T>;
  const int64_t tiles = (n + kColumnTile - 1) / kColumnTile, slices = column_slices(tiles, rows);
  const int64_t slice_rows = (rows + slices - 1) / slices;
  const dim3 grid(column_grid_x(tiles), static_cast<unsigned>(slices)), block(kColumnTile, kColumnRows);
  if (slices == 1 || !db) {
    EMBER_CUDA_LAUNCH((bias_gelu_backward<T, T, GB>), grid, block, 0, dev, g, pre, dpre, db, rows, n, slice_rows);
    return;
  }
  Tensor partial = partial_sums<T>(slices, n, dev);
  A* p = static_cast<A*>(partial.data_ptr());
  EMBER_CUDA_LAUNCH((bias_gelu_backward<T, A, GB>), grid, block, 0, dev, g, pre, dpre, p, rows, n, slice_rows);
  column_sum_finish(p, db, slices, n, dev);
}

void cuda_bias_gelu(Tensor& pre, const Tensor& bias, Tensor& out, GeluApproximation approximate) {
  const int64_t total = pre.numel(), n = pre.size(1);
  if (total == 0) return;
  const int dev = pre.device().index;
  dispatch_floating_and_half(pre.dtype(), "linear_gelu", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(pre.data_ptr());
    const T* b = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* o = static_cast<T*>(out.data_ptr());
    if (approximate == GeluApproximation::Tanh)
      EMBER_CUDA_LAUNCH((bias_gelu_forward<T, fn::GeluTanh>), blocks_for(total, 256), 256, 0, dev, p, b, o, total, n);
    else
      EMBER_CUDA_LAUNCH((bias_gelu_forward<T, fn::Gelu>), blocks_for(total, 256), 256, 0, dev, p, b, o, total, n);
  });
}

void cuda_bias_gelu_backward(const Tensor& dout, const Tensor& pre, Tensor& dpre, Tensor& dbias,
                             GeluApproximation approximate) {
  const int64_t rows = pre.size(0), n = pre.size(1);
  if (rows == 0 || n == 0) return;  // linear_gelu runs empty products composed
  const int dev = pre.device().index;
  dispatch_floating_and_half(pre.dtype(), "linear_gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dout.data_ptr());
    const T* p = static_cast<const T*>(pre.data_ptr());
    T* d = static_cast<T*>(dpre.data_ptr());
    T* db = dbias.defined() ? static_cast<T*>(dbias.data_ptr()) : nullptr;
    if (approximate == GeluApproximation::Tanh)
      bias_gelu_backward_launch<T, fn::GeluTanhBackward>(g, p, d, db, rows, n, dev);
    else
      bias_gelu_backward_launch<T, fn::GeluBackward>(g, p, d, db, rows, n, dev);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(detail::bias_gelu_kernel, CUDA, cuda_bias_gelu);
EMBER_REGISTER_KERNEL(detail::bias_gelu_backward_kernel, CUDA, cuda_bias_gelu_backward);

}  // namespace ember::cuda
