/// \file
/// The kernel tables of the 2-d pooling ops (ops/pool.cpp) and the window
/// arithmetic their CPU kernels and CUDA kernels (cuda/pool.cu) share, so both
/// backends pick exactly the same windows and divisors.
#pragma once

#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/hostdevice.h>
#include <ember/core/tensor.h>

namespace ember {

/// A pooling over (N, C, H, W) to (N, C, Ho, Wo). Fixed windows: kernel
/// kh x kw, stride sh x sw, padding ph x pw (as WindowGeom). Adaptive windows
/// (adaptive = true, kernel/stride/padding unused): output row o covers input
/// rows [floor(o H / Ho), ceil((o + 1) H / Ho)), as PyTorch's adaptive pools.
struct PoolGeom {
  ///@{
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo;  ///< the sizes named above
  ///@}
  bool adaptive = false;          ///< windows from the adaptive formula
  bool count_include_pad = true;  ///< avg: divide by the padded window's size
};

/// Rows [lo, hi) of the input window of output row o (unclipped for fixed
/// windows: lo may be negative, hi past the input), along one axis of input
/// size in, output size out.
EMBER_HD inline void pool_window(bool adaptive, int64_t o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t p,
                                 int64_t& lo, int64_t& hi) {
  if (adaptive) {
    lo = (o * in) / out;
    hi = ((o + 1) * in + out - 1) / out;
  } else {
    lo = o * s - p;
    hi = lo + k;
  }
}

/// The window of output (oh, ow) clipped to the input: rows [h0, h1), columns [w0, w1).
EMBER_HD inline void pool_window_clipped(const PoolGeom& g, int64_t oh, int64_t ow, int64_t& h0, int64_t& h1,
                                         int64_t& w0, int64_t& w1) {
  pool_window(g.adaptive, oh, g.H, g.Ho, g.kh, g.sh, g.ph, h0, h1);
  pool_window(g.adaptive, ow, g.W, g.Wo, g.kw, g.sw, g.pw, w0, w1);
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < g.H ? h1 : g.H;
  w1 = w1 < g.W ? w1 : g.W;
}

/// avg_pool's divisor for output (oh, ow), as PyTorch's avg_pool2d: with
/// count_include_pad, the window clipped to the padded input (hi <= H + ph);
/// without, the window clipped to the input; adaptive windows lie inside it.
EMBER_HD inline int64_t pool_divisor(const PoolGeom& g, int64_t oh, int64_t ow) {
  int64_t h0, h1, w0, w1;
  pool_window(g.adaptive, oh, g.H, g.Ho, g.kh, g.sh, g.ph, h0, h1);
  pool_window(g.adaptive, ow, g.W, g.Wo, g.kw, g.sw, g.pw, w0, w1);
  if (g.adaptive) return (h1 - h0) * (w1 - w0);
  if (g.count_include_pad) {
    h1 = h1 < g.H + g.ph ? h1 : g.H + g.ph;
    w1 = w1 < g.W + g.pw ? w1 : g.W + g.pw;
    return (h1 - h0) * (w1 - w0);
  }
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < g.H ? h1 : g.H;
  w1 = w1 < g.W ? w1 : g.W;
  return (h1 - h0) * (w1 - w0);
}

/// y[n, c, oh, ow] = max of the window (padding never wins); idx (int64) = the
/// flat h W + w of the first maximum in (h, w) order, NaN winning as in PyTorch.
extern KernelTable<void(const Tensor& x, Tensor& y, Tensor& idx, const PoolGeom& g)> max_pool2d_kernel;
/// dx[n, c, idx[o]] += dy[o] over the outputs o of each plane (dx zeroed by the kernel).
extern KernelTable<void(const Tensor& dy, const Tensor& idx, Tensor& dx, const PoolGeom& g)> max_pool2d_backward_kernel;
/// y = sum of the window's (in-input) values / pool_divisor.
extern KernelTable<void(const Tensor& x, Tensor& y, const PoolGeom& g)> avg_pool2d_kernel;
/// dx[n, c, h, w] = sum over the windows that hold (h, w) of dy / pool_divisor (dx written by the kernel).
extern KernelTable<void(const Tensor& dy, Tensor& dx, const PoolGeom& g)> avg_pool2d_backward_kernel;

}  // namespace ember
