// Elementwise ops: forward, backward formula and CPU kernels.
//
// The kernels are one template per kernel kind (unary, binary, compare)
// instantiated for every functor in ops/functors.h (ops/pointwise_kernels.h,
// shared with the CUDA backend); the ops below pick the
// functor, run it through pointwise.h, and record their backward written with
// these same ops.
#include <ember/ops/elementwise.h>

#include <cmath>

#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/ops/cpu_loops.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/pointwise_kernels.h>
#include <ember/ops/pointwise_register.h>
#include <ember/ops/reduce.h>

namespace ember {

// ---- shared helpers ---------------------------------------------------------
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const int off = shape.size() - t.dim();
  EMBER_CHECK(off >= 0, ShapeError, "broadcast: cannot broadcast ", t.shape().str(), " to ", shape.str());
  Shape st = Shape::filled(shape.size(), 0);
  for (int i = 0; i < t.dim(); ++i) {
    const int64_t s = t.shape()[i];
    EMBER_CHECK(s == shape[i + off] || s == 1, ShapeError, "broadcast: cannot broadcast ", t.shape().str(), " to ",
                shape.str());
    st[i + off] = s == 1 ? 0 : t.strides()[i];
  }
  return make_view(t, shape, st, t.offset());
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.device() == b.device(), DeviceError, op, ": expected all tensors on the same device, got ",
              a.device().str(), " and ", b.device().str());
}

namespace {
int category(DType t) { return t == DType::Bool ? 0 : (t == DType::Int64 ? 1 : 2); }
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  if (a.dtype() == b.dtype()) return a.dtype();
  // A 0-dim tensor is treated like a Python number: it does not promote a
  // dimensioned tensor of the same or a higher category.
  if (a.dim() == 0 && b.dim() > 0 && category(a.dtype()) <= category(b.dtype())) return b.dtype();
  if (b.dim() == 0 && a.dim() > 0 && category(b.dtype()) <= category(a.dtype())) return a.dtype();
  return promote_types(a.dtype(), b.dtype());
}

void check_inplace(const char* op, const Tensor& self) {
  EMBER_CHECK(!(autograd::grad_enabled() && self.requires_grad()), AutogradError, op,
              "_: in-place operation on a tensor that requires grad (shape ", self.shape().str(),
              "); use the out-of-place op, or wrap the update in NoGradGuard");
}

// ---- CPU kernels ------------------------------------------------------------
// Every functor's unary/binary/compare kernel, where and masked_fill:
// ops/pointwise_kernels.h over cpu::map (the CUDA backend registers the same
// templates over its own loop).
decltype(where_kernel) where_kernel("where");
decltype(masked_fill_kernel) masked_fill_kernel("masked_fill");

namespace {
[[maybe_unused]] const bool cpu_pointwise_registered = register_pointwise_kernels<CpuLoops>(DeviceType::CPU);
}  // namespace

// ---- ops with their backward ------------------------------------------------
using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

constexpr OpDef add_op{.name = "add", .onnx = lowering::binary<"Add">};
EMBER_REGISTER_OP(add_op);

Tensor add(const Tensor& a, const Tensor& b) {
  return op::call_captured<add_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Add>(a, b);
        if (needs_grad({a, b}))
          record("add", {a, b}, out, [](BackwardContext& ctx) {
            if (ctx.needs_grad(0)) ctx.set_grad(0, ctx.grad_output());
            if (ctx.needs_grad(1)) ctx.set_grad(1, ctx.grad_output());
          });
        return out;
      },
      a, b);
}

constexpr OpDef sub_op{.name = "sub", .onnx = lowering::binary<"Sub">};
EMBER_REGISTER_OP(sub_op);

Tensor sub(const Tensor& a, const Tensor& b) {
  return op::call_captured<sub_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Sub>(a, b);
        if (needs_grad({a, b}))
          record("sub", {a, b}, out, [](BackwardContext& ctx) {
            if (ctx.needs_grad(0)) ctx.set_grad(0, ctx.grad_output());
            if (ctx.needs_grad(1)) ctx.set_grad(1, neg(ctx.grad_output()));
          });
        return out;
      },
      a, b);
}

