// linear_dropout_add: residual + dropout(x W^T + b) as one op. Where the
// backend has the fused kernels (detail::bias_dropout_add_kernel and its
// backward) the GEMM runs without the bias and one elementwise pass adds
// it, draws the dropout mask and adds the residual; elsewhere (the CPU,
// whose GEMM adds the bias while each block of C is in cache, at no cost)
// it is linear, dropout and add, call for call, so the results and the
// generator's counters are those of the composed form bit for bit.
#include <ember/ops/linear_dropout_add.h>

#include <ember/core/autocast.h>
#include <ember/core/autocast_cache.h>
#include <ember/core/autograd.h>
#include <ember/core/op.h>
#include <ember/ops/dropout.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/matmul.h>
#include <ember/ops/onnx_lowerings.h>

namespace ember {

namespace detail {
decltype(bias_dropout_add_kernel) bias_dropout_add_kernel("bias_dropout_add");
decltype(dropout_bias_backward_kernel) dropout_bias_backward_kernel("dropout_bias_backward");
}  // namespace detail

namespace {

// linear's nodes, then add's: export records the model in eval mode, where
// dropout is the identity (as dropout's own lowering says, a training-mode
// dropout cannot be exported).
void lower_linear_dropout_add(lowering::Graph& g, const lowering::Call& c) {
  EMBER_CHECK(!(c.i(5) && c.f(4) > 0), ValueError,
              "ONNX export: linear_dropout_add ran its dropout in training mode; export records the model in eval "
              "mode, where dropout is the identity");
  const DType dt = c.outputs[0].dtype();
  std::string y = lowering::linear_value(g, c);
  if (c.tensor(0).dtype() != dt) y = g.node("Cast", {y}, {{"to", int64_t{lowering::onnx_dtype(dt)}}})[0];
  g.bind(c.outputs[0], g.node("Add", {lowering::cast_to(g, c.tensor(3), dt), y})[0]);
}

}  // namespace

constexpr OpDef linear_dropout_add_op{
    .name = "linear_dropout_add",
    .autocast = Autocast::LowerPrecision,  // linear's
    .autocast_in_body = true,
    .half = Half::InBody,
    .fast_paths = {{{.table = &detail::bias_dropout_add_kernel,
                     .without = "linear (its GEMM adds the bias), dropout, add"},
                    {.table = &detail::dropout_bias_backward_kernel,
                     .without = "add's, dropout's and linear's backward (the engine sums the bias's gradient)"}}},
    .flops = [](const Tensor* const* in, int, const Tensor& out) { return 2 * out.numel() * in[1]->size(-1); },
    .onnx = lower_linear_dropout_add};
EMBER_REGISTER_OP(linear_dropout_add_op);

namespace {

using autograd::BackwardContext;
using autograd::SavedTensor;

// The fused form: x, weight and bias (undefined or [n]) of one floating
// dtype T on one device that has both kernels, already cast for autocast;
// residual of the result's shape, of dtype T or (T 16-bit) float32. q is
// the drop probability in [0, 1), 0 for none.
//   pre = x W^T + b,  out = residual + keep * pre / (1 - q)
//   dresidual = dout,  dpre = dout * keep / (1 - q),  db = sum over rows of dpre,
//   dx = dpre W,  dW = dpre^T x
Tensor linear_dropout_add_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                                double q, Generator* gen) {
  const int64_t n = weight.size(0), k = weight.size(1);
  Tensor y = linear(x.detach(), weight.detach());  // fresh and contiguous
  const int64_t rows = y.numel() / n;
  const Tensor y2 = y.view({rows, n});
  const Tensor r2 = residual.detach().contiguous().view({rows, n});
  // The sum overwrites the product when it has its dtype (nothing else holds it).
  Tensor out = residual.dtype() == y.dtype() ? y : empty(y.shape(), TensorOptions(residual.dtype(), y.device()));
  Tensor out2 = out.view({rows, n});
  Tensor keep;
  RandomSpec spec{};
  if (q > 0) {
    Generator& g = gen ? *gen : default_generator();
    spec = reserve_random(RandomKind::Uniform, g, (static_cast<uint64_t>(y.numel()) + 3) / 4, y.device(), 0.0, 1.0);
    keep = empty({rows, n}, TensorOptions(DType::Bool, y.device()));
  }
  detail::bias_dropout_add_kernel(x.device(), y2, bias.defined() ? bias.detach().contiguous() : Tensor(), r2, out2,
                                  keep, spec, q);
  if (autograd::needs_grad({x, weight, bias, residual}))
    autograd::record(
        "linear_dropout_add", {x, weight, bias, residual}, out,
        [keep, sx = weight.requires_grad() ? SavedTensor(x) : SavedTensor(),
         sw = x.requires_grad() ? SavedTensor(weight) : SavedTensor(), rows, n, k, q,
         dt = weight.dtype()](BackwardContext& ctx) {
          const Tensor g = ctx.grad_output().contiguous();
          if (ctx.needs_grad(3)) ctx.set_grad(3, g);
          const bool dw = ctx.needs_grad(1), dx = ctx.needs_grad(0), db_needed = ctx.needs_grad(2);
          if (!dw && !dx && !db_needed) return;
          const Tensor g2 = g.view({rows, n});
          // Without a mask and in the product's dtype, dpre is dout itself.
          Tensor dpre = keep.defined() || g.dtype() != dt ? empty({rows, n}, TensorOptions(dt, g.device())) : Tensor();
          Tensor db = db_needed ? empty({n}, TensorOptions(dt, g.device())) : Tensor();
          if (dpre.defined() || db.defined()) detail::dropout_bias_backward_kernel(g.device(), g2, keep, q, dpre, db);
          if (!dpre.defined()) dpre = g2;
          if (dx) ctx.set_grad(0, mm(dpre, sw.get()).view(ctx.input_meta(0).shape));
          if (dw) ctx.set_grad(1, mm(dpre.t(), sx.get().reshape({rows, k})));
          if (db_needed) ctx.set_grad(2, db);
        });
  return out;
}

// Whether the fused form takes these operands: what it does not take goes
// through linear, dropout and add, which compute it or name the fault.
bool fused_device(Device d) {
  return op::fast_path<linear_dropout_add_op>(detail::bias_dropout_add_kernel, d) &&
         op::fast_path<linear_dropout_add_op>(detail::dropout_bias_backward_kernel, d);
}
bool fused_takes(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  if (!x.is_floating_point() || weight.dtype() != x.dtype() || weight.device() != x.device() || weight.dim() != 2 ||
      x.dim() < 1 || x.size(-1) != weight.size(1) || weight.size(0) == 0 || x.numel() == 0)
    return false;
  if (bias.defined() &&
      (bias.dtype() != x.dtype() || bias.device() != x.device() || bias.dim() != 1 || bias.size(0) != weight.size(0)))
    return false;
  // The residual has the result's shape, and add would give its dtype: the
  // product's, or float32 over a 16-bit product.
  Shape want = x.shape();
  want[want.size() - 1] = weight.size(0);
  return residual.device() == x.device() && residual.shape() == want &&
         (residual.dtype() == x.dtype() || (is_half(x.dtype()) && residual.dtype() == DType::Float32));
}

}  // namespace

