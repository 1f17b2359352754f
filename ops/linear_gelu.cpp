// linear_gelu: gelu(x W^T + b) as one op. Where the backend has the fused
// kernels (detail::bias_gelu_kernel and its backward) the GEMM runs without
// the bias and one elementwise pass adds it and applies GELU; elsewhere (the
// CPU, whose GEMM adds the bias while each block of C is in cache, at no
// cost) it is linear then gelu, call for call, so the results are those of
// the composed form bit for bit.
#include <ember/ops/linear_gelu.h>

#include <ember/core/autocast.h>
#include <ember/core/autocast_cache.h>
#include <ember/core/autograd.h>
#include <ember/core/op.h>
#include <ember/ops/factory.h>
#include <ember/ops/matmul.h>
#include <ember/ops/onnx_lowerings.h>

namespace ember {

namespace detail {
decltype(bias_gelu_kernel) bias_gelu_kernel("bias_gelu");
decltype(bias_gelu_backward_kernel) bias_gelu_backward_kernel("bias_gelu_backward");
}  // namespace detail

namespace {

// linear's nodes, then gelu's.
void lower_linear_gelu(lowering::Graph& g, const lowering::Call& c) {
  const bool tanh = static_cast<GeluApproximation>(c.i(3)) == GeluApproximation::Tanh;
  g.bind(c.outputs[0], lowering::gelu_value(g, lowering::linear_value(g, c), c.tensor(0).dtype(), tanh));
}

}  // namespace

constexpr OpDef linear_gelu_op{
    .name = "linear_gelu",
    .autocast = Autocast::LowerPrecision,  // linear's
    .autocast_in_body = true,
    .half = Half::InBody,
    .fast_paths = {{{.table = &detail::bias_gelu_kernel, .without = "linear (its GEMM adds the bias), then gelu"},
                    {.table = &detail::bias_gelu_backward_kernel,
                     .without = "gelu's and linear's backward (the engine sums the bias's gradient)"}}},
    .flops = [](const Tensor* const* in, int, const Tensor& out) { return 2 * out.numel() * in[1]->size(-1); },
    .onnx = lower_linear_gelu};
EMBER_REGISTER_OP(linear_gelu_op);

namespace {

using autograd::BackwardContext;
using autograd::SavedTensor;

// The fused form: x, weight and bias (undefined or [n]) of one floating
// dtype on one device that has both kernels, already cast for autocast.
//   pre = x W^T + b,  out = gelu(pre)
//   dpre = dout gelu'(pre),  db = sum over rows of dpre,  dx = dpre W,  dW = dpre^T x
Tensor linear_gelu_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  const int64_t n = weight.size(0), k = weight.size(1);
  Tensor pre = linear(x.detach(), weight.detach());  // fresh and contiguous
  const int64_t rows = pre.numel() / n;
  Tensor pre2 = pre.view({rows, n});
  Tensor out = empty(pre.shape(), TensorOptions(pre.dtype(), pre.device()));
  Tensor out2 = out.view({rows, n});
  detail::bias_gelu_kernel(x.device(), pre2, bias.defined() ? bias.detach().contiguous() : Tensor(), out2, approximate);
  if (autograd::needs_grad({x, weight, bias}))
    autograd::record(
        "linear_gelu", {x, weight, bias}, out,
        [sp = SavedTensor(pre2), sx = weight.requires_grad() ? SavedTensor(x) : SavedTensor(),
         sw = x.requires_grad() ? SavedTensor(weight) : SavedTensor(), rows, n, k, approximate](BackwardContext& ctx) {
          const Tensor pre = sp.get();
          const Tensor g = ctx.grad_output().contiguous().view({rows, n});
          Tensor dpre = empty({rows, n}, TensorOptions(pre.dtype(), pre.device()));
          Tensor db = ctx.needs_grad(2) ? empty({n}, TensorOptions(pre.dtype(), pre.device())) : Tensor();
          detail::bias_gelu_backward_kernel(pre.device(), g, pre, dpre, db, approximate);
          if (ctx.needs_grad(0)) {
            const Shape xs = ctx.input_meta(0).shape;
            ctx.set_grad(0, mm(dpre, sw.get()).view(xs));
          }
          if (ctx.needs_grad(1)) ctx.set_grad(1, mm(dpre.t(), sx.get().reshape({rows, k})));
          if (ctx.needs_grad(2)) ctx.set_grad(2, db);
        });
  return out;
}

// Whether the fused form takes these operands: what it does not take goes
// through linear and gelu, which compute it or name the fault.
bool fused_device(Device d) {
  return op::fast_path<linear_gelu_op>(detail::bias_gelu_kernel, d) &&
         op::fast_path<linear_gelu_op>(detail::bias_gelu_backward_kernel, d);
}
bool fused_takes(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!x.is_floating_point() || weight.dtype() != x.dtype() || weight.device() != x.device() || weight.dim() != 2 ||
      x.dim() < 1 || x.size(-1) != weight.size(1) || weight.size(0) == 0 || x.numel() == 0)
    return false;
  return !bias.defined() || (bias.dtype() == x.dtype() && bias.device() == x.device() && bias.dim() == 1 &&
                             bias.size(0) == weight.size(0));
}

}  // namespace

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) {
  return op::call<linear_gelu_op>(
      [](const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate) -> Tensor {
        EMBER_CHECK(x.defined() && weight.defined(), ValueError, "linear_gelu: got an undefined tensor");
        if (!fused_device(x.device())) return gelu(linear(x, weight, bias), approximate);
        if (auto ac = op::autocast_dtype<linear_gelu_op>(x)) {
          // Cast as linear would (parameters from the region's cache when
          // it holds them), so the fused form sees one 16-bit dtype.
          AutocastSuspend off;
          const Tensor cx = autocast_cast(x, *ac), w = autocast_cast(autocast_param_cast(weight, *ac), *ac),
                       b = autocast_cast(autocast_param_cast(bias, *ac), *ac);
          if (fused_takes(cx, w, b)) return linear_gelu_fused(cx, w, b, approximate);
        } else if (fused_takes(x, weight, bias)) {
          return linear_gelu_fused(x, weight, bias, approximate);
        }
        return gelu(linear(x, weight, bias), approximate);
      },
      x, weight, bias, approximate);
}

}  // namespace ember
