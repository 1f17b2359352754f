// unfold (im2col) with its adjoint fold (col2im) as CPU kernels, and conv2d.
// conv2d with overlapping windows runs as one kernel with its own backward
// where the backend has one (the CPU: ops/conv2d_cpu.cpp, GEMMs over
// cache-sized tiles of im2col columns); otherwise (CUDA, patch embeddings)
// it is composed as linear(im2row(x), weight (O,
// C*kh*kw), bias): one row of C*kh*kw inputs per output position, so the
// forward and both backward products are each one GEMM over all N*Ho*Wo
// positions (bias fused), with the backward of linear and of im2row (its
// adjoint row2im).
#include <ember/ops/conv.h>
#include <ember/ops/conv_kernels.h>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/core/profiler.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/matmul.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>

namespace ember {

// Tables declared in ops/conv_kernels.h (with WindowGeom).
decltype(im2col_kernel) im2col_kernel("unfold");
decltype(col2im_kernel) col2im_kernel("fold");
decltype(im2row_kernel) im2row_kernel("conv2d_im2row");
decltype(row2im_kernel) row2im_kernel("conv2d_row2im");

namespace {

void cpu_im2col(const Tensor& x, Tensor& cols, const WindowGeom& g) {
  dispatch_floating(x.dtype(), "unfold", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* cp = static_cast<T*>(cols.data_ptr());
    const int64_t L = g.Ho * g.Wo;
    parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const int64_t n = nc / g.C, c = nc % g.C;
        const T* plane = xp + nc * g.H * g.W;
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j) {
            T* row = cp + (n * g.C * g.kh * g.kw + (c * g.kh + i) * g.kw + j) * L;
            for (int64_t oh = 0; oh < g.Ho; ++oh) {
              const int64_t h = oh * g.sh - g.ph + i;
              for (int64_t ow = 0; ow < g.Wo; ++ow) {
                const int64_t w = ow * g.sw - g.pw + j;
                row[oh * g.Wo + ow] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? plane[h * g.W + w] : T(0);
              }
            }
          }
      }
    });
  });
}

void cpu_col2im(const Tensor& cols, Tensor& dx, const WindowGeom& g) {
  dispatch_floating(cols.dtype(), "fold", [&](auto tag) {
    using T = decltype(tag);
    const T* cp = static_cast<const T*>(cols.data_ptr());
    T* dp = static_cast<T*>(dx.data_ptr());
    const int64_t L = g.Ho * g.Wo;
    // Each (n, c) plane is written by its own rows of cols only: no races.
    parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const int64_t n = nc / g.C, c = nc % g.C;
        T* plane = dp + nc * g.H * g.W;
        std::fill(plane, plane + g.H * g.W, T(0));
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j) {
            const T* row = cp + (n * g.C * g.kh * g.kw + (c * g.kh + i) * g.kw + j) * L;
            for (int64_t oh = 0; oh < g.Ho; ++oh) {
              const int64_t h = oh * g.sh - g.ph + i;
              if (h < 0 || h >= g.H) continue;
              for (int64_t ow = 0; ow < g.Wo; ++ow) {
                const int64_t w = ow * g.sw - g.pw + j;
                if (w >= 0 && w < g.W) plane[h * g.W + w] += row[oh * g.Wo + ow];
              }
            }
          }
      }
    });
  });
}

// Windows that tile the image (stride = kernel, no padding: a patch
// embedding): each pixel is in one window or, past the last whole one, none.
bool tiles(const WindowGeom& g) { return g.kh == g.sh && g.kw == g.sw && g.ph == 0 && g.pw == 0; }

void cpu_im2row(const Tensor& x, Tensor& rows, const WindowGeom& g) {
  // (16-bit elements are moved as they are: a reordering is exact.)
  dispatch_floating_and_half(x.dtype(), "conv2d_im2row", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* rp = static_cast<T*>(rows.data_ptr());
    const int64_t K = g.C * g.kh * g.kw;
    // One task per output row (n, oh): its Wo rows of K entries are contiguous.
    parallel_for(0, g.N * g.Ho, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t noh = lo; noh < hi; ++noh) {
        const int64_t n = noh / g.Ho, oh = noh % g.Ho;
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          T* row = rp + (noh * g.Wo + ow) * K;
          for (int64_t c = 0; c < g.C; ++c) {
            const T* plane = xp + (n * g.C + c) * g.H * g.W;
            for (int64_t i = 0; i < g.kh; ++i) {
              const int64_t h = oh * g.sh - g.ph + i;
              T* dst = row + (c * g.kh + i) * g.kw;
              if (h < 0 || h >= g.H) {
                std::fill(dst, dst + g.kw, T(0));
                continue;
              }
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t w = ow * g.sw - g.pw + j;
                dst[j] = (w >= 0 && w < g.W) ? plane[h * g.W + w] : T(0);
              }
            }
          }
        }
      }
    });
  });
}