Tensor linear_dropout_add(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual, double p,
                          bool training, Generator* gen) {
  return op::call<linear_dropout_add_op>(
      [](const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual, double p, bool training,
         Generator* gen) -> Tensor {
        EMBER_CHECK(x.defined() && weight.defined() && residual.defined(), ValueError,
                    "linear_dropout_add: got an undefined tensor");
        EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError,
                    "linear_dropout_add: dropout probability has to be between 0 and 1, got ", p);
        const double q = training ? p : 0.0;
        if (fused_device(x.device()) && q < 1.0) {
          if (auto ac = op::autocast_dtype<linear_dropout_add_op>(x)) {
            // Cast as linear would (parameters from the region's cache when
            // it holds them), so the product has one 16-bit dtype; the
            // residual stays as it is, as add takes it.
            AutocastSuspend off;
            const Tensor cx = autocast_cast(x, *ac), w = autocast_cast(autocast_param_cast(weight, *ac), *ac),
                         b = autocast_cast(autocast_param_cast(bias, *ac), *ac);
            if (fused_takes(cx, w, b, residual)) return linear_dropout_add_fused(cx, w, b, residual, q, gen);
          } else if (fused_takes(x, weight, bias, residual)) {
            return linear_dropout_add_fused(x, weight, bias, residual, q, gen);
          }
        }
        return add(residual, dropout(linear(x, weight, bias), p, training, gen));
      },
      x, weight, bias, residual, p, training, gen);
}

}  // namespace ember
