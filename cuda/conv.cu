// CUDA kernels of ops/conv.cpp: unfold (im2col) and its adjoint fold
// (col2im), and conv2d's row layout im2row / row2im. conv2d itself is a GEMM
// over the rows (cuBLAS, through linear).
// im2col: one thread per element of cols (writes coalesced along the window
// positions). col2im: one thread per input pixel, summing the (few) cols
// entries that read it, so no atomics and a deterministic order.
#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/conv_kernels.h>

namespace ember::cuda {
namespace {

template <class T>
__global__ void im2col_kernel_impl(const T* __restrict__ x, T* __restrict__ cols, WindowGeom g) {
  const int64_t L = g.Ho * g.Wo, rows = g.C * g.kh * g.kw, total = g.N * rows * L;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = e % L, row = (e / L) % rows, n = e / (L * rows);
    const int64_t j = row % g.kw, i = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
    const int64_t oh = l / g.Wo, ow = l % g.Wo;
    const int64_t h = oh * g.sh - g.ph + i, w = ow * g.sw - g.pw + j;
    cols[e] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? x[((n * g.C + c) * g.H + h) * g.W + w] : T(0);
  }
}

template <class T>
__global__ void col2im_kernel_impl(const T* __restrict__ cols, T* __restrict__ dx, WindowGeom g) {
  const int64_t L = g.Ho * g.Wo, total = g.N * g.C * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C, n = e / (g.W * g.H * g.C);
    T acc = 0;
    // Kernel offsets in increasing (i, j), as the CPU adds them.
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t hh = h + g.ph - i;
      if (hh < 0 || hh % g.sh != 0 || hh / g.sh >= g.Ho) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t ww = w + g.pw - j;
        if (ww < 0 || ww % g.sw != 0 || ww / g.sw >= g.Wo) continue;
        const int64_t row = (c * g.kh + i) * g.kw + j;
        acc += cols[(n * g.C * g.kh * g.kw + row) * L + (hh / g.sh) * g.Wo + ww / g.sw];
      }
    }
    dx[e] = acc;
  }
}

// rows[(n*Ho + oh)*Wo + ow, (c*kh + i)*kw + j]: one thread per entry, writes coalesced along a row.
template <class T>
__global__ void im2row_kernel_impl(const T* __restrict__ x, T* __restrict__ rows, WindowGeom g) {
  const int64_t K = g.C * g.kh * g.kw, total = g.N * g.Ho * g.Wo * K;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = e % K, r = e / K;
    const int64_t j = k % g.kw, i = (k / g.kw) % g.kh, c = k / (g.kw * g.kh);
    const int64_t ow = r % g.Wo, oh = (r / g.Wo) % g.Ho, n = r / (g.Wo * g.Ho);
    const int64_t h = oh * g.sh - g.ph + i, w = ow * g.sw - g.pw + j;
    rows[e] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? x[((n * g.C + c) * g.H + h) * g.W + w] : T(0);
  }
}

// One thread per input pixel, summing the entries that read it in increasing
// (i, j), as the CPU does: no atomics.
template <class T>
__global__ void row2im_kernel_impl(const T* __restrict__ rows, T* __restrict__ dx, WindowGeom g) {
  const int64_t K = g.C * g.kh * g.kw, total = g.N * g.C * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C, n = e / (g.W * g.H * g.C);
    T acc = 0;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t hh = h + g.ph - i;
      if (hh < 0 || hh % g.sh != 0 || hh / g.sh >= g.Ho) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t ww = w + g.pw - j;
        if (ww < 0 || ww % g.sw != 0 || ww / g.sw >= g.Wo) continue;
        const int64_t r = (n * g.Ho + hh / g.sh) * g.Wo + ww / g.sw;
        acc += rows[r * K + (c * g.kh + i) * g.kw + j];
      }
    }
    dx[e] = acc;
  }
}

void cuda_im2row(const Tensor& x, Tensor& rows, const WindowGeom& g) {
  const int64_t total = rows.numel();
  if (total == 0) return;
  dispatch_floating(x.dtype(), "conv2d_im2row", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(im2row_kernel_impl<T>, blocks_for(total, 256, 8192), 256, 0, x.device().index,
                      static_cast<const T*>(x.data_ptr()), static_cast<T*>(rows.data_ptr()), g);
  });
}

void cuda_row2im(const Tensor& rows, Tensor& dx, const WindowGeom& g) {
  const int64_t total = dx.numel();
  if (total == 0) return;
  dispatch_floating(rows.dtype(), "conv2d_row2im", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(row2im_kernel_impl<T>, blocks_for(total, 256, 8192), 256, 0, dx.device().index,
                      static_cast<const T*>(rows.data_ptr()), static_cast<T*>(dx.data_ptr()), g);
  });
}

void cuda_im2col(const Tensor& x, Tensor& cols, const WindowGeom& g) {
  const int64_t total = g.N * g.C * g.kh * g.kw * g.Ho * g.Wo;
  if (total == 0) return;
  dispatch_floating(x.dtype(), "unfold", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(im2col_kernel_impl<T>, blocks_for(total, 256, 8192), 256, 0, x.device().index,
                      static_cast<const T*>(x.data_ptr()), static_cast<T*>(cols.data_ptr()), g);
  });
}

void cuda_col2im(const Tensor& cols, Tensor& dx, const WindowGeom& g) {
  const int64_t total = g.N * g.C * g.H * g.W;
  if (total == 0) return;
  dispatch_floating(cols.dtype(), "fold", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(col2im_kernel_impl<T>, blocks_for(total, 256, 8192), 256, 0, dx.device().index,
                      static_cast<const T*>(cols.data_ptr()), static_cast<T*>(dx.data_ptr()), g);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(im2col_kernel, CUDA, cuda_im2col);
EMBER_REGISTER_KERNEL(col2im_kernel, CUDA, cuda_col2im);
EMBER_REGISTER_KERNEL(im2row_kernel, CUDA, cuda_im2row);
EMBER_REGISTER_KERNEL(row2im_kernel, CUDA, cuda_row2im);

}  // namespace ember::cuda