void cpu_row2im(const Tensor& rows, Tensor& dx, const WindowGeom& g) {
  dispatch_floating_and_half(rows.dtype(), "conv2d_row2im", [&](auto tag) {
    using T = decltype(tag);
    const T* rp = static_cast<const T*>(rows.data_ptr());
    T* dp = static_cast<T*>(dx.data_ptr());
    const int64_t K = g.C * g.kh * g.kw, L = g.Ho * g.Wo;
    if (tiles(g)) {
      // Windows that tile the image (a patch embedding): each pixel is one
      // entry of one row, or none past the last whole window. A plain
      // reordering, written in image order (contiguous runs of kw entries
      // read from each row); no sums, so exact in any dtype. The general
      // loop below gathered one entry at a time, K apart.
      parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t nc = lo; nc < hi; ++nc) {
          const int64_t n = nc / g.C, c = nc % g.C;
          const T* base = rp + n * L * K + c * g.kh * g.kw;
          for (int64_t h = 0; h < g.H; ++h) {
            T* drow = dp + (nc * g.H + h) * g.W;
            const int64_t oh = h / g.kh, i = h % g.kh;
            int64_t w = 0;
            if (oh < g.Ho)
              for (int64_t ow = 0; ow < g.Wo; ++ow) {
                const T* src = base + (oh * g.Wo + ow) * K + i * g.kw;
                for (int64_t j = 0; j < g.kw; ++j) drow[w++] = src[j];
              }
            for (; w < g.W; ++w) drow[w] = T(0);
          }
        }
      });
      return;
    }
    // 16-bit sums would round at each overlap: conv2d sends only tiling
    // windows here in those dtypes.
    if constexpr (is_half_v<T>) {
      throw DTypeError(detail::cat_str("conv2d_row2im: windows that overlap or pad in ", dtype_name(rows.dtype()),
                                       " (compute in float32)"));
    } else {
      // Each (n, c) plane is written by its own entries only: no races; each
      // pixel sums its entries in increasing (i, j), as the CUDA kernel does.
      // (Walking the rows in order and scattering into the image instead
      // measured no faster.)
      parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t nc = lo; nc < hi; ++nc) {
          const int64_t n = nc / g.C, c = nc % g.C;
          T* plane = dp + nc * g.H * g.W;
          std::fill(plane, plane + g.H * g.W, T(0));
          const T* base = rp + n * L * K;
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t k = (c * g.kh + i) * g.kw + j;
              for (int64_t oh = 0; oh < g.Ho; ++oh) {
                const int64_t h = oh * g.sh - g.ph + i;
                if (h < 0 || h >= g.H) continue;
                for (int64_t ow = 0; ow < g.Wo; ++ow) {
                  const int64_t w = ow * g.sw - g.pw + j;
                  if (w >= 0 && w < g.W) plane[h * g.W + w] += base[(oh * g.Wo + ow) * K + k];
                }
              }
            }
        }
      });
    }
  });
}