constexpr OpDef mul_op{.name = "mul", .onnx = lowering::binary<"Mul">};
EMBER_REGISTER_OP(mul_op);

Tensor mul(const Tensor& a, const Tensor& b) {
  return op::call_captured<mul_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Mul>(a, b);
        if (needs_grad({a, b}))
          record("mul", {a, b}, out,
                 [sa = needs_grad({b}) ? SavedTensor(a) : SavedTensor(),
                  sb = needs_grad({a}) ? SavedTensor(b) : SavedTensor()](BackwardContext& ctx) {
                   if (ctx.needs_grad(0)) ctx.set_grad(0, mul(ctx.grad_output(), sb.get()));
                   if (ctx.needs_grad(1)) ctx.set_grad(1, mul(ctx.grad_output(), sa.get()));
                 });
        return out;
      },
      a, b);
}

constexpr OpDef div_op{.name = "div", .onnx = lowering::binary<"Div">};
EMBER_REGISTER_OP(div_op);

Tensor div(const Tensor& a, const Tensor& b) {
  return op::call_captured<div_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Div>(a, b);
        if (needs_grad({a, b}))
          record("div", {a, b}, out, [sb = SavedTensor(b), so = SavedTensor(out)](BackwardContext& ctx) {
            // d(a/b)/da = 1/b;  d(a/b)/db = -a/b^2 = -out/b
            const Tensor& g = ctx.grad_output();
            if (ctx.needs_grad(0)) ctx.set_grad(0, div(g, sb.get()));
            if (ctx.needs_grad(1)) ctx.set_grad(1, neg(div(mul(g, so.get()), sb.get())));
          });
        return out;
      },
      a, b);
}

constexpr OpDef pow_op{.name = "pow", .onnx = lowering::binary<"Pow">};
EMBER_REGISTER_OP(pow_op);

Tensor pow(const Tensor& x, const Tensor& e) {
  return op::call_captured<pow_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Pow>(x, e);
        if (needs_grad({x, e}))
          record("pow", {x, e}, out,
                 [sx = SavedTensor(x), se = SavedTensor(e), so = SavedTensor(out)](BackwardContext& ctx) {
                   const Tensor& g = ctx.grad_output();
                   // d x^e / dx = e x^(e-1);  d x^e / de = x^e log x
                   if (ctx.needs_grad(0)) ctx.set_grad(0, mul(g, mul(se.get(), pow(sx.get(), sub(se.get(), 1.0)))));
                   if (ctx.needs_grad(1)) ctx.set_grad(1, mul(g, mul(so.get(), log(sx.get()))));
                 });
        return out;
      },
      x, e);
}

namespace {
// Gradient routing for maximum/minimum: the winner gets it, ties split it.
Tensor select_grad(const Tensor& g, const Tensor& win, const Tensor& tie) {
  return add(where(win, g, 0.0), where(tie, mul(g, 0.5), 0.0));
}
}  // namespace

constexpr OpDef maximum_op{.name = "maximum", .onnx = lowering::binary<"Max">};
EMBER_REGISTER_OP(maximum_op);

Tensor maximum(const Tensor& a, const Tensor& b) {
  return op::call_captured<maximum_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Maximum>(a, b);
        if (needs_grad({a, b}))
          record("maximum", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](BackwardContext& ctx) {
            const Tensor tie = eq(sa.get(), sb.get());
            if (ctx.needs_grad(0)) ctx.set_grad(0, select_grad(ctx.grad_output(), gt(sa.get(), sb.get()), tie));
            if (ctx.needs_grad(1)) ctx.set_grad(1, select_grad(ctx.grad_output(), lt(sa.get(), sb.get()), tie));
          });
        return out;
      },
      a, b);
}

constexpr OpDef minimum_op{.name = "minimum", .onnx = lowering::binary<"Min">};
EMBER_REGISTER_OP(minimum_op);

