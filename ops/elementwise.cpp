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

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<fn::Add>(a, b);
  if (needs_grad({a, b}))
    record("add", {a, b}, out, [](BackwardContext& ctx) {
      if (ctx.needs_grad(0)) ctx.set_grad(0, ctx.grad_output());
      if (ctx.needs_grad(1)) ctx.set_grad(1, ctx.grad_output());
    });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<fn::Sub>(a, b);
  if (needs_grad({a, b}))
    record("sub", {a, b}, out, [](BackwardContext& ctx) {
      if (ctx.needs_grad(0)) ctx.set_grad(0, ctx.grad_output());
      if (ctx.needs_grad(1)) ctx.set_grad(1, neg(ctx.grad_output()));
    });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<fn::Mul>(a, b);
  if (needs_grad({a, b}))
    record("mul", {a, b}, out,
           [sa = needs_grad({b}) ? SavedTensor(a) : SavedTensor(),
            sb = needs_grad({a}) ? SavedTensor(b) : SavedTensor()](BackwardContext& ctx) {
             if (ctx.needs_grad(0)) ctx.set_grad(0, mul(ctx.grad_output(), sb.get()));
             if (ctx.needs_grad(1)) ctx.set_grad(1, mul(ctx.grad_output(), sa.get()));
           });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<fn::Div>(a, b);
  if (needs_grad({a, b}))
    record("div", {a, b}, out, [sb = SavedTensor(b), so = SavedTensor(out)](BackwardContext& ctx) {
      // d(a/b)/da = 1/b;  d(a/b)/db = -a/b^2 = -out/b
      const Tensor& g = ctx.grad_output();
      if (ctx.needs_grad(0)) ctx.set_grad(0, div(g, sb.get()));
      if (ctx.needs_grad(1)) ctx.set_grad(1, neg(div(mul(g, so.get()), sb.get())));
    });
  return out;
}

Tensor pow(const Tensor& x, const Tensor& e) {
  Tensor out = binary_forward<fn::Pow>(x, e);
  if (needs_grad({x, e}))
    record("pow", {x, e}, out, [sx = SavedTensor(x), se = SavedTensor(e), so = SavedTensor(out)](BackwardContext& ctx) {
      const Tensor& g = ctx.grad_output();
      // d x^e / dx = e x^(e-1);  d x^e / de = x^e log x
      if (ctx.needs_grad(0)) ctx.set_grad(0, mul(g, mul(se.get(), pow(sx.get(), sub(se.get(), 1.0)))));
      if (ctx.needs_grad(1)) ctx.set_grad(1, mul(g, mul(so.get(), log(sx.get()))));
    });
  return out;
}

namespace {
// Gradient routing for maximum/minimum: the winner gets it, ties split it.
Tensor select_grad(const Tensor& g, const Tensor& win, const Tensor& tie) {
  return add(where(win, g, 0.0), where(tie, mul(g, 0.5), 0.0));
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<fn::Maximum>(a, b);
  if (needs_grad({a, b}))
    record("maximum", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](BackwardContext& ctx) {
      const Tensor tie = eq(sa.get(), sb.get());
      if (ctx.needs_grad(0)) ctx.set_grad(0, select_grad(ctx.grad_output(), gt(sa.get(), sb.get()), tie));
      if (ctx.needs_grad(1)) ctx.set_grad(1, select_grad(ctx.grad_output(), lt(sa.get(), sb.get()), tie));
    });
  return out;
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward<fn::Minimum>(a, b);
  if (needs_grad({a, b}))
    record("minimum", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](BackwardContext& ctx) {
      const Tensor tie = eq(sa.get(), sb.get());
      if (ctx.needs_grad(0)) ctx.set_grad(0, select_grad(ctx.grad_output(), lt(sa.get(), sb.get()), tie));
      if (ctx.needs_grad(1)) ctx.set_grad(1, select_grad(ctx.grad_output(), gt(sa.get(), sb.get()), tie));
    });
  return out;
}

// ---- tensor-scalar ----------------------------------------------------------
Tensor add(const Tensor& a, double b) {
  Tensor out = unary_forward<fn::AddScalar>(a, b);
  if (needs_grad({a})) record("add", {a}, out, [](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output()); });
  return out;
}

Tensor sub(const Tensor& a, double b) { return add(a, -b); }

