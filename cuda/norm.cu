// CUDA kernels of ops/norm.cpp: layer_norm forward and backward, fused.
//
// Forward: one block per row; mean, then the variance in a second pass over
// the row (no E[x^2] - E[x]^2 cancellation), then y = (x - mean) rstd w + b.
// Backward, with xhat = (x - mean) rstd and gw = g w (g when no weight):
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat))   term 1: gw; term 2: the
//        mean's gradient; term 3: the variance's gradient;
//   dw = sum over rows of g xhat,  db = sum over rows of g;
// dx is one block per row; dw/db are column sums split over blocks of 32
// columns by slices of the rows (cuda/column_sum.cuh; no atomics, so the
// sums are deterministic). bfloat16 and float16 compute in float32 with float32
// statistics, rounded once on store.
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/functors.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/norm.h>
#include <ember/cuda/block_reduce.cuh>
#include <ember/cuda/column_sum.cuh>

namespace ember::cuda {
namespace {

// T: the element type; A = opmath_t<T>: every statistic and formula (float32
// for the 16-bit types, whose mean and rstd are float32 tensors).
template <class T>
__global__ void layer_norm_kernel_impl(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                       opmath_t<T> eps, T* __restrict__ y, opmath_t<T>* __restrict__ mean,
                                       opmath_t<T>* __restrict__ rstd, int64_t rows, int64_t N) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * N;
    T* yr = y + row * N;
    A s = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += A(xr[i]);
    const A mu = block_reduce(s, SumOp{}, A(0), scratch) / A(N);
    A v = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const A d = A(xr[i]) - mu;
      v += d * d;
    }
    const A var = block_reduce(v, SumOp{}, A(0), scratch) / A(N);
    const A rs = A(1) / fn::hd::sqrt(var + eps);
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      A h = (A(xr[i]) - mu) * rs;
      if (w) h *= A(w[i]);
      if (b) h += A(b[i]);
      yr[i] = T(h);
    }
  }
}

template <class T>
__global__ void layer_norm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                     const opmath_t<T>* __restrict__ mean, const opmath_t<T>* __restrict__ rstd,
                                     T* __restrict__ dx, int64_t rows, int64_t N) {
  using A = opmath_t<T>;
  __shared__ A scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *gr = g + row * N, *xr = x + row * N;
    const A m = mean[row], rs = rstd[row];
    A sg = 0, sgx = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const A gi = w ? A(gr[i]) * A(w[i]) : A(gr[i]);
      sg += gi;
      sgx += gi * ((A(xr[i]) - m) * rs);
    }
    const A mg = block_reduce(sg, SumOp{}, A(0), scratch) / A(N);
    const A mgx = block_reduce(sgx, SumOp{}, A(0), scratch) / A(N);
    T* dr = dx + row * N;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const A gi = w ? A(gr[i]) * A(w[i]) : A(gr[i]);
      dr[i] = T(rs * (gi - mg - (A(xr[i]) - m) * rs * mgx));
    }
  }
}

// Pass 1 of dw and db (cuda/column_sum.cuh): a 32 x 8 block sums g xhat and
// g over one slice of the rows for 32 columns; with one slice it writes dw
// and db, else float32/float64 partials that column_sum_finish adds up.
template <class T, class TO>
__global__ void layer_norm_dwdb_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                       const opmath_t<T>* __restrict__ mean, const opmath_t<T>* __restrict__ rstd,
                                       TO* __restrict__ dw, TO* __restrict__ db, int64_t rows, int64_t N,
                                       int64_t slice_rows) {
  using A = opmath_t<T>;
  __shared__ A tile[kColumnRows][kColumnTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * slice_rows, r1 = r0 + slice_rows < rows ? r0 + slice_rows : rows;
  const int64_t tiles = (N + kColumnTile - 1) / kColumnTile;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t i = t * kColumnTile + threadIdx.x;
    A sw = 0, sb = 0;
    if (i < N)
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) {
        const A gi = A(g[r * N + i]);
        sw += gi * ((A(x[r * N + i]) - mean[r]) * rstd[r]);
        sb += gi;
      }
    sw = column_combine(sw, tile);
    sb = column_combine(sb, tile);
    const int64_t o = int64_t(blockIdx.y) * N + i;
    if (threadIdx.y == 0 && i < N) {
      if (dw) dw[o] = TO(sw);
      if (db) db[o] = TO(sb);
    }
  }
}