Tensor minimum(const Tensor& a, const Tensor& b) {
  return op::call_captured<minimum_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = binary_forward<fn::Minimum>(a, b);
        if (needs_grad({a, b}))
          record("minimum", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](BackwardContext& ctx) {
            const Tensor tie = eq(sa.get(), sb.get());
            if (ctx.needs_grad(0)) ctx.set_grad(0, select_grad(ctx.grad_output(), lt(sa.get(), sb.get()), tie));
            if (ctx.needs_grad(1)) ctx.set_grad(1, select_grad(ctx.grad_output(), gt(sa.get(), sb.get()), tie));
          });
        return out;
      },
      a, b);
}

// ---- tensor-scalar ----------------------------------------------------------
constexpr OpDef add_scalar_op{.name = "add_scalar", .onnx = lowering::binary<"Add">};
EMBER_REGISTER_OP(add_scalar_op);

Tensor add(const Tensor& a, double b) {
  return op::call_captured<add_scalar_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::AddScalar>(a, b);
        if (needs_grad({a})) record("add", {a}, out, [](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output()); });
        return out;
      },
      a, b);
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

constexpr OpDef rsub_scalar_op{.name = "rsub_scalar", .onnx = lowering::binary<"Sub">};
EMBER_REGISTER_OP(rsub_scalar_op);

Tensor sub(double a, const Tensor& b) {
  return op::call_captured<rsub_scalar_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::RsubScalar>(b, a);
        if (needs_grad({b}))
          record("sub", {b}, out, [](BackwardContext& ctx) { ctx.set_grad(0, neg(ctx.grad_output())); });
        return out;
      },
      a, b);
}

constexpr OpDef mul_scalar_op{.name = "mul_scalar", .onnx = lowering::binary<"Mul">};
EMBER_REGISTER_OP(mul_scalar_op);

Tensor mul(const Tensor& a, double b) {
  return op::call_captured<mul_scalar_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::MulScalar>(a, b);
        if (needs_grad({a}))
          record("mul", {a}, out, [b](BackwardContext& ctx) { ctx.set_grad(0, mul(ctx.grad_output(), b)); });
        return out;
      },
      a, b);
}

Tensor div(const Tensor& a, double b) {
  Tensor x = a.is_floating_point() ? a : a.to(DType::Float32);
  return mul(x, 1.0 / b);
}

constexpr OpDef rdiv_scalar_op{.name = "rdiv_scalar", .onnx = lowering::binary<"Div">};
EMBER_REGISTER_OP(rdiv_scalar_op);

Tensor div(double a, const Tensor& b) {
  return op::call_captured<rdiv_scalar_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::RdivScalar>(b, a);
        if (needs_grad({b}))
          record("div", {b}, out, [sb = SavedTensor(b), so = SavedTensor(out)](BackwardContext& ctx) {
            // d(a/x)/dx = -a/x^2 = -out/x
            ctx.set_grad(0, neg(div(mul(ctx.grad_output(), so.get()), sb.get())));
          });
        return out;
      },
      a, b);
}

constexpr OpDef neg_op{.name = "neg", .onnx = lowering::unary<"Neg">};
EMBER_REGISTER_OP(neg_op);

Tensor neg(const Tensor& x) {
  return op::call_captured<neg_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Neg>(x);
        if (needs_grad({x}))
          record("neg", {x}, out, [](BackwardContext& ctx) { ctx.set_grad(0, neg(ctx.grad_output())); });
        return out;
      },
      x);
}

constexpr OpDef pow_scalar_op{.name = "pow_scalar", .onnx = lowering::binary<"Pow">};
EMBER_REGISTER_OP(pow_scalar_op);

Tensor pow(const Tensor& x, double e) {
  return op::call_captured<pow_scalar_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::PowScalar>(x, e);
        if (needs_grad({x}))
          record("pow", {x}, out, [sx = SavedTensor(x), e](BackwardContext& ctx) {
            // d x^e / dx = e x^(e-1)
            Tensor d = e == 2.0 ? mul(sx.get(), 2.0) : mul(pow(sx.get(), e - 1.0), e);
            ctx.set_grad(0, mul(ctx.grad_output(), d));
          });
        return out;
      },
      x, e);
}

