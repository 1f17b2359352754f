// rms_norm: the kernel tables, the CPU kernels, the op's declaration and
// body (checks, forward through the table, backward recorded for autograd),
// plus the RMSNorm layer. The CUDA kernels are in rms_norm.cu.
//
// Per row x of N elements (the last dim), with the gain w:
//   rstd = 1 / sqrt(mean(x^2) + eps),   y = x * rstd * w
// Backward, with g the gradient of y and gw = g * w:
//   dx_j = rstd * gw_j  -  x_j * rstd^3 * mean(gw * x)
//          term 1: x_j's direct path; term 2: through rstd, since
//          d rstd / d x_j = -rstd^3 x_j / N
//   dw   = sum over rows of g * x * rstd
// The forward saves rstd (one value per row) so backward needs no second
// pass over x to recompute it.
#include "rms_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/core/autograd.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/error.h>
#include <ember/core/op.h>  // OpDef, op::call
#include <ember/core/parallel.h>
#include <ember/ops/factory.h>

#include "rms_norm_kernels.h"

namespace myops {

using namespace ember;

// The tables' names are what errors and the profiler show.
KernelTable<void(const Tensor& x2, const Tensor& w, double eps, Tensor& y2, Tensor& rstd)> rms_norm_kernel("rms_norm");
KernelTable<void(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& rstd, Tensor& dx2, Tensor& dw)>
    rms_norm_backward_kernel("rms_norm_backward");

namespace {

// Rows per parallel task: about 8k elements, so small inputs run inline.
int64_t row_grain(int64_t N) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(N, 1)); }

void cpu_rms_norm(const Tensor& x2, const Tensor& w, double eps, Tensor& y2, Tensor& rstd) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  dispatch_floating(x2.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* x = x2.data<T>();
    const T* wp = w.data<T>();
    T* y = y2.data<T>();
    T* rp = rstd.data<T>();
    parallel_for(0, rows, row_grain(N), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = x + r * N;
        double ss = 0;  // the sum of squares in double, also for float32
        for (int64_t i = 0; i < N; ++i) ss += double(xr[i]) * xr[i];
        const T rs = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(N) + eps));
        rp[r] = rs;
        for (int64_t i = 0; i < N; ++i) y[r * N + i] = xr[i] * rs * wp[i];
      }
    });
  });
}

