// CUDA kernels of ops/norm.cpp: layer_norm forward and backward, fused.
//
// Forward: one block per row; mean, then the variance in a second pass over
// the row (no E[x^2] - E[x]^2 cancellation), then y = (x - mean) rstd w + b.
// Backward, with xhat = (x - mean) rstd and gw = g w (g when no weight):
//   dx = rstd (gw - mean(gw) - xhat mean(gw xhat))   term 1: gw; term 2: the
//        mean's gradient; term 3: the variance's gradient;
//   dw = sum over rows of g xhat,  db = sum over rows of g;
// each block writes the dx of its rows and keeps partial dw, db; a second
// launch sums the blocks' partials in an order fixed by the shape (no float
// atomics, so the sums are deterministic). bfloat16 and float16 compute in float32 with
// float32 statistics, rounded once on store.
#include <algorithm>

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

// The backward's rows. Block b takes rows b, b + G, ... (G = gridDim.x) and
// writes their dx; thread t owns the columns t, t + blockDim.x, ... of every
// row, so it adds its columns' g xhat and g into the block's partial dw/db
// (acc: shared memory, or the block's slot of scratch when 2N values do not
// fit) without a barrier. With one block those are the sums; otherwise the
// blocks store their partials in scratch ([G][2N]) and layer_norm_sums_kernel
// adds them up in a second launch. Not the last block to finish, in this
// one: a single block's dependent loads of G * 2N values take about 0.5 ms
// per call on an H200, most of a small model's training step.
template <class T>
__global__ void layer_norm_backward_fused_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                                 const T* __restrict__ w, const opmath_t<T>* __restrict__ mean,
                                                 const opmath_t<T>* __restrict__ rstd, T* __restrict__ dx,
                                                 T* __restrict__ dw, T* __restrict__ db, opmath_t<T>* scratch,
                                                 int64_t rows, int64_t N, bool acc_shared) {
  using A = opmath_t<T>;
  __shared__ A red[32];
  EMBER_DYNAMIC_SHARED(A, smem);
  const bool sums = dw || db;
  A* acc = acc_shared ? smem : scratch ? scratch + int64_t(blockIdx.x) * 2 * N : nullptr;  // [dw | db partials]
  if (sums)
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) acc[i] = acc[N + i] = A(0);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *gr = g + row * N, *xr = x + row * N;
    const A m = mean[row], rs = rstd[row];
    A mg = 0, mgx = 0;
    if (dx) {  // the same branch for the whole block
      A sg = 0, sgx = 0;
      for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const A gi = w ? A(gr[i]) * A(w[i]) : A(gr[i]);
        sg += gi;
        sgx += gi * ((A(xr[i]) - m) * rs);
      }
      mg = block_reduce(sg, SumOp{}, A(0), red) / A(N);
      mgx = block_reduce(sgx, SumOp{}, A(0), red) / A(N);
    }
    T* dr = dx ? dx + row * N : nullptr;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      const A gy = A(gr[i]), xh = (A(xr[i]) - m) * rs;
      if (dr) dr[i] = T(rs * ((w ? gy * A(w[i]) : gy) - mg - xh * mgx));  // terms 1, 2, 3
      if (sums) {
        acc[i] += gy * xh;
        acc[N + i] += gy;
      }
    }
  }
  if (!sums) return;
  if (gridDim.x == 1) {  // this block saw every row
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      if (dw) dw[i] = T(acc[i]);
      if (db) db[i] = T(acc[N + i]);
    }
    return;
  }
  if (acc_shared)  // each thread its own columns: no barrier needed
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
      scratch[int64_t(blockIdx.x) * 2 * N + i] = acc[i];
      scratch[int64_t(blockIdx.x) * 2 * N + N + i] = acc[N + i];
    }
}