Tensor sub(double a, const Tensor& b) {
  Tensor out = unary_forward<fn::RsubScalar>(b, a);
  if (needs_grad({b})) record("sub", {b}, out, [](BackwardContext& ctx) { ctx.set_grad(0, neg(ctx.grad_output())); });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = unary_forward<fn::MulScalar>(a, b);
  if (needs_grad({a}))
    record("mul", {a}, out, [b](BackwardContext& ctx) { ctx.set_grad(0, mul(ctx.grad_output(), b)); });
  return out;
}

Tensor div(const Tensor& a, double b) {
  Tensor x = a.is_floating_point() ? a : a.to(DType::Float32);
  return mul(x, 1.0 / b);
}

Tensor div(double a, const Tensor& b) {
  Tensor out = unary_forward<fn::RdivScalar>(b, a);
  if (needs_grad({b}))
    record("div", {b}, out, [sb = SavedTensor(b), so = SavedTensor(out)](BackwardContext& ctx) {
      // d(a/x)/dx = -a/x^2 = -out/x
      ctx.set_grad(0, neg(div(mul(ctx.grad_output(), so.get()), sb.get())));
    });
  return out;
}

Tensor neg(const Tensor& x) {
  Tensor out = unary_forward<fn::Neg>(x);
  if (needs_grad({x})) record("neg", {x}, out, [](BackwardContext& ctx) { ctx.set_grad(0, neg(ctx.grad_output())); });
  return out;
}

Tensor pow(const Tensor& x, double e) {
  Tensor out = unary_forward<fn::PowScalar>(x, e);
  if (needs_grad({x}))
    record("pow", {x}, out, [sx = SavedTensor(x), e](BackwardContext& ctx) {
      // d x^e / dx = e x^(e-1)
      Tensor d = e == 2.0 ? mul(sx.get(), 2.0) : mul(pow(sx.get(), e - 1.0), e);
      ctx.set_grad(0, mul(ctx.grad_output(), d));
    });
  return out;
}

Tensor square(const Tensor& x) { return pow(x, 2.0); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  Tensor out = unary_forward<fn::Clamp>(x, lo, hi);
  if (needs_grad({x}))
    record("clamp", {x}, out, [sx = SavedTensor(x), lo, hi](BackwardContext& ctx) {
      // The gradient passes where lo <= x <= hi, as in PyTorch.
      const Tensor inside = logical_and(ge(sx.get(), lo), le(sx.get(), hi));
      ctx.set_grad(0, where(inside, ctx.grad_output(), 0.0));
    });
  return out;
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

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_forward<fn::Sqrt>(x);
  if (needs_grad({x}))
    record("sqrt", {x}, out, [so = SavedTensor(out)](BackwardContext& ctx) {
      ctx.set_grad(0, div(ctx.grad_output(), mul(so.get(), 2.0)));
    });
  return out;
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = unary_forward<fn::Rsqrt>(x);
  if (needs_grad({x}))
    record("rsqrt", {x}, out, [so = SavedTensor(out)](BackwardContext& ctx) {
      // d x^(-1/2) / dx = -1/2 x^(-3/2) = -1/2 out^3
      ctx.set_grad(0, mul(ctx.grad_output(), mul(pow(so.get(), 3.0), -0.5)));
    });
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = unary_forward<fn::Abs>(x);
  if (needs_grad({x}))
    record("abs", {x}, out, [sx = SavedTensor(x)](BackwardContext& ctx) {
      // sign(x), with 0 at 0 as in PyTorch
      const Tensor& v = sx.get();
      const Tensor sign = sub(gt(v, 0.0).to(v.dtype()), lt(v, 0.0).to(v.dtype()));
      ctx.set_grad(0, mul(ctx.grad_output(), sign));
    });
  return out;
}

Tensor sin(const Tensor& x) {
  Tensor out = unary_forward<fn::Sin>(x);
  if (needs_grad({x}))
    record("sin", {x}, out,
           [sx = SavedTensor(x)](BackwardContext& ctx) { ctx.set_grad(0, mul(ctx.grad_output(), cos(sx.get()))); });
  return out;
}

