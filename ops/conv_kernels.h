/// \file
/// The kernel tables of unfold (im2col) and fold (col2im), of conv2d's row
/// layout (im2row, row2im), shared by the CPU kernels (ops/conv.cpp) and the
/// CUDA ones (cuda/conv.cu), and of conv2d's direct forward and backward
/// (ops/conv2d_cpu.cpp; a backend without them runs conv2d composed).
#pragma once

#include <array>
#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember {

/// The geometry of a sliding window over (N, C, H, W): kernel kh x kw, stride sh x sw, padding ph x pw,
/// Ho x Wo output positions.
struct WindowGeom {
  ///@{
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo;  ///< the sizes named above
  ///@}
};

/// Checks x (N, C, H, W), kernel and stride (positive), padding (non-negative) and that the kernel fits the
/// padded input (ShapeError / ValueError naming op), and returns the geometry with Ho, Wo.
WindowGeom window_geom(const char* op, const Tensor& x, std::array<int64_t, 2> k, std::array<int64_t, 2> s,
                       std::array<int64_t, 2> p);

/// cols[n, (c*kh + i)*kw + j, oh*Wo + ow] = x[n, c, oh*sh - ph + i, ow*sw - pw + j] (0 outside).
extern KernelTable<void(const Tensor& x, Tensor& cols, const WindowGeom& g)> im2col_kernel;
/// dx[n, c, h, w] = sum of the cols entries that read it (dx zeroed by the kernel).
extern KernelTable<void(const Tensor& cols, Tensor& dx, const WindowGeom& g)> col2im_kernel;
/// The transposed layout conv2d uses, one row per output position:
/// rows[(n*Ho + oh)*Wo + ow, (c*kh + i)*kw + j] = x[n, c, oh*sh - ph + i, ow*sw - pw + j] (0 outside).
extern KernelTable<void(const Tensor& x, Tensor& rows, const WindowGeom& g)> im2row_kernel;
/// Its adjoint: dx[n, c, h, w] = sum of the rows entries that read it, in increasing (i, j) (dx written by the kernel).
extern KernelTable<void(const Tensor& rows, Tensor& dx, const WindowGeom& g)> row2im_kernel;

/// conv2d in one kernel: out (N, O, Ho, Wo) = the convolution of x (N, C, H, W) with w (O, C, kh, kw), plus
/// bias (O) when defined; every tensor contiguous and of one dtype.
extern KernelTable<void(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const WindowGeom& g)>
    conv2d_forward_kernel;
/// Its backward from gy (N, O, Ho, Wo): writes dx, dw and db, each only when defined (allocated, contiguous;
/// the kernel overwrites them).
extern KernelTable<void(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& dx, Tensor& dw, Tensor& db,
                        const WindowGeom& g)>
    conv2d_backward_kernel;

}  // namespace ember