// dw[i] = sum over blocks b of part[b][i], db[i] = sum of part[b][N + i]:
// the partials' columns in tiles of 32, 8 threads down each column taking
// every 8th block, their sums met in y order (column_combine). The order is
// fixed by G and N, so the sums are the same run after run.
template <class T, class A>
__global__ void layer_norm_sums_kernel(const A* __restrict__ part, T* __restrict__ dw, T* __restrict__ db, int64_t G,
                                       int64_t N) {
  __shared__ A tile[kColumnRows][kColumnTile + 1];
  const int64_t n2 = 2 * N, tiles = (n2 + kColumnTile - 1) / kColumnTile;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t j = t * kColumnTile + threadIdx.x;
    A s = 0;
    if (j < n2)
      for (int64_t b = threadIdx.y; b < G; b += kColumnRows) s += part[b * n2 + j];
    s = column_combine(s, tile);
    if (threadIdx.y == 0 && j < n2) {
      if (j < N && dw) dw[j] = T(s);
      if (j >= N && db) db[j - N] = T(s);
    }
  }
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

// Blocks of the backward: enough to keep a GPU busy with rows, few enough
// that the G partials per column stay short (G * N at most about
// kFinalSums, G at least a couple per SM of a large GPU where the rows
// allow).
constexpr int64_t kFinalSums = int64_t(1) << 18;
constexpr int64_t kMinBlocks = 256, kMaxBlocks = 1024;
// Dynamic shared memory for the partials, below the 48 KiB a launch may use
// without opting in (the block reduction's scratch is static).
constexpr size_t kAccSharedBytes = 40 * 1024;

void cuda_layer_norm_backward(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& mean,
                              const Tensor& rstd, Tensor& dx2, Tensor& dw, Tensor& db) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  const bool want_dx = dx2.defined() && rows > 0, sums = (dw.defined() || db.defined()) && N > 0;
  if (!want_dx && !sums) return;
  const int dev = x2.device().index;
  dispatch_floating_and_half(x2.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    const int64_t grid = std::clamp<int64_t>(
        std::min(rows, std::clamp<int64_t>(kFinalSums / std::max<int64_t>(N, 1), kMinBlocks, kMaxBlocks)), 1, 65535);
    const bool acc_shared = sums && size_t(2 * N) * sizeof(A) <= kAccSharedBytes;
    // The partials of every block but the one that sees all rows alone.
    Tensor scratch =
        sums && (grid > 1 || !acc_shared) ? empty({grid * 2 * N}, TensorOptions(dtype_of_v<A>, x2.device())) : Tensor();
    EMBER_CUDA_LAUNCH(layer_norm_backward_fused_kernel<T>, static_cast<unsigned>(grid), row_threads(N),
                      acc_shared ? size_t(2 * N) * sizeof(A) : 0, dev, static_cast<const T*>(g2.data_ptr()),
                      static_cast<const T*>(x2.data_ptr()), ptr_or_null<T>(w), static_cast<const A*>(mean.data_ptr()),
                      static_cast<const A*>(rstd.data_ptr()), want_dx ? static_cast<T*>(dx2.data_ptr()) : nullptr,
                      sums ? mut_ptr_or_null<T>(dw) : nullptr, sums ? mut_ptr_or_null<T>(db) : nullptr,
                      scratch.defined() ? static_cast<A*>(scratch.data_ptr()) : nullptr, rows, N, acc_shared);
    if (sums && grid > 1)
      EMBER_CUDA_LAUNCH((layer_norm_sums_kernel<T, A>), column_grid_x((2 * N + kColumnTile - 1) / kColumnTile),
                        dim3(kColumnTile, kColumnRows), 0, dev, static_cast<const A*>(scratch.data_ptr()),
                        mut_ptr_or_null<T>(dw), mut_ptr_or_null<T>(db), grid, N);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_kernel, CUDA, cuda_layer_norm);
EMBER_REGISTER_KERNEL(layer_norm_backward_kernel, CUDA, cuda_layer_norm_backward);
EMBER_REGISTER_HALF_KERNEL(layer_norm_kernel, CUDA);
EMBER_REGISTER_HALF_KERNEL(layer_norm_backward_kernel, CUDA);

}  // namespace ember::cuda
