// 2-d pooling: max_pool2d, avg_pool2d and adaptive_avg_pool2d, CPU kernels
// and backward. The window arithmetic (fixed or adaptive windows, avg's
// divisor) lives in ops/pool_kernels.h, shared with cuda/pool.cu.
//
// max:  y[o] = x[idx[o]] with idx the first maximum of o's window;
//       dx[i] = sum over outputs o with idx[o] = i of dy[o]  (only the winner
//       of a window gets its gradient; a pixel that wins several overlapping
//       windows gets all of theirs).
// avg:  y[o] = sum over o's window (inside the input) of x / d(o);
//       dx[i] = sum over windows o holding i of dy[o] / d(o).
// CPU backward kernels scatter each (n, c) plane in output order: one thread
// per plane, so no races and the CUDA gather's summation order.
#include <ember/ops/conv_kernels.h>
#include <ember/ops/pool.h>
#include <ember/ops/pool_kernels.h>

#include <limits>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/factory.h>
#include <ember/ops/onnx_lowerings.h>

namespace ember {

decltype(max_pool2d_kernel) max_pool2d_kernel("max_pool2d");
decltype(max_pool2d_backward_kernel) max_pool2d_backward_kernel("max_pool2d_backward");
decltype(avg_pool2d_kernel) avg_pool2d_kernel("avg_pool2d");
decltype(avg_pool2d_backward_kernel) avg_pool2d_backward_kernel("avg_pool2d_backward");

namespace {

void cpu_max_pool2d(const Tensor& xt, Tensor& yt, Tensor& it, const PoolGeom& g) {
  dispatch_floating(xt.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(xt.data_ptr());
    T* y = static_cast<T*>(yt.data_ptr());
    int64_t* idx = static_cast<int64_t*>(it.data_ptr());
    parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const T* plane = x + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; ++oh)
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            int64_t h0, h1, w0, w1;
            pool_window_clipped(g, oh, ow, h0, h1, w0, w1);
            T best = -std::numeric_limits<T>::infinity();
            int64_t arg = h0 * g.W + w0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) {
                const T v = plane[h * g.W + w];
                if (v > best || v != v) {  // NaN wins and stays (PyTorch)
                  best = v;
                  arg = h * g.W + w;
                  if (v != v) goto done;
                }
              }
          done:
            const int64_t o = nc * g.Ho * g.Wo + oh * g.Wo + ow;
            y[o] = best;
            idx[o] = arg;
          }
      }
    });
  });
}

void cpu_max_pool2d_backward(const Tensor& gt, const Tensor& it, Tensor& dxt, const PoolGeom& g) {
  dispatch_floating(gt.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(gt.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(it.data_ptr());
    T* dx = static_cast<T*>(dxt.data_ptr());
    const int64_t L = g.Ho * g.Wo;
    parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        T* plane = dx + nc * g.H * g.W;
        std::fill(plane, plane + g.H * g.W, T(0));
        for (int64_t o = 0; o < L; ++o) plane[idx[nc * L + o]] += gp[nc * L + o];
      }
    });
  });
}

void cpu_avg_pool2d(const Tensor& xt, Tensor& yt, const PoolGeom& g) {
  dispatch_floating(xt.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(xt.data_ptr());
    T* y = static_cast<T*>(yt.data_ptr());
    parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const T* plane = x + nc * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; ++oh)
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            int64_t h0, h1, w0, w1;
            pool_window_clipped(g, oh, ow, h0, h1, w0, w1);
            T s = 0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) s += plane[h * g.W + w];
            y[nc * g.Ho * g.Wo + oh * g.Wo + ow] = s / static_cast<T>(pool_divisor(g, oh, ow));
          }
      }
    });
  });
}

