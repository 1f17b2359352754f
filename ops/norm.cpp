// layer_norm: its declaration, body and backward (CPU kernels:
// ops/norm_cpu.cpp; batch_norm: ops/batch_norm.cpp).
//
// layer_norm forward, per row of N elements:
//   mean = sum x / N;  rstd = 1 / sqrt(sum (x - mean)^2 / N + eps)
//   xhat = (x - mean) * rstd;  y = xhat * w + b
// Backward, with g = dy * w (or dy without affine):
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//        term 1: direct path; term 2: through mean; term 3: through rstd
//   dw = sum over rows of dy * xhat;  db = sum over rows of dy
#include <ember/ops/norm.h>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/op.h>
#include <ember/ops/factory.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>

namespace ember {

namespace {

// layer_norm's gradients from the fused kernel (the formulas are at the top
// of this file): x viewed as (rows, N), the saved per-row mean
// and 1/std; each gradient only where an input needs it.
void layer_norm_backward(autograd::BackwardContext& ctx, const autograd::SavedTensor& sx,
                         const autograd::SavedTensor& sw, const Tensor& mean, const Tensor& rstd, int64_t rows,
                         int64_t N, bool has_b) {
  const Tensor& xs = sx.get();
  const TensorOptions o(xs.dtype(), xs.device());
  const Tensor g = ctx.grad_output().contiguous();
  Tensor dx = ctx.needs_grad(0) ? empty(xs.shape(), o) : Tensor();
  Tensor dw = ctx.needs_grad(1) ? empty({N}, o) : Tensor();
  Tensor db = has_b && ctx.needs_grad(2) ? empty({N}, o) : Tensor();
  Tensor dx2 = dx.defined() ? dx.view({rows, N}) : Tensor();
  layer_norm_backward_kernel(xs.device(), g.view({rows, N}), xs.view({rows, N}), sw.get(), mean, rstd, dx2, dw, db);
  if (dx.defined()) ctx.set_grad(0, dx);
  if (dw.defined()) ctx.set_grad(1, dw.view(ctx.input_meta(1).shape));
  if (db.defined()) ctx.set_grad(2, db.view(ctx.input_meta(2).shape));
}

// The op's body: what op::call runs once autocast and the 16-bit policy
// have been applied (a 16-bit x here has weights of its dtype and a device
// whose kernels compute it, statistics in float32).
Tensor layer_norm_body(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                       double eps) {
  EMBER_CHECK(x.is_floating_point(), DTypeError, "layer_norm: expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  const int k = normalized_shape.size();
  bool fits = k >= 1 && k <= x.dim();
  for (int i = 0; fits && i < k; ++i) fits = x.shape()[x.dim() - k + i] == normalized_shape[i];
  EMBER_CHECK(fits, ShapeError, "layer_norm: normalized_shape ", normalized_shape.str(),
              " does not match the trailing dims of the input's shape ", x.shape().str());
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    EMBER_CHECK(p->shape() == normalized_shape, ShapeError, "layer_norm: weight/bias of shape ", p->shape().str(),
                " must have normalized_shape ", normalized_shape.str());
    EMBER_CHECK(p->dtype() == x.dtype(), DTypeError, "layer_norm: weight/bias dtype ", dtype_name(p->dtype()),
                " differs from the input's ", dtype_name(x.dtype()));
    check_same_device("layer_norm", x, *p);
  }
  const int64_t N = normalized_shape.numel();
  const int64_t rows = N ? x.numel() / N : 0;
  const TensorOptions opts(x.dtype(), x.device());
  const Tensor xc = x.detach().contiguous();
  const Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty(x.shape(), opts);
  // The statistics in the compute dtype: float32 for a 16-bit input.
  const TensorOptions stat_opts(is_half(x.dtype()) ? DType::Float32 : x.dtype(), x.device());
  Tensor mean = empty({rows}, stat_opts), rstd = empty({rows}, stat_opts);
  Tensor y2 = out.view({rows, N});
  layer_norm_kernel(x.device(), xc.view({rows, N}), wc, bc, eps, y2, mean, rstd);
  if (autograd::needs_grad({x, weight, bias})) {
    autograd::record(
        "layer_norm", {x, weight, bias}, out,
        [sx = autograd::SavedTensor(xc), sw = autograd::SavedTensor(wc), mean, rstd, rows, N, has_b = bias.defined()](
            autograd::BackwardContext& ctx) { layer_norm_backward(ctx, sx, sw, mean, rstd, rows, N, has_b); });
  }
  return out;
}

}  // namespace

// 16-bit inputs: computed in float32 and returned in the first 16-bit dtype
// among x, weight and bias; by the kernels themselves where the device's
// are marked and all three have one dtype, on float32 copies otherwise.
namespace {
// LayerNormalization over the trailing dims; its Scale input is required (ones when there is no weight).
void lower_layer_norm(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  const Shape ns(c.ints(1));
  const std::string w = c.has_tensor(2) ? g.value(c.tensor(2)) : g.value(ones(ns, TensorOptions(x.dtype())));
  std::vector<std::string> in{g.value(x), w};
  if (c.has_tensor(3)) in.push_back(g.value(c.tensor(3)));
  g.bind(c.outputs[0],
         g.node("LayerNormalization", in, {{"axis", -static_cast<int64_t>(ns.size())}, {"epsilon", c.f(4)}})[0]);
}
}  // namespace

constexpr OpDef layer_norm_op{.name = "layer_norm",
                              .autocast = Autocast::Float32,
                              .half = Half::NativeWhere,
                              .native_half = op::marked<layer_norm_kernel, layer_norm_backward_kernel>,
                              .onnx = lower_layer_norm};
EMBER_REGISTER_OP(layer_norm_op);

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return op::call<layer_norm_op>(layer_norm_body, x, normalized_shape, weight, bias, eps);
}

}  // namespace ember