// dw and db, either of which may be absent, in one pass (rows in one slice)
// or two.
template <class T>
void layer_norm_dwdb(const T* g, const T* x, const opmath_t<T>* m, const opmath_t<T>* r, T* dw, T* db, int64_t rows,
                     int64_t N, int dev) {
  using A = opmath_t<T>;
  const int64_t tiles = (N + kColumnTile - 1) / kColumnTile, slices = column_slices(tiles, rows);
  const int64_t slice_rows = (rows + slices - 1) / slices;
  const dim3 block(kColumnTile, kColumnRows);
  if (slices == 1) {
    EMBER_CUDA_LAUNCH((layer_norm_dwdb_kernel<T, T>), dim3(column_grid_x(tiles), 1), block, 0, dev, g, x, m, r, dw, db,
                      rows, N, slice_rows);
    return;
  }
  Tensor pw = dw ? partial_sums<T>(slices, N, dev) : Tensor(), pb = db ? partial_sums<T>(slices, N, dev) : Tensor();
  A* w = dw ? static_cast<A*>(pw.data_ptr()) : nullptr;
  A* b = db ? static_cast<A*>(pb.data_ptr()) : nullptr;
  EMBER_CUDA_LAUNCH((layer_norm_dwdb_kernel<T, A>), dim3(column_grid_x(tiles), static_cast<unsigned>(slices)), block, 0,
                    dev, g, x, m, r, w, b, rows, N, slice_rows);
  if (dw) column_sum_finish(w, dw, slices, N, dev);
  if (db) column_sum_finish(b, db, slices, N, dev);
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
  dispatch_floating_and_half(x2.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    EMBER_CUDA_LAUNCH(layer_norm_kernel_impl<T>, blocks_for(rows, 1, 65535), row_threads(N), 0, dev,
                      static_cast<const T*>(x2.data_ptr()), ptr_or_null<T>(w), ptr_or_null<T>(b), static_cast<A>(eps),
                      static_cast<T*>(y2.data_ptr()), static_cast<A*>(mean.data_ptr()),
                      static_cast<A*>(rstd.data_ptr()), rows, N);
  });
}

void cuda_layer_norm_backward(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& mean,
                              const Tensor& rstd, Tensor& dx2, Tensor& dw, Tensor& db) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  const int dev = x2.device().index;
  dispatch_floating_and_half(x2.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    const T* g = static_cast<const T*>(g2.data_ptr());
    const T* x = static_cast<const T*>(x2.data_ptr());
    const A* m = static_cast<const A*>(mean.data_ptr());
    const A* r = static_cast<const A*>(rstd.data_ptr());
    if (dx2.defined() && rows > 0)
      EMBER_CUDA_LAUNCH(layer_norm_dx_kernel<T>, blocks_for(rows, 1, 65535), row_threads(N), 0, dev, g, x,
                        ptr_or_null<T>(w), m, r, static_cast<T*>(dx2.data_ptr()), rows, N);
    if ((dw.defined() || db.defined()) && N > 0)
      layer_norm_dwdb(g, x, m, r, mut_ptr_or_null<T>(dw), mut_ptr_or_null<T>(db), rows, N, dev);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_kernel, CUDA, cuda_layer_norm);
EMBER_REGISTER_KERNEL(layer_norm_backward_kernel, CUDA, cuda_layer_norm_backward);
EMBER_REGISTER_HALF_KERNEL(layer_norm_kernel, CUDA);
EMBER_REGISTER_HALF_KERNEL(layer_norm_backward_kernel, CUDA);

}  // namespace ember::cuda
