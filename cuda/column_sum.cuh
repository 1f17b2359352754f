/// \file
/// Sums down the columns of a contiguous [A, R, B] block, deterministically
/// and without atomics: the column reductions of the backward passes (a bias
/// gradient sums the output gradient over every row, layer_norm's dw and db
/// over every token).
///
/// One thread per column summing all R rows is the simple kernel, and on a
/// GPU it leaves the chip idle: a bias of 64 over 12,800 rows is 64 threads,
/// each doing 12,800 dependent adds of loads (about 5 ms on an H200, most of
/// a training step). Here the rows are split as well as the columns:
///
///   pass 1: a block of 32 x 8 threads owns 32 neighbouring columns (the x
///           threads read neighbouring addresses) and one slice of the rows
///           (blockIdx.y); its 8 rows of threads take every 8th row of the
///           slice, and their 8 partial sums meet in shared memory in y order;
///   pass 2: the same kernel sums the slices' partials (float32 for the
///           16-bit types, int64 for integers) down the slice axis and
///           rounds once to the output type.
///
/// The order of the additions depends on the shape alone, so a result is the
/// same run after run.
#pragma once

#include <algorithm>
#include <type_traits>

#include <ember/core/half.h>
#include <ember/core/tensor.h>
#include <ember/cuda/common.h>

namespace ember::cuda {

/// 32 columns per block (one warp wide), 8 threads down each column.
///@{
constexpr int kColumnTile = 32;
constexpr int kColumnRows = 8;
///@}

/// The accumulator of a column sum: int64 for integers, float32 for the
/// 16-bit types, the type itself otherwise.
template <class T>
using column_acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>;

/// Threads (x, y) of a 32 x 8 block each hold a partial sum of column x;
/// thread (x, 0) receives the column's total, added in y order. tile is the
/// kernel's __shared__ T[kColumnRows][kColumnTile + 1] (the + 1 keeps the
/// column reads off one shared-memory bank).
template <class T>
__device__ __forceinline__ T column_combine(T v, T (*tile)[kColumnTile + 1]) {
  __syncthreads();  // the previous tile's readers are done with it
  tile[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  T s = 0;
  if (threadIdx.y == 0)
    for (int k = 0; k < kColumnRows; ++k) s += tile[k][threadIdx.x];
  return s;
}

/// out[slice][a][b] = sum over the rows r of slice blockIdx.y (rows
/// [blockIdx.y * slice_rows, + slice_rows) of R) of x[a][r][b]; with one
/// slice, out is [A][B].
template <class TI, class TO>
__global__ void column_sum_kernel(const TI* __restrict__ x, TO* __restrict__ out, int64_t A, int64_t R, int64_t B,
                                  int64_t slice_rows) {
  using Acc = column_acc_t<TI>;
  __shared__ Acc tile[kColumnRows][kColumnTile + 1];
  const int64_t per_a = (B + kColumnTile - 1) / kColumnTile, tiles = A * per_a;
  const int64_t r0 = int64_t(blockIdx.y) * slice_rows, r1 = r0 + slice_rows < R ? r0 + slice_rows : R;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t a = t / per_a, b = (t % per_a) * kColumnTile + threadIdx.x;
    Acc s = 0;
    if (b < B)
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) s += Acc(x[(a * R + r) * B + b]);
    s = column_combine(s, tile);
    if (threadIdx.y == 0 && b < B) out[(int64_t(blockIdx.y) * A + a) * B + b] = static_cast<TO>(s);
  }
}

/// Blocks that fill a large GPU: four per SM of an H100 or H200. The
/// two-pass sums (here and the row sums of cuda/reduce.cu) slice their work
/// until a launch has about this many.
constexpr int64_t kFillBlocks = 512;

/// How many slices pass 1 splits R rows into when it has `tiles` blocks of
/// columns: about kFillBlocks blocks in all, at least 64 rows per slice, at
/// most 1024 slices.
inline int64_t column_slices(int64_t tiles, int64_t R) {
  const int64_t want = (kFillBlocks + tiles - 1) / std::max<int64_t>(tiles, 1);
  return std::max<int64_t>(1, std::min({want, (R + 63) / 64, int64_t(1024)}));
}

/// Blocks along x for `tiles` tiles (the kernels loop over the rest).
inline unsigned column_grid_x(int64_t tiles) { return static_cast<unsigned>(std::clamp<int64_t>(tiles, 1, 65535)); }