Tensor cos(const Tensor& x) {
  Tensor out = unary_forward<fn::Cos>(x);
  if (needs_grad({x}))
    record("cos", {x}, out, [sx = SavedTensor(x)](BackwardContext& ctx) {
      ctx.set_grad(0, neg(mul(ctx.grad_output(), sin(sx.get()))));
    });
  return out;
}

// ---- selection --------------------------------------------------------------
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(cond.dtype() == DType::Bool, DTypeError, "where: condition must be bool, got ", dtype_name(cond.dtype()));
  check_same_device("where", cond, a);
  check_same_device("where", a, b);
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const DType dt = result_type(a, b);
  Tensor out = empty(shape, TensorOptions(dt, a.device()));
  where_kernel(a.device(), broadcast_view(cond, shape), broadcast_view(a.to(dt), shape),
               broadcast_view(b.to(dt), shape), out);
  if (needs_grad({a, b}))
    record("where", {a, b}, out, [sc = SavedTensor(cond)](BackwardContext& ctx) {
      const Tensor& g = ctx.grad_output();
      if (ctx.needs_grad(0)) ctx.set_grad(0, masked_fill(g, logical_not(sc.get()), 0.0));
      if (ctx.needs_grad(1)) ctx.set_grad(1, masked_fill(g, sc.get(), 0.0));
    });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar_tensor(b, TensorOptions(a.dtype(), a.device())));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  EMBER_CHECK(mask.dtype() == DType::Bool, DTypeError, "masked_fill: mask must be bool, got ",
              dtype_name(mask.dtype()));
  check_same_device("masked_fill", x, mask);
  EMBER_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), ShapeError,
              "masked_fill: mask of shape ", mask.shape().str(), " does not broadcast to the input's shape ",
              x.shape().str());
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
  masked_fill_kernel(x.device(), x, broadcast_view(mask, x.shape()), out, value);
  if (needs_grad({x}))
    record("masked_fill", {x}, out, [sm = SavedTensor(mask)](BackwardContext& ctx) {
      ctx.set_grad(0, masked_fill(ctx.grad_output(), sm.get(), 0.0));
    });
  return out;
}

// ---- comparisons ------------------------------------------------------------
namespace {
template <class F>
Tensor compare(const Tensor& a, const Tensor& b) {
  check_same_device(F::name, a, b);
  const DType dt = result_type(a, b);
  const Shape shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), F::name);
  Tensor out = empty(shape, TensorOptions(DType::Bool, a.device()));
  compare_kernel<F>()(a.device(), broadcast_view(a.dtype() == dt ? a : a.to(dt), shape),
                      broadcast_view(b.dtype() == dt ? b : b.to(dt), shape), out);
  return out;
}
template <class F>
Tensor compare(const Tensor& a, double b) {
  const DType dt = a.is_floating_point() ? a.dtype() : (b == std::floor(b) ? a.dtype() : DType::Float32);
  return compare<F>(a, scalar_tensor(b, TensorOptions(dt == DType::Bool ? DType::Int64 : dt, a.device())));
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare<fn::Eq>(a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare<fn::Ne>(a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare<fn::Lt>(a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare<fn::Le>(a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare<fn::Gt>(a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare<fn::Ge>(a, b); }
Tensor eq(const Tensor& a, double b) { return compare<fn::Eq>(a, b); }
Tensor ne(const Tensor& a, double b) { return compare<fn::Ne>(a, b); }
Tensor lt(const Tensor& a, double b) { return compare<fn::Lt>(a, b); }
Tensor le(const Tensor& a, double b) { return compare<fn::Le>(a, b); }
Tensor gt(const Tensor& a, double b) { return compare<fn::Gt>(a, b); }
Tensor ge(const Tensor& a, double b) { return compare<fn::Ge>(a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare<fn::LogicalAnd>(a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare<fn::LogicalOr>(a, b); }
Tensor logical_not(const Tensor& a) { return eq(a.dtype() == DType::Bool ? a : ne(a, 0.0), 0.0); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  NoGradGuard no_grad;
  const Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
  const Tensor bad = gt(abs(sub(a64, b64)), add(mul(abs(b64), rtol), atol));
  return sum(bad.to(DType::Int64)).item<int64_t>() == 0;
}

bool equal(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  if (a.shape() != b.shape()) return false;
  return sum(ne(a, b).to(DType::Int64)).item<int64_t>() == 0;
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
