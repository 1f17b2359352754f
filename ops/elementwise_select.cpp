// where, masked_fill, the comparisons and the logical ops: their forward,
// backward and ONNX lowering (the kernels are the pointwise ones,
// ops/pointwise_kernels.h).
#include <cmath>

#include <ember/core/autograd.h>
#include <ember/core/op.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/pointwise_kernels.h>
#include <ember/ops/reduce.h>

namespace ember {

using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

// ---- selection --------------------------------------------------------------
namespace {
void lower_where(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.outputs[0].dtype();
  g.bind(c.outputs[0],
         g.node("Where", {g.value(c.tensor(0)), lowering::operand(g, c, 1, dt), lowering::operand(g, c, 2, dt)})[0]);
}
// masked_fill(x, mask, value) = Where(mask, value, x)
void lower_masked_fill(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.tensor(0).dtype();
  g.bind(c.outputs[0], g.node("Where", {g.value(c.tensor(1)), g.scalar(c.f(2), dt), g.value(c.tensor(0))})[0]);
}
// a != b = Not(Equal(a, b)); logical_not(a) = Not(bool(a)).
void lower_ne(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.has_tensor(1) ? promote_types(c.tensor(0).dtype(), c.tensor(1).dtype()) : c.tensor(0).dtype();
  const std::string e = g.node("Equal", {lowering::operand(g, c, 0, dt), lowering::operand(g, c, 1, dt)})[0];
  g.bind(c.outputs[0], g.node("Not", {e})[0]);
}
void lower_logical_not(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Not", {lowering::cast_to(g, c.tensor(0), DType::Bool)})[0]);
}
void lower_logical(lowering::Graph& g, const lowering::Call& c, const char* op) {
  g.bind(c.outputs[0], g.node(op, {lowering::cast_to(g, c.tensor(0), DType::Bool),
                                   lowering::cast_to(g, c.tensor(1), DType::Bool)})[0]);
}
void lower_and(lowering::Graph& g, const lowering::Call& c) { lower_logical(g, c, "And"); }
void lower_or(lowering::Graph& g, const lowering::Call& c) { lower_logical(g, c, "Or"); }
}  // namespace

constexpr OpDef where_op{.name = "where", .onnx = lower_where};
EMBER_REGISTER_OP(where_op);

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return op::call_captured<where_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(cond.dtype() == DType::Bool, DTypeError, "where: condition must be bool, got ",
                    dtype_name(cond.dtype()));
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
      },
      cond, a, b);
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(cond, a, scalar_tensor(b, TensorOptions(a.dtype(), a.device())));
}

constexpr OpDef masked_fill_op{.name = "masked_fill", .onnx = lower_masked_fill};
EMBER_REGISTER_OP(masked_fill_op);

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return op::call_captured<masked_fill_op>(
      [&](const auto&...) -> Tensor {
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
      },
      x, mask, value);
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

constexpr OpDef eq_op{.name = "eq", .onnx = lowering::compare<"Equal">};
EMBER_REGISTER_OP(eq_op);

Tensor eq(const Tensor& a, const Tensor& b) {
  return op::call_captured<eq_op>([&](const auto&...) -> Tensor { return compare<fn::Eq>(a, b); }, a, b);
}
constexpr OpDef ne_op{.name = "ne", .onnx = lower_ne};
EMBER_REGISTER_OP(ne_op);

Tensor ne(const Tensor& a, const Tensor& b) {
  return op::call_captured<ne_op>([&](const auto&...) -> Tensor { return compare<fn::Ne>(a, b); }, a, b);
}
constexpr OpDef lt_op{.name = "lt", .onnx = lowering::compare<"Less">};
EMBER_REGISTER_OP(lt_op);

Tensor lt(const Tensor& a, const Tensor& b) {
  return op::call_captured<lt_op>([&](const auto&...) -> Tensor { return compare<fn::Lt>(a, b); }, a, b);
}
constexpr OpDef le_op{.name = "le", .onnx = lowering::compare<"LessOrEqual">};
EMBER_REGISTER_OP(le_op);

