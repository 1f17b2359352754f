// CUDA kernels of ops/pool.cpp: max_pool2d and avg/adaptive_avg_pool2d,
// forward and backward. Window arithmetic from ops/pool_kernels.h, so the
// windows and divisors are the CPU's.
// Forward: one thread per output, scanning its window in (h, w) order as the
// CPU does (the same argmax on ties). Backward: one thread per input pixel
// gathering the outputs whose windows hold it, in increasing (oh, ow) (the
// CPU scatters in that order), so no atomics and the CPU's sums exactly.
#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/pool_kernels.h>
#include <limits>

namespace ember::cuda {
namespace {

template <class T>
__global__ void max_pool2d_impl(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ idx, PoolGeom g) {
  const int64_t total = g.N * g.C * g.Ho * g.Wo;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, nc = e / (g.Wo * g.Ho);
    const T* plane = x + nc * g.H * g.W;
    int64_t h0, h1, w0, w1;
    pool_window_clipped(g, oh, ow, h0, h1, w0, w1);
    T best = -std::numeric_limits<T>::infinity();
    int64_t arg = h0 * g.W + w0;
    bool nan = false;
    for (int64_t h = h0; h < h1 && !nan; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const T v = plane[h * g.W + w];
        if (v > best || v != v) {  // NaN wins and stays (PyTorch)
          best = v;
          arg = h * g.W + w;
          if (v != v) {
            nan = true;
            break;
          }
        }
      }
    y[e] = best;
    idx[e] = arg;
  }
}

// The outputs along one axis whose windows may hold input row i: [lo, hi).
// Fixed windows: o s - p <= i < o s - p + k; adaptive: every output is tested.
__device__ inline void outputs_holding(bool adaptive, int64_t i, int64_t out, int64_t k, int64_t s, int64_t p,
                                       int64_t& lo, int64_t& hi) {
  if (adaptive) {
    lo = 0;
    hi = out;
    return;
  }
  const int64_t a = i + p - k + 1;  // smallest o with o s > i + p - k
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  hi = (i + p) / s + 1;
  hi = hi < out ? hi : out;
}

template <class T>
__global__ void max_pool2d_backward_impl(const T* __restrict__ gp, const int64_t* __restrict__ idx, T* __restrict__ dx,
                                         PoolGeom g) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, nc = e / (g.W * g.H);
    int64_t oh0, oh1, ow0, ow1;
    outputs_holding(g.adaptive, h, g.Ho, g.kh, g.sh, g.ph, oh0, oh1);
    outputs_holding(g.adaptive, w, g.Wo, g.kw, g.sw, g.pw, ow0, ow1);
    const int64_t self = h * g.W + w, base = nc * g.Ho * g.Wo;
    T acc = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        if (idx[base + oh * g.Wo + ow] == self) acc += gp[base + oh * g.Wo + ow];
    dx[e] = acc;
  }
}

template <class T>
__global__ void avg_pool2d_impl(const T* __restrict__ x, T* __restrict__ y, PoolGeom g) {
  const int64_t total = g.N * g.C * g.Ho * g.Wo;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, nc = e / (g.Wo * g.Ho);
    const T* plane = x + nc * g.H * g.W;
    int64_t h0, h1, w0, w1;
    pool_window_clipped(g, oh, ow, h0, h1, w0, w1);
    T s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += plane[h * g.W + w];
    y[e] = s / static_cast<T>(pool_divisor(g, oh, ow));
  }
}

template <class T>
__global__ void avg_pool2d_backward_impl(const T* __restrict__ gp, T* __restrict__ dx, PoolGeom g) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, nc = e / (g.W * g.H);
    int64_t oh0, oh1, ow0, ow1;
    outputs_holding(g.adaptive, h, g.Ho, g.kh, g.sh, g.ph, oh0, oh1);
    outputs_holding(g.adaptive, w, g.Wo, g.kw, g.sw, g.pw, ow0, ow1);
    T acc = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      int64_t h0, h1;
      pool_window(g.adaptive, oh, g.H, g.Ho, g.kh, g.sh, g.ph, h0, h1);
      if (h < h0 || h >= h1) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        int64_t w0, w1;
        pool_window(g.adaptive, ow, g.W, g.Wo, g.kw, g.sw, g.pw, w0, w1);
        if (w < w0 || w >= w1) continue;
        acc += gp[nc * g.Ho * g.Wo + oh * g.Wo + ow] / static_cast<T>(pool_divisor(g, oh, ow));
      }
    }
    dx[e] = acc;
  }
}

void cuda_max_pool2d(const Tensor& x, Tensor& y, Tensor& idx, const PoolGeom& g) {
  const int64_t total = y.numel();
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(max_pool2d_impl<T>, blocks_for(total, 256, 8192), 256, 0, x.device().index,
                      static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()),
                      static_cast<int64_t*>(idx.data_ptr()), g);
  });
}

void cuda_max_pool2d_backward(const Tensor& gt, const Tensor& idx, Tensor& dx, const PoolGeom& g) {
  const int64_t total = dx.numel();
  dispatch_floating(gt.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(max_pool2d_backward_impl<T>, blocks_for(total, 256, 8192), 256, 0, dx.device().index,
                      static_cast<const T*>(gt.data_ptr()), static_cast<const int64_t*>(idx.data_ptr()),
                      static_cast<T*>(dx.data_ptr()), g);
  });
}

void cuda_avg_pool2d(const Tensor& x, Tensor& y, const PoolGeom& g) {
  const int64_t total = y.numel();
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(avg_pool2d_impl<T>, blocks_for(total, 256, 8192), 256, 0, x.device().index,
                      static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), g);
  });
}

void cuda_avg_pool2d_backward(const Tensor& gt, Tensor& dx, const PoolGeom& g) {
  const int64_t total = dx.numel();
  dispatch_floating(gt.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(avg_pool2d_backward_impl<T>, blocks_for(total, 256, 8192), 256, 0, dx.device().index,
                      static_cast<const T*>(gt.data_ptr()), static_cast<T*>(dx.data_ptr()), g);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(max_pool2d_kernel, CUDA, cuda_max_pool2d);
EMBER_REGISTER_KERNEL(max_pool2d_backward_kernel, CUDA, cuda_max_pool2d_backward);
EMBER_REGISTER_KERNEL(avg_pool2d_kernel, CUDA, cuda_avg_pool2d);
EMBER_REGISTER_KERNEL(avg_pool2d_backward_kernel, CUDA, cuda_avg_pool2d_backward);

}  // namespace ember::cuda