Tensor square(const Tensor& x) { return pow(x, 2.0); }

namespace {
// Clip with the bounds that are finite (an infinite one is an omitted input).
void lower_clamp(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.tensor(0).dtype();
  const double lo = c.f(1), hi = c.f(2);
  std::vector<std::string> in{g.value(c.tensor(0)), std::isinf(lo) ? "" : g.scalar(lo, dt)};
  if (!std::isinf(hi)) in.push_back(g.scalar(hi, dt));
  g.bind(c.outputs[0], g.node("Clip", in)[0]);
}
}  // namespace

constexpr OpDef clamp_op{.name = "clamp", .onnx = lower_clamp};
EMBER_REGISTER_OP(clamp_op);

Tensor clamp(const Tensor& x, double lo, double hi) {
  return op::call_captured<clamp_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Clamp>(x, lo, hi);
        if (needs_grad({x}))
          record("clamp", {x}, out, [sx = SavedTensor(x), lo, hi](BackwardContext& ctx) {
            // The gradient passes where lo <= x <= hi, as in PyTorch.
            const Tensor inside = logical_and(ge(sx.get(), lo), le(sx.get(), hi));
            ctx.set_grad(0, where(inside, ctx.grad_output(), 0.0));
          });
        return out;
      },
      x, lo, hi);
}

// ---- math -------------------------------------------------------------------
// exp and log are on PyTorch's float32 autocast list; their pointwise
// kernels take 16-bit tensors.
constexpr OpDef exp_op{.name = "exp", .autocast = Autocast::Float32};
constexpr OpDef log_op{.name = "log", .autocast = Autocast::Float32};
EMBER_REGISTER_OP(exp_op);
EMBER_REGISTER_OP(log_op);

Tensor exp(const Tensor& x) {
  return op::call<exp_op>(
      [](const Tensor& x) {
        Tensor out = unary_forward<fn::Exp>(x);
        if (needs_grad({x}))
          record("exp", {x}, out,
                 [so = SavedTensor(out)](BackwardContext& ctx) { ctx.set_grad(0, mul(ctx.grad_output(), so.get())); });
        return out;
      },
      x);
}

Tensor log(const Tensor& x) {
  return op::call<log_op>(
      [](const Tensor& x) {
        Tensor out = unary_forward<fn::Log>(x);
        if (needs_grad({x}))
          record("log", {x}, out,
                 [sx = SavedTensor(x)](BackwardContext& ctx) { ctx.set_grad(0, div(ctx.grad_output(), sx.get())); });
        return out;
      },
      x);
}

constexpr OpDef sqrt_op{.name = "sqrt", .onnx = lowering::unary<"Sqrt">};
EMBER_REGISTER_OP(sqrt_op);

Tensor sqrt(const Tensor& x) {
  return op::call_captured<sqrt_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Sqrt>(x);
        if (needs_grad({x}))
          record("sqrt", {x}, out, [so = SavedTensor(out)](BackwardContext& ctx) {
            ctx.set_grad(0, div(ctx.grad_output(), mul(so.get(), 2.0)));
          });
        return out;
      },
      x);
}

namespace {
void lower_rsqrt(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Reciprocal", {g.node("Sqrt", {g.value(c.tensor(0))})[0]})[0]);
}
}  // namespace

constexpr OpDef rsqrt_op{.name = "rsqrt", .onnx = lower_rsqrt};
EMBER_REGISTER_OP(rsqrt_op);

Tensor rsqrt(const Tensor& x) {
  return op::call_captured<rsqrt_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Rsqrt>(x);
        if (needs_grad({x}))
          record("rsqrt", {x}, out, [so = SavedTensor(out)](BackwardContext& ctx) {
            // d x^(-1/2) / dx = -1/2 x^(-3/2) = -1/2 out^3
            ctx.set_grad(0, mul(ctx.grad_output(), mul(pow(so.get(), 3.0), -0.5)));
          });
        return out;
      },
      x);
}