Tensor le(const Tensor& a, const Tensor& b) {
  return op::call_captured<le_op>([&](const auto&...) -> Tensor { return compare<fn::Le>(a, b); }, a, b);
}
constexpr OpDef gt_op{.name = "gt", .onnx = lowering::compare<"Greater">};
EMBER_REGISTER_OP(gt_op);

Tensor gt(const Tensor& a, const Tensor& b) {
  return op::call_captured<gt_op>([&](const auto&...) -> Tensor { return compare<fn::Gt>(a, b); }, a, b);
}
constexpr OpDef ge_op{.name = "ge", .onnx = lowering::compare<"GreaterOrEqual">};
EMBER_REGISTER_OP(ge_op);

Tensor ge(const Tensor& a, const Tensor& b) {
  return op::call_captured<ge_op>([&](const auto&...) -> Tensor { return compare<fn::Ge>(a, b); }, a, b);
}
constexpr OpDef eq_scalar_op{.name = "eq_scalar", .onnx = lowering::compare<"Equal">};
EMBER_REGISTER_OP(eq_scalar_op);

Tensor eq(const Tensor& a, double b) {
  return op::call_captured<eq_scalar_op>([&](const auto&...) -> Tensor { return compare<fn::Eq>(a, b); }, a, b);
}
constexpr OpDef ne_scalar_op{.name = "ne_scalar", .onnx = lower_ne};
EMBER_REGISTER_OP(ne_scalar_op);

Tensor ne(const Tensor& a, double b) {
  return op::call_captured<ne_scalar_op>([&](const auto&...) -> Tensor { return compare<fn::Ne>(a, b); }, a, b);
}
constexpr OpDef lt_scalar_op{.name = "lt_scalar", .onnx = lowering::compare<"Less">};
EMBER_REGISTER_OP(lt_scalar_op);

Tensor lt(const Tensor& a, double b) {
  return op::call_captured<lt_scalar_op>([&](const auto&...) -> Tensor { return compare<fn::Lt>(a, b); }, a, b);
}
constexpr OpDef le_scalar_op{.name = "le_scalar", .onnx = lowering::compare<"LessOrEqual">};
EMBER_REGISTER_OP(le_scalar_op);

Tensor le(const Tensor& a, double b) {
  return op::call_captured<le_scalar_op>([&](const auto&...) -> Tensor { return compare<fn::Le>(a, b); }, a, b);
}
constexpr OpDef gt_scalar_op{.name = "gt_scalar", .onnx = lowering::compare<"Greater">};
EMBER_REGISTER_OP(gt_scalar_op);

Tensor gt(const Tensor& a, double b) {
  return op::call_captured<gt_scalar_op>([&](const auto&...) -> Tensor { return compare<fn::Gt>(a, b); }, a, b);
}
constexpr OpDef ge_scalar_op{.name = "ge_scalar", .onnx = lowering::compare<"GreaterOrEqual">};
EMBER_REGISTER_OP(ge_scalar_op);

Tensor ge(const Tensor& a, double b) {
  return op::call_captured<ge_scalar_op>([&](const auto&...) -> Tensor { return compare<fn::Ge>(a, b); }, a, b);
}
constexpr OpDef logical_and_op{.name = "logical_and", .onnx = lower_and};
EMBER_REGISTER_OP(logical_and_op);

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return op::call_captured<logical_and_op>([&](const auto&...) -> Tensor { return compare<fn::LogicalAnd>(a, b); }, a,
                                           b);
}
constexpr OpDef logical_or_op{.name = "logical_or", .onnx = lower_or};
EMBER_REGISTER_OP(logical_or_op);

Tensor logical_or(const Tensor& a, const Tensor& b) {
  return op::call_captured<logical_or_op>([&](const auto&...) -> Tensor { return compare<fn::LogicalOr>(a, b); }, a, b);
}
constexpr OpDef logical_not_op{.name = "logical_not", .onnx = lower_logical_not};
EMBER_REGISTER_OP(logical_not_op);

Tensor logical_not(const Tensor& a) {
  return op::call_captured<logical_not_op>(
      [&](const auto&...) -> Tensor { return eq(a.dtype() == DType::Bool ? a : ne(a, 0.0), 0.0); }, a);
}

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

}  // namespace ember