/// Pass 2: out[i] = sum over s of partial[s][i], i < n, rounded once to TO.
template <class Acc, class TO>
void column_sum_finish(const Acc* partial, TO* out, int64_t slices, int64_t n, int dev) {
  EMBER_CUDA_LAUNCH((column_sum_kernel<Acc, TO>), dim3(column_grid_x((n + kColumnTile - 1) / kColumnTile), 1),
                    dim3(kColumnTile, kColumnRows), 0, dev, partial, out, int64_t(1), slices, n, slices);
}

/// Scratch for the partial sums of `slices` slices of n sums (columns, or
/// rows in cuda/reduce.cu), in the accumulator type of T, on device dev.
template <class T>
Tensor partial_sums(int64_t slices, int64_t n, int dev) {
  using Acc = column_acc_t<T>;
  return empty({slices * n}, TensorOptions(dtype_of_v<Acc>, Device(DeviceType::CUDA, dev)));
}

/// out[a][b] = sum over r of x[a][r][b] for a contiguous [A, R, B] block x,
/// in one or two passes (above).
template <class T>
void column_sum(const T* x, T* out, int64_t A, int64_t R, int64_t B, int dev) {
  using Acc = column_acc_t<T>;
  const int64_t tiles = A * ((B + kColumnTile - 1) / kColumnTile), slices = column_slices(tiles, R);
  const int64_t slice_rows = (R + slices - 1) / slices;
  const dim3 block(kColumnTile, kColumnRows);
  if (slices == 1) {
    EMBER_CUDA_LAUNCH((column_sum_kernel<T, T>), dim3(column_grid_x(tiles), 1), block, 0, dev, x, out, A, R, B,
                      slice_rows);
    return;
  }
  Tensor partial = partial_sums<T>(slices, A * B, dev);
  Acc* p = static_cast<Acc*>(partial.data_ptr());
  EMBER_CUDA_LAUNCH((column_sum_kernel<T, Acc>), dim3(column_grid_x(tiles), static_cast<unsigned>(slices)), block, 0,
                    dev, x, p, A, R, B, slice_rows);
  column_sum_finish(p, out, slices, A * B, dev);
}

/// d[i] = f(i) over a contiguous [rows, n] block, stored to out (when not
/// null) and summed down each column into db (when not null): the backward
/// passes whose elementwise gradient is also a bias's gradient (linear_gelu's
/// gelu', linear_dropout_add's mask). Rows [r0, r1) of blockIdx.y's slice,
/// 32 columns per block tile; each column's partial sum of the stored d (as
/// sum(d) would add it) goes to db[blockIdx.y][column]. f is a functor of
/// the element's flat index returning T.
template <class T, class TO, class F>
__global__ void map_column_sum_kernel(F f, T* __restrict__ out, TO* __restrict__ db, int64_t rows, int64_t n,
                                      int64_t slice_rows) {
  using A = opmath_t<T>;
  __shared__ A tile[kColumnRows][kColumnTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * slice_rows, r1 = r0 + slice_rows < rows ? r0 + slice_rows : rows;
  const int64_t tiles = (n + kColumnTile - 1) / kColumnTile;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t j = t * kColumnTile + threadIdx.x;
    A s = 0;
    if (j < n)
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRows) {
        const T d = f(r * n + j);
        if (out) out[r * n + j] = d;
        s += A(d);
      }
    if (db) {  // uniform over the grid: every thread reaches the barriers or none
      s = column_combine(s, tile);
      if (threadIdx.y == 0 && j < n) db[int64_t(blockIdx.y) * n + j] = TO(s);
    }
  }
}

/// map_column_sum_kernel in one pass, or with more than one slice of rows
/// two (the slices' float32 partials, then column_sum_finish).
template <class T, class F>
void map_column_sum(F f, T* out, T* db, int64_t rows, int64_t n, int dev) {
  using Acc = opmath_t<T>;
  const int64_t tiles = (n + kColumnTile - 1) / kColumnTile, slices = column_slices(tiles, rows);
  const int64_t slice_rows = (rows + slices - 1) / slices;
  const dim3 grid(column_grid_x(tiles), static_cast<unsigned>(slices)), block(kColumnTile, kColumnRows);
  if (slices == 1 || !db) {
    EMBER_CUDA_LAUNCH((map_column_sum_kernel<T, T, F>), grid, block, 0, dev, f, out, db, rows, n, slice_rows);
    return;
  }
  Tensor partial = partial_sums<T>(slices, n, dev);
  Acc* p = static_cast<Acc*>(partial.data_ptr());
  EMBER_CUDA_LAUNCH((map_column_sum_kernel<T, Acc, F>), grid, block, 0, dev, f, out, p, rows, n, slice_rows);
  column_sum_finish(p, db, slices, n, dev);
}

}  // namespace ember::cuda