constexpr OpDef abs_op{.name = "abs", .onnx = lowering::unary<"Abs">};
EMBER_REGISTER_OP(abs_op);

Tensor abs(const Tensor& x) {
  return op::call_captured<abs_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Abs>(x);
        if (needs_grad({x}))
          record("abs", {x}, out, [sx = SavedTensor(x)](BackwardContext& ctx) {
            // sign(x), with 0 at 0 as in PyTorch
            const Tensor& v = sx.get();
            const Tensor sign = sub(gt(v, 0.0).to(v.dtype()), lt(v, 0.0).to(v.dtype()));
            ctx.set_grad(0, mul(ctx.grad_output(), sign));
          });
        return out;
      },
      x);
}

constexpr OpDef sin_op{.name = "sin", .onnx = lowering::unary<"Sin">};
EMBER_REGISTER_OP(sin_op);

Tensor sin(const Tensor& x) {
  return op::call_captured<sin_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Sin>(x);
        if (needs_grad({x}))
          record("sin", {x}, out, [sx = SavedTensor(x)](BackwardContext& ctx) {
            ctx.set_grad(0, mul(ctx.grad_output(), cos(sx.get())));
          });
        return out;
      },
      x);
}

constexpr OpDef cos_op{.name = "cos", .onnx = lowering::unary<"Cos">};
EMBER_REGISTER_OP(cos_op);

Tensor cos(const Tensor& x) {
  return op::call_captured<cos_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Cos>(x);
        if (needs_grad({x}))
          record("cos", {x}, out, [sx = SavedTensor(x)](BackwardContext& ctx) {
            ctx.set_grad(0, neg(mul(ctx.grad_output(), sin(sx.get()))));
          });
        return out;
      },
      x);
}

// ---- in place ---------------------------------------------------------------
Tensor& add_(Tensor& self, const Tensor& other, double alpha) {
  if (alpha == 1.0) return binary_inplace<fn::Add>(self, other);
  return binary_inplace<fn::Add>(self, unary_forward<fn::MulScalar>(other, alpha));
}
Tensor& add_(Tensor& self, double other) { return unary_inplace<fn::AddScalar>(self, other); }
Tensor& sub_(Tensor& self, const Tensor& other) { return binary_inplace<fn::Sub>(self, other); }
Tensor& mul_(Tensor& self, const Tensor& other) { return binary_inplace<fn::Mul>(self, other); }
Tensor& mul_(Tensor& self, double other) { return unary_inplace<fn::MulScalar>(self, other); }
Tensor& div_(Tensor& self, const Tensor& other) { return binary_inplace<fn::Div>(self, other); }
Tensor& div_(Tensor& self, double other) { return unary_inplace<fn::MulScalar>(self, 1.0 / other); }
Tensor& clamp_(Tensor& self, double lo, double hi) { return unary_inplace<fn::Clamp>(self, lo, hi); }
Tensor& masked_fill_(Tensor& self, const Tensor& mask, double value) {
  check_inplace("masked_fill", self);
  EMBER_CHECK(mask.dtype() == DType::Bool, DTypeError, "masked_fill_: mask must be bool");
  masked_fill_kernel(self.device(), self, broadcast_view(mask, self.shape()), self, value);
  self.bump_version();
  return self;
}

// ---- gradient accumulation for the engine -----------------------------------
namespace autograd {
Tensor accumulate(const Tensor& a, const Tensor& b) { return binary_forward<fn::Add>(a, b); }
void accumulate_(Tensor& acc, const Tensor& g) {
  binary_kernel<fn::Add>()(acc.device(), acc,
                           broadcast_view(g.dtype() == acc.dtype() ? g : g.to(acc.dtype()), acc.shape()), acc, 0, 0);
  acc.bump_version();
}
}  // namespace autograd

}  // namespace ember