void cpu_rms_norm_backward(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& rstd, Tensor& dx2,
                           Tensor& dw) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  dispatch_floating(x2.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = g2.data<T>();
    const T* x = x2.data<T>();
    const T* wp = w.data<T>();
    const T* rp = rstd.data<T>();
    if (dx2.defined()) {
      T* dx = dx2.data<T>();
      parallel_for(0, rows, row_grain(N), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const T *gr = g + r * N, *xr = x + r * N;
          const T rs = rp[r];
          double s = 0;
          for (int64_t i = 0; i < N; ++i) s += double(gr[i]) * wp[i] * xr[i];
          const T c = static_cast<T>(s / static_cast<double>(N)) * rs * rs * rs;  // term 2's factor
          for (int64_t i = 0; i < N; ++i) dx[r * N + i] = rs * gr[i] * wp[i] - xr[i] * c;
        }
      });
    }
    if (dw.defined()) {
      // Columns split across threads, each summed down the rows in order: the
      // same result for any thread count, and no atomics.
      T* dwp = dw.data<T>();
      parallel_for(0, N, 256, [&](int64_t lo, int64_t hi) {
        std::vector<double> acc(static_cast<size_t>(hi - lo), 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t i = lo; i < hi; ++i) acc[i - lo] += double(g[r * N + i]) * x[r * N + i] * rp[r];
        for (int64_t i = lo; i < hi; ++i) dwp[i] = static_cast<T>(acc[i - lo]);
      });
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(rms_norm_kernel, CPU, cpu_rms_norm);
EMBER_REGISTER_KERNEL(rms_norm_backward_kernel, CPU, cpu_rms_norm_backward);

namespace {

// The op's body: what op::call runs after applying the declaration below.
Tensor rms_norm_body(const Tensor& x, const Tensor& weight, double eps) {
  // 1. Check the inputs; each error names the op and what was wrong.
  EMBER_CHECK(x.is_floating_point(), DTypeError, "rms_norm: expected a floating-point input, got ",
              dtype_name(x.dtype()));
  EMBER_CHECK(x.dim() >= 1, ShapeError, "rms_norm: expected an input with at least one dim, got shape ",
              x.shape().str());
  const int64_t N = x.size(-1);
  EMBER_CHECK(weight.dim() == 1 && weight.size(0) == N, ShapeError, "rms_norm: weight of shape ", weight.shape().str(),
              " does not match the last dim of the input's shape ", x.shape().str());
  EMBER_CHECK(weight.dtype() == x.dtype(), DTypeError, "rms_norm: weight dtype ", dtype_name(weight.dtype()),
              " differs from the input's ", dtype_name(x.dtype()));
  EMBER_CHECK(weight.device() == x.device(), DeviceError, "rms_norm: input on ", x.device().str(), " but weight on ",
              weight.device().str());
  EMBER_CHECK(eps >= 0, ValueError, "rms_norm: eps must be >= 0, got ", eps);

  // 2. Forward through the table: the kernel of x's device. The kernels take
  //    contiguous (rows, N) views; detach() keeps contiguous()'s copy out of
  //    the graph, since this op records its own node below.
  const int64_t rows = N ? x.numel() / N : 0;
  const TensorOptions opts(x.dtype(), x.device());
  const Tensor xc = x.detach().contiguous();
  const Tensor wc = weight.detach().contiguous();
  Tensor out = empty(x.shape(), opts);
  Tensor rstd = empty({rows}, opts);
  Tensor y2 = out.view({rows, N});
  rms_norm_kernel(x.device(), xc.view({rows, N}), wc, eps, y2, rstd);

  // 3. Record the backward, only when a gradient can be asked for. The
  //    closure keeps what backward needs: x and w as SavedTensors (an
  //    in-place change to them before backward is then an error naming
  //    "rms_norm", not a wrong gradient), and rstd, which only this op sees.
  if (autograd::needs_grad({x, weight})) {
    autograd::record(
        "rms_norm", {x, weight}, out,
        [sx = autograd::SavedTensor(xc), sw = autograd::SavedTensor(wc), rstd, rows,
         N](autograd::BackwardContext& ctx) {
          const Tensor& xs = sx.get();
          const TensorOptions o(xs.dtype(), xs.device());
          const Tensor g = ctx.grad_output().contiguous();
          // Only the gradients that are wanted (a frozen gain costs nothing).
          Tensor dx = ctx.needs_grad(0) ? empty(xs.shape(), o) : Tensor();
          Tensor dw = ctx.needs_grad(1) ? empty({N}, o) : Tensor();
          Tensor dx2 = dx.defined() ? dx.view({rows, N}) : Tensor();
          rms_norm_backward_kernel(xs.device(), g.view({rows, N}), xs.view({rows, N}), sw.get(), rstd, dx2, dw);
          if (dx.defined()) ctx.set_grad(0, dx);
          if (dw.defined()) ctx.set_grad(1, dw);
        });
  }
  return out;
}

}  // namespace

// The declaration, once: autocast runs a normalisation in float32 (as
// PyTorch's layer_norm), and bfloat16 / float16 inputs are computed on
// float32 copies and rounded once, as the built-in ops without a 16-bit
// kernel are (docs/PRECISION.md); the copies are recorded, so the gradients
// come back in the 16-bit dtype. Registering it lists it in op::registry().
// How ONNX export writes the op (opset 17 has no RMSNorm node):
// y = x / sqrt(mean(x^2 over the last dim) + eps) * weight.
void lower_rms_norm(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.tensor(0).dtype();
  const std::string x = g.value(c.tensor(0));
  const std::string ms = g.node("ReduceMean", {g.node("Mul", {x, x})[0]},
                                {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}})[0];
  const std::string rms = g.node("Sqrt", {g.node("Add", {ms, g.scalar(c.f(2), dt)})[0]})[0];
  g.bind(c.outputs[0], g.node("Mul", {g.node("Div", {x, rms})[0], g.value(c.tensor(1))})[0]);
}

constexpr OpDef rms_norm_op{
    .name = "rms_norm", .autocast = Autocast::Float32, .half = Half::Float32, .onnx = lower_rms_norm};
EMBER_REGISTER_OP(rms_norm_op);

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return op::call<rms_norm_op>(rms_norm_body, x, weight, eps);
}

RMSNorm::RMSNorm(int64_t n, double e, TensorOptions opts) : eps(e) {
  weight = register_parameter("weight", ones({n}, TensorOptions(opts.dtype, opts.device)));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, weight, eps); }

}  // namespace myops