void cpu_avg_pool2d_backward(const Tensor& gt, Tensor& dxt, const PoolGeom& g) {
  dispatch_floating(gt.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(gt.data_ptr());
    T* dx = static_cast<T*>(dxt.data_ptr());
    parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        T* plane = dx + nc * g.H * g.W;
        std::fill(plane, plane + g.H * g.W, T(0));
        for (int64_t oh = 0; oh < g.Ho; ++oh)
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            int64_t h0, h1, w0, w1;
            pool_window_clipped(g, oh, ow, h0, h1, w0, w1);
            const T share = gp[nc * g.Ho * g.Wo + oh * g.Wo + ow] / static_cast<T>(pool_divisor(g, oh, ow));
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) plane[h * g.W + w] += share;
          }
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(max_pool2d_kernel, CPU, cpu_max_pool2d);
EMBER_REGISTER_KERNEL(max_pool2d_backward_kernel, CPU, cpu_max_pool2d_backward);
EMBER_REGISTER_KERNEL(avg_pool2d_kernel, CPU, cpu_avg_pool2d);
EMBER_REGISTER_KERNEL(avg_pool2d_backward_kernel, CPU, cpu_avg_pool2d_backward);

namespace {

// conv2d's window checks and sizes (window_geom), after PyTorch's pooling
// defaults and its limit on padding.
PoolGeom pool_geom(const char* op, const Tensor& x, std::array<int64_t, 2> k, std::array<int64_t, 2> s,
                   std::array<int64_t, 2> p) {
  if (s[0] == 0 && s[1] == 0) s = k;  // PyTorch: stride defaults to the kernel
  const WindowGeom w = window_geom(op, x, k, s, p);
  EMBER_CHECK(2 * p[0] <= k[0] && 2 * p[1] <= k[1], ValueError, op, ": padding (", p[0], ", ", p[1],
              ") should be at most half of the kernel (", k[0], ", ", k[1], ")");
  return PoolGeom{w.N, w.C, w.H, w.W, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.Ho, w.Wo};
}

// 16-bit inputs on float32 copies: the average's sums in float32, rounded
// once; the maximum and its index exactly (a maximum is one of its inputs).
// The window's stride 0 means "the kernel size", as in the ops.
std::vector<lowering::Attr> pool_attrs(const lowering::Call& c) {
  const std::vector<int64_t> k = c.ints(1), s0 = c.ints(2), p = c.ints(3);
  const std::vector<int64_t> s{s0[0] ? s0[0] : k[0], s0[1] ? s0[1] : k[1]};
  return {{"kernel_shape", k}, {"strides", s}, {"pads", std::vector<int64_t>{p[0], p[1], p[0], p[1]}}};
}
void lower_avg_pool2d(lowering::Graph& g, const lowering::Call& c) {
  std::vector<lowering::Attr> a = pool_attrs(c);
  a.push_back({"count_include_pad", c.i(4)});
  g.bind(c.outputs[0], g.node("AveragePool", {g.value(c.tensor(0))}, a)[0]);
}
// An adaptive pool is an AveragePool when the sizes divide (GlobalAveragePool for 1 x 1).
void lower_adaptive_avg_pool2d(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  const std::vector<int64_t> o = c.ints(1);
  const std::string v = g.value(x);
  if (o[0] == 1 && o[1] == 1) return g.bind(c.outputs[0], g.node("GlobalAveragePool", {v})[0]);
  EMBER_CHECK(x.size(2) % o[0] == 0 && x.size(3) % o[1] == 0, ValueError, "ONNX export: adaptive_avg_pool2d from ",
              x.shape(), " to (", o[0], ", ", o[1],
              ") has windows of different sizes, which ONNX's pools cannot write");
  const std::vector<int64_t> k{x.size(2) / o[0], x.size(3) / o[1]};
  g.bind(c.outputs[0], g.node("AveragePool", {v}, {{"kernel_shape", k}, {"strides", k}})[0]);
}
// MaxPool's Indices count over the whole tensor; Ember's (as PyTorch's) within each (H, W) plane.
void lower_max_pool2d(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  const auto out = g.node("MaxPool", {g.value(x)}, pool_attrs(c), 2);
  g.bind(c.outputs[0], out[0]);
  g.bind(c.outputs[1], g.node("Mod", {out[1], g.scalar(static_cast<double>(x.size(2) * x.size(3)), DType::Int64)})[0]);
}

constexpr OpDef avg_pool2d_op{.name = "avg_pool2d", .half = Half::Float32, .onnx = lower_avg_pool2d};
constexpr OpDef adaptive_avg_pool2d_op{
    .name = "adaptive_avg_pool2d", .half = Half::Float32, .onnx = lower_adaptive_avg_pool2d};
constexpr OpDef max_pool2d_op{.name = "max_pool2d", .half = Half::Float32, .onnx = lower_max_pool2d};
EMBER_REGISTER_OP(avg_pool2d_op);
EMBER_REGISTER_OP(adaptive_avg_pool2d_op);
EMBER_REGISTER_OP(max_pool2d_op);

// The average pool shared by avg_pool2d and adaptive_avg_pool2d.
Tensor avg_pool(const char* op, const Tensor& x, const PoolGeom& g) {
  const Tensor xc = x.detach().contiguous();
  Tensor y = empty({g.N, g.C, g.Ho, g.Wo}, TensorOptions(x.dtype(), x.device()));
  if (y.numel()) avg_pool2d_kernel(x.device(), xc, y, g);
  if (autograd::needs_grad({x}))
    autograd::record(op, {x}, y, [g](autograd::BackwardContext& ctx) {
      const Tensor gc = ctx.grad_output().contiguous();
      Tensor dx = empty({g.N, g.C, g.H, g.W}, TensorOptions(gc.dtype(), gc.device()));
      if (dx.numel()) avg_pool2d_backward_kernel(gc.device(), gc, dx, g);
      ctx.set_grad(0, dx);
    });
  return y;
}

std::pair<Tensor, Tensor> max_pool2d_body(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                          std::array<int64_t, 2> padding) {
  const PoolGeom g = pool_geom("max_pool2d", x, kernel, stride, padding);
  const Tensor xc = x.detach().contiguous();
  Tensor y = empty({g.N, g.C, g.Ho, g.Wo}, TensorOptions(x.dtype(), x.device()));
  Tensor idx = empty({g.N, g.C, g.Ho, g.Wo}, TensorOptions(DType::Int64, x.device()));
  if (y.numel()) max_pool2d_kernel(x.device(), xc, y, idx, g);
  if (autograd::needs_grad({x}))
    autograd::record("max_pool2d", {x}, y, [g, idx](autograd::BackwardContext& ctx) {
      const Tensor gc = ctx.grad_output().contiguous();
      Tensor dx = empty({g.N, g.C, g.H, g.W}, TensorOptions(gc.dtype(), gc.device()));
      if (dx.numel()) max_pool2d_backward_kernel(gc.device(), gc, idx, dx, g);
      ctx.set_grad(0, dx);
    });
  return {y, idx};
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> kernel,
                                                  std::array<int64_t, 2> stride, std::array<int64_t, 2> padding) {
  return op::call<max_pool2d_op>(max_pool2d_body, x, kernel, stride, padding);
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  return max_pool2d_with_indices(x, kernel, stride, padding).first;
}

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, bool count_include_pad) {
  // Recorded with the window as given, which its lowering reads.
  return op::call<avg_pool2d_op>(
      [](const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
         bool count_include_pad) {
        PoolGeom g = pool_geom("avg_pool2d", x, kernel, stride, padding);
        g.count_include_pad = count_include_pad;
        return avg_pool("avg_pool2d", x, g);
      },
      x, kernel, stride, padding, count_include_pad);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  EMBER_CHECK(x.dim() == 4, ShapeError, "adaptive_avg_pool2d: expected input of shape (N, C, H, W), got ",
              x.shape().str());
  EMBER_CHECK(x.is_floating_point(), DTypeError, "adaptive_avg_pool2d: expected a floating-point input, got ",
              dtype_name(x.dtype()));
  EMBER_CHECK(output_size[0] > 0 && output_size[1] > 0, ValueError,
              "adaptive_avg_pool2d: output size must be positive, got (", output_size[0], ", ", output_size[1], ")");
  EMBER_CHECK(x.size(2) > 0 && x.size(3) > 0, ShapeError, "adaptive_avg_pool2d: empty spatial dims in input of shape ",
              x.shape().str());
  PoolGeom g{x.size(0), x.size(1), x.size(2), x.size(3), 0, 0, 0, 0, 0, 0, output_size[0], output_size[1]};
  g.adaptive = true;
  return op::call<adaptive_avg_pool2d_op>(
      [&g](const Tensor& x, std::array<int64_t, 2>) { return avg_pool("adaptive_avg_pool2d", x, g); }, x, output_size);
}

}  // namespace ember