// conv2d through the backend's own forward and backward kernels
// (conv2d_forward_kernel, conv2d_backward_kernel), which save only x and the
// weight for backward.
Tensor conv2d_direct(const Tensor& x, const Tensor& weight, const Tensor& bias, const WindowGeom& g) {
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    check_same_device("conv2d", x, *t);
    EMBER_CHECK(t->dtype() == x.dtype(), DTypeError, "conv2d: input has dtype ", dtype_name(x.dtype()), " but ",
                t == &weight ? "weight" : "bias", " has dtype ", dtype_name(t->dtype()));
  }
  const int64_t O = weight.size(0);
  const TensorOptions opts(x.dtype(), x.device());
  const Tensor xc = x.detach().contiguous(), wc = weight.detach().contiguous();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty({g.N, O, g.Ho, g.Wo}, opts);
  // Each of the forward and the two backward products is 2 N O K L FLOPs
  // (K = C*kh*kw, L = Ho*Wo), counted with matmul's (core/profiler.h).
  const auto flops = static_cast<uint64_t>(2 * g.N * O * g.C * g.kh * g.kw * g.Ho * g.Wo);
  profiler::add_matmul_flops(flops);
  if (out.numel()) conv2d_forward_kernel(x.device(), xc, wc, bc, out, g);
  if (autograd::needs_grad({x, weight, bias}))
    autograd::record(
        "conv2d", {x, weight, bias}, out,
        [sx = autograd::SavedTensor(xc), sw = autograd::SavedTensor(wc), g, flops](autograd::BackwardContext& ctx) {
          const Tensor gy = ctx.grad_output().contiguous();
          const Tensor xs = sx.get(), ws = sw.get();
          const TensorOptions o(xs.dtype(), xs.device());
          Tensor dx = ctx.needs_grad(0) ? empty(xs.shape(), o) : Tensor();
          Tensor dw = ctx.needs_grad(1) ? empty(ws.shape(), o) : Tensor();
          Tensor db = ctx.needs_grad(2) ? empty({ws.size(0)}, o) : Tensor();
          profiler::add_matmul_flops(flops * (dx.defined() + dw.defined()));
          if (gy.numel())
            conv2d_backward_kernel(gy.device(), xs, ws, gy, dx, dw, db, g);
          else  // no output positions: nothing flows back
            for (Tensor* t : {&dx, &dw, &db})
              if (t->defined()) t->zero_();
          for (int i = 0; i < 3; ++i)
            if (ctx.needs_grad(i)) ctx.set_grad(i, i == 0 ? dx : i == 1 ? dw : db);
        });
  return out;
}

}  // namespace

EMBER_REGISTER_KERNEL(im2row_kernel, CPU, cpu_im2row);
EMBER_REGISTER_KERNEL(row2im_kernel, CPU, cpu_row2im);
EMBER_REGISTER_KERNEL(im2col_kernel, CPU, cpu_im2col);
EMBER_REGISTER_KERNEL(col2im_kernel, CPU, cpu_col2im);

