// floor, remainder and fmod: rounding and the two remainders of division,
// with PyTorch's semantics (torch.floor, torch.remainder: the divisor's sign,
// as Python's %; torch.fmod: the dividend's sign, as C's fmod), a tensor or a
// number as divisor. Formulas in ops/functors.h (Floor, Remainder, Fmod and
// their scalar forms), so every backend has the kernels.
//
// Gradients as PyTorch defines them: floor's is zero; a remainder's is g for
// the dividend and -g q for the divisor, q the quotient rounded the way the
// remainder rounds it (floor(a / b) for remainder, trunc(a / b) for fmod),
// since r = a - q b with q piecewise constant.
#include <ember/core/op.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/reduce.h>

namespace ember {

using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

// An integer divisor of zero has no remainder: PyTorch raises, so does this
// (before the kernel, which would trap).
void check_integer_divisor(const char* op, const Tensor& a, const Tensor& b) {
  if (is_floating(result_type(a, b))) return;
  EMBER_CHECK(sum(eq(b, 0.0)).item() == 0, ValueError, op,
              ": integer division by zero (a divisor of an integer remainder is 0)");
}

// trunc(q): toward zero.
Tensor trunc_of(const Tensor& q) { return where(lt(q, 0.0), neg(floor(neg(q))), floor(q)); }

// A number that is not a whole number makes an integer input floating, as a
// Python float does in PyTorch.
Tensor promoted_for(const Tensor& a, double b) {
  const bool whole = b == static_cast<double>(static_cast<int64_t>(b));
  return !a.is_floating_point() && !whole ? a.to(DType::Float32) : a;
}

// ONNX: fmod is Mod with fmod = 1 (the only form ONNX allows for floating
// types). remainder is Mod with fmod = 0 on integers; on floating types it is
// fmod plus the divisor where the remainder is non-zero and its sign differs
// from the divisor's.
void lower_fmod(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.outputs[0].dtype();
  g.bind(c.outputs[0],
         g.node("Mod", {lowering::operand(g, c, 0, dt), lowering::operand(g, c, 1, dt)}, {{"fmod", int64_t{1}}})[0]);
}
void lower_remainder(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.outputs[0].dtype();
  const std::string a = lowering::operand(g, c, 0, dt), b = lowering::operand(g, c, 1, dt);
  if (!is_floating(dt)) {
    g.bind(c.outputs[0], g.node("Mod", {a, b}, {{"fmod", int64_t{0}}})[0]);
    return;
  }
  const std::string r = g.node("Mod", {a, b}, {{"fmod", int64_t{1}}})[0];
  const std::string zero = g.scalar(0.0, dt);
  const std::string signs_differ = g.node("Xor", {g.node("Less", {r, zero})[0], g.node("Less", {b, zero})[0]})[0];
  const std::string adjust = g.node("And", {g.node("Not", {g.node("Equal", {r, zero})[0]})[0], signs_differ})[0];
  g.bind(c.outputs[0], g.node("Where", {adjust, g.node("Add", {r, b})[0], r})[0]);
}

}  // namespace

constexpr OpDef floor_op{.name = "floor", .onnx = lowering::unary<"Floor">};
EMBER_REGISTER_OP(floor_op);

Tensor floor(const Tensor& x) {
  return op::call<floor_op>(
      [&](const auto&...) -> Tensor {
        Tensor out = unary_forward<fn::Floor>(x);
        if (needs_grad({x}))
          record("floor", {x}, out, [](BackwardContext& ctx) { ctx.set_grad(0, zeros_like(ctx.grad_output())); });
        return out;
      },
      x);
}

constexpr OpDef remainder_op{.name = "remainder", .onnx = lower_remainder};
EMBER_REGISTER_OP(remainder_op);

Tensor remainder(const Tensor& a, const Tensor& b) {
  return op::call<remainder_op>(
      [&](const auto&...) -> Tensor {
        check_integer_divisor("remainder", a, b);
        Tensor out = binary_forward<fn::Remainder>(a, b);
        if (needs_grad({a, b}))
          record("remainder", {a, b}, out,
                 [sa = needs_grad({b}) ? SavedTensor(a) : SavedTensor(),
                  sb = needs_grad({b}) ? SavedTensor(b) : SavedTensor()](BackwardContext& ctx) {
                   const Tensor& g = ctx.grad_output();
                   if (ctx.needs_grad(0)) ctx.set_grad(0, g);
                   if (ctx.needs_grad(1)) ctx.set_grad(1, neg(mul(g, floor(div(sa.get(), sb.get())))));
                 });
        return out;
      },
      a, b);
}

constexpr OpDef remainder_scalar_op{.name = "remainder_scalar", .onnx = lower_remainder};
EMBER_REGISTER_OP(remainder_scalar_op);

Tensor remainder(const Tensor& a, double b) {
  return op::call<remainder_scalar_op>(
      [&](const auto&...) -> Tensor {
        const Tensor x = promoted_for(a, b);
        EMBER_CHECK(x.is_floating_point() || b != 0, ValueError, "remainder: integer division by zero");
        Tensor out = unary_forward<fn::RemainderScalar>(x, b);
        if (needs_grad({a}))
          record("remainder", {a}, out, [](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output()); });
        return out;
      },
      a, b);
}

constexpr OpDef fmod_op{.name = "fmod", .onnx = lower_fmod};
EMBER_REGISTER_OP(fmod_op);

Tensor fmod(const Tensor& a, const Tensor& b) {
  return op::call<fmod_op>(
      [&](const auto&...) -> Tensor {
        check_integer_divisor("fmod", a, b);
        Tensor out = binary_forward<fn::Fmod>(a, b);
        if (needs_grad({a, b}))
          record("fmod", {a, b}, out,
                 [sa = needs_grad({b}) ? SavedTensor(a) : SavedTensor(),
                  sb = needs_grad({b}) ? SavedTensor(b) : SavedTensor()](BackwardContext& ctx) {
                   const Tensor& g = ctx.grad_output();
                   if (ctx.needs_grad(0)) ctx.set_grad(0, g);
                   if (ctx.needs_grad(1)) ctx.set_grad(1, neg(mul(g, trunc_of(div(sa.get(), sb.get())))));
                 });
        return out;
      },
      a, b);
}

constexpr OpDef fmod_scalar_op{.name = "fmod_scalar", .onnx = lower_fmod};
EMBER_REGISTER_OP(fmod_scalar_op);

Tensor fmod(const Tensor& a, double b) {
  return op::call<fmod_scalar_op>(
      [&](const auto&...) -> Tensor {
        const Tensor x = promoted_for(a, b);
        EMBER_CHECK(x.is_floating_point() || b != 0, ValueError, "fmod: integer division by zero");
        Tensor out = unary_forward<fn::FmodScalar>(x, b);
        if (needs_grad({a})) record("fmod", {a}, out, [](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output()); });
        return out;
      },
      a, b);
}

}  // namespace ember