WindowGeom window_geom(const char* op, const Tensor& x, std::array<int64_t, 2> k, std::array<int64_t, 2> s,
                       std::array<int64_t, 2> p) {
  EMBER_CHECK(x.dim() == 4, ShapeError, op, ": expected input of shape (N, C, H, W), got ", x.shape().str());
  EMBER_CHECK(x.is_floating_point(), DTypeError, op, ": expected a floating-point input, got ", dtype_name(x.dtype()));
  EMBER_CHECK(k[0] > 0 && k[1] > 0 && s[0] > 0 && s[1] > 0 && p[0] >= 0 && p[1] >= 0, ValueError, op,
              ": kernel and stride must be positive and padding non-negative");
  WindowGeom g{x.size(0), x.size(1), x.size(2), x.size(3), k[0], k[1], s[0], s[1], p[0], p[1], 0, 0};
  EMBER_CHECK(g.H + 2 * g.ph >= g.kh && g.W + 2 * g.pw >= g.kw, ShapeError, op, ": kernel ", g.kh, "x", g.kw,
              " is larger than the padded input of shape ", x.shape().str());
  g.Ho = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

namespace {

Tensor unfold_body(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                   std::array<int64_t, 2> padding) {
  const WindowGeom g = window_geom("unfold", x, kernel, stride, padding);
  const Tensor xc = x.detach().contiguous();
  Tensor cols = empty({g.N, g.C * g.kh * g.kw, g.Ho * g.Wo}, TensorOptions(x.dtype(), x.device()));
  if (cols.numel()) im2col_kernel(x.device(), xc, cols, g);
  if (autograd::needs_grad({x}))
    autograd::record("unfold", {x}, cols, [g](autograd::BackwardContext& ctx) {
      const Tensor gc = ctx.grad_output().contiguous();
      Tensor dx = empty({g.N, g.C, g.H, g.W}, TensorOptions(gc.dtype(), gc.device()));
      col2im_kernel(gc.device(), gc, dx, g);
      ctx.set_grad(0, dx);
    });
  return cols;
}

// conv2d is on PyTorch's lower-precision autocast list. Its 16-bit
// handling is the body's: the bf16 GEMM where the windows tile the image,
// one float32 convolution rounded once otherwise.
namespace {
void lower_conv2d(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& w = c.tensor(1);
  std::vector<std::string> in{g.value(c.tensor(0)), g.value(w)};
  if (c.has_tensor(2)) in.push_back(g.value(c.tensor(2)));
  const std::vector<int64_t> s = c.ints(3), p = c.ints(4);
  g.bind(c.outputs[0], g.node("Conv", in,
                              {{"kernel_shape", std::vector<int64_t>{w.size(2), w.size(3)}},
                               {"strides", s},
                               {"pads", std::vector<int64_t>{p[0], p[1], p[0], p[1]}}})[0]);
}
}  // namespace

constexpr OpDef conv2d_op{
    .name = "conv2d",
    .autocast = Autocast::LowerPrecision,
    .half = Half::InBody,
    .fast_paths = {{{.table = &conv2d_forward_kernel,
                     .without = "overlapping windows take the im2row + GEMM path, as non-overlapping ones do"}}},
    // 2 FLOPs per multiply-add: out (N, O, Ho, Wo) times C kh kw each.
    .flops = [](const Tensor* const* in, int,
                const Tensor& out) { return 2 * out.numel() * (in[1]->size(0) ? in[1]->numel() / in[1]->size(0) : 0); },
    .onnx = lower_conv2d};
// A copy: exact in any dtype.
constexpr OpDef unfold_op{.name = "unfold", .half = Half::Float32};
EMBER_REGISTER_OP(conv2d_op);
EMBER_REGISTER_OP(unfold_op);

Tensor conv2d_body(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
                   std::array<int64_t, 2> padding) {
  EMBER_CHECK(weight.dim() == 4, ShapeError, "conv2d: expected weight of shape (O, C, kh, kw), got ",
              weight.shape().str());
  EMBER_CHECK(x.dim() == 4 && x.size(1) == weight.size(1), ShapeError, "conv2d: input of shape ", x.shape().str(),
              " does not have the ", weight.size(1), " channels that weight of shape ", weight.shape().str(),
              " expects");
  EMBER_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, ShapeError, "conv2d: bias of shape ",
              bias.defined() ? bias.shape().str() : "", " does not match ", weight.size(0), " output channels");
  const WindowGeom g = window_geom("conv2d", x, {weight.size(2), weight.size(3)}, stride, padding);
  // Overlapping windows (a 3x3 conv): the backend's kernel, which never
  // builds the im2row matrix, kh*kw/(sh*sw) times the input's size. Windows
  // that do not overlap (a ViT's patch embedding, a strided 1x1 shortcut):
  // im2row is a plain reordering of x, and one GEMM over all positions beats
  // the kernel's per-image products of a few positions each.
  const bool overlap = g.kh > g.sh || g.kw > g.sw;
  // bfloat16 windows that tile the image without padding, on the CPU: im2row
  // and row2im move the bf16 elements as they are and the product is the
  // bf16 GEMM (float32 sums, the bias added before the one rounding), with
  // no float32 copies (a hybrid ViT's 784-wide patch embedding was a third
  // of its bf16 step's float32 GEMMs). Anything else 16-bit: one float32
  // convolution, rounded once.
  const bool bf16_tiles = x.device().is_cpu() && x.dtype() == DType::BFloat16 && weight.dtype() == DType::BFloat16 &&
                          (!bias.defined() || bias.dtype() == DType::BFloat16) && tiles(g);
  if (any_half({&x, &weight, &bias}) && !bf16_tiles)
    return conv2d_body(upcast_half(x), upcast_half(weight), upcast_half(bias), stride, padding).to(x.dtype());
  if (overlap && op::fast_path<conv2d_op>(conv2d_forward_kernel, x.device())) return conv2d_direct(x, weight, bias, g);
  const int64_t O = weight.size(0), K = g.C * g.kh * g.kw;
  // rows (N*Ho*Wo, K) = im2row(x), differentiable through row2im.
  const Tensor xc = x.detach().contiguous();
  Tensor rows = empty({g.N * g.Ho * g.Wo, K}, TensorOptions(x.dtype(), x.device()));
  if (rows.numel()) im2row_kernel(x.device(), xc, rows, g);
  if (autograd::needs_grad({x}))
    autograd::record("conv2d_im2row", {x}, rows, [g](autograd::BackwardContext& ctx) {
      const Tensor gr = ctx.grad_output().contiguous();
      Tensor dx = empty({g.N, g.C, g.H, g.W}, TensorOptions(gr.dtype(), gr.device()));
      if (dx.numel()) row2im_kernel(gr.device(), gr, dx, g);
      ctx.set_grad(0, dx);
    });
  // (N*Ho*Wo, O) = rows @ W^T + b: the output channels-last, then NCHW.
  const Tensor out = linear(rows, weight.reshape({O, K}), bias);
  return out.reshape({g.N, g.Ho, g.Wo, O}).permute({0, 3, 1, 2}).contiguous();
}

}  // namespace

Tensor unfold(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding) {
  return op::call<unfold_op>(unfold_body, x, kernel, stride, padding);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding) {
  return op::call<conv2d_op>(conv2d_body, x, weight, bias, stride, padding);
}

}  // namespace ember
