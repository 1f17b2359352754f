// ONNX import: arithmetic, math, comparison and logic ops (the activations
// are in import_ops_activation.cpp).
//
// All of them broadcast as NumPy does (opset 7 on; before it, B broadcast
// only when the node says so, legacy_broadcast). ONNX's integer types are all
// int64 here, so integer arithmetic runs in int64; Div and Pow keep ONNX's
// integer meaning (truncating division, an integer power) by computing in
// float64 and converting back, exact up to 2^53.
#include <limits>

#include <ember/onnx/import_helpers.h>
#include <ember/onnx/import_math.h>
#include <ember/ops/activation.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

// ---- arithmetic -------------------------------------------------------------
Outs add_op(const NodeArgs& a) { return {add(a.input(0), legacy_broadcast(a, a.input(0), a.input(1)))}; }
Outs sub_op(const NodeArgs& a) { return {sub(a.input(0), legacy_broadcast(a, a.input(0), a.input(1)))}; }
Outs mul_op(const NodeArgs& a) { return {mul(a.input(0), legacy_broadcast(a, a.input(0), a.input(1)))}; }
Outs div_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const Tensor y = legacy_broadcast(a, x, a.input(1));
  if (!x.is_floating_point() && !y.is_floating_point()) {
    // Integer division truncates toward zero; a zero divisor (undefined in ONNX) gives 0, not a trap.
    const Tensor q = run_unary<fn::Trunc>(div(x.to(kFloat64), y.to(kFloat64)));
    return {where(eq(y, 0.0), zeros_like(q), q).to(kInt64)};
  }
  return {div(x, y)};
}
// The result has the base's type (Pow-12 allows any exponent type).
Outs pow_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const Tensor y = legacy_broadcast(a, x, a.input(1));
  if (!x.is_floating_point()) return {run_unary<fn::Trunc>(pow(x.to(kFloat64), y.to(kFloat64))).to(x.dtype())};
  Tensor out = pow(x, y.is_floating_point() ? y.to(x.dtype()) : y);
  return {out.dtype() == x.dtype() ? out : out.to(x.dtype())};
}
Outs mod_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &y = a.input(1);
  const bool fmod = a.attr_int("fmod", 0) != 0;
  if (!fmod && (x.is_floating_point() || y.is_floating_point())) a.invalid("fmod must be 1 for floating-point inputs");
  return {fmod ? run_binary<fn::ModTrunc>(x, y) : run_binary<fn::ModFloor>(x, y)};
}
Outs neg_op(const NodeArgs& a) { return {neg(a.input(0))}; }
Outs abs_op(const NodeArgs& a) { return {abs(a.input(0))}; }
Outs reciprocal_op(const NodeArgs& a) { return {div(1.0, a.input(0))}; }

// Min, Max, Sum and Mean of one or more inputs, broadcast together.
template <Tensor (*F)(const Tensor&, const Tensor&)>
Tensor fold(const NodeArgs& a) {
  Tensor r = a.input(0);
  for (size_t i = 1; i < a.num_inputs(); ++i) r = F(r, a.input(i));
  return r;
}
Tensor add2(const Tensor& x, const Tensor& y) { return add(x, y); }
Outs min_op(const NodeArgs& a) { return {fold<minimum>(a)}; }
Outs max_op(const NodeArgs& a) { return {fold<maximum>(a)}; }
Outs sum_op(const NodeArgs& a) { return {fold<add2>(a)}; }
Outs mean_op(const NodeArgs& a) { return {div(fold<add2>(a), static_cast<double>(a.num_inputs()))}; }

// Clip's bounds: attributes min/max before opset 11, optional scalar inputs after. min > max gives max
// everywhere (the spec's rule).
Outs clip_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const double inf = std::numeric_limits<double>::infinity();
  double lo = -inf, hi = inf;
  if (a.opset() < 11) {
    lo = a.attr_float("min", -std::numeric_limits<float>::max());
    hi = a.attr_float("max", std::numeric_limits<float>::max());
  } else {
    if (a.has_input(1)) lo = scalar_value(a, 1);
    if (a.has_input(2)) hi = scalar_value(a, 2);
  }
  if (lo > hi) lo = hi;
  if (!x.is_floating_point()) {
    // Bounds an int64 can hold: an infinite one would not convert.
    lo = std::max(lo, -9.2e18), hi = std::min(hi, 9.2e18);
  }
  return {clamp(x, lo, hi)};
}

// ---- math ---------------------------------------------------------------------
Outs sqrt_op(const NodeArgs& a) { return {sqrt(a.input(0))}; }
Outs exp_op(const NodeArgs& a) { return {exp(a.input(0))}; }
Outs log_op(const NodeArgs& a) { return {log(a.input(0))}; }
Outs sin_op(const NodeArgs& a) { return {sin(a.input(0))}; }
Outs cos_op(const NodeArgs& a) { return {cos(a.input(0))}; }
Outs tanh_op(const NodeArgs& a) { return {tanh(a.input(0))}; }
// Derivatives, term by term: tan' = 1 + tan^2, asin' = 1/sqrt(1 - x^2), acos' = -asin', atan' = 1/(1 + x^2),
// sinh' = cosh, cosh' = sinh, asinh' = 1/sqrt(x^2 + 1), acosh' = 1/sqrt(x^2 - 1), atanh' = 1/(1 - x^2),
// erf' = 2/sqrt(pi) exp(-x^2).
Outs tan_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Tan>(a.input(0), [](const Tensor&, const Tensor& y) { return add(square(y), 1.0); })};
}
Outs asin_op(const NodeArgs& a) {
  return {
      unary_with_grad<fn::Asin>(a.input(0), [](const Tensor& x, const Tensor&) { return rsqrt(sub(1.0, square(x))); })};
}
Outs acos_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Acos>(a.input(0),
                                    [](const Tensor& x, const Tensor&) { return neg(rsqrt(sub(1.0, square(x)))); })};
}
Outs atan_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Atan>(a.input(0),
                                    [](const Tensor& x, const Tensor&) { return div(1.0, add(square(x), 1.0)); })};
}
Outs sinh_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Sinh>(a.input(0), [](const Tensor& x, const Tensor&) { return run_unary<fn::Cosh>(x); })};
}
Outs cosh_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Cosh>(a.input(0), [](const Tensor& x, const Tensor&) { return run_unary<fn::Sinh>(x); })};
}
Outs asinh_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Asinh>(a.input(0),
                                     [](const Tensor& x, const Tensor&) { return rsqrt(add(square(x), 1.0)); })};
}
Outs acosh_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Acosh>(a.input(0),
                                     [](const Tensor& x, const Tensor&) { return rsqrt(sub(square(x), 1.0)); })};
}
Outs atanh_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Atanh>(a.input(0),
                                     [](const Tensor& x, const Tensor&) { return div(1.0, sub(1.0, square(x))); })};
}
Outs erf_op(const NodeArgs& a) {
  return {unary_with_grad<fn::Erf>(
      a.input(0), [](const Tensor& x, const Tensor&) { return mul(exp(neg(square(x))), 1.1283791670955126); })};
}
// Piecewise constant: no gradient flows through (as PyTorch's floor, ceil, round, sign).
Outs floor_op(const NodeArgs& a) { return {run_unary<fn::Floor>(a.input(0))}; }
Outs ceil_op(const NodeArgs& a) { return {run_unary<fn::Ceil>(a.input(0))}; }
Outs round_op(const NodeArgs& a) { return {run_unary<fn::Round>(a.input(0))}; }
Outs sign_op(const NodeArgs& a) { return {run_unary<fn::Sign>(a.input(0))}; }

// ---- comparison and logic -----------------------------------------------------
Tensor rhs(const NodeArgs& a) { return legacy_broadcast(a, a.input(0), a.input(1)); }
Outs equal_op(const NodeArgs& a) { return {eq(a.input(0), rhs(a))}; }
Outs less_op(const NodeArgs& a) { return {lt(a.input(0), rhs(a))}; }
Outs greater_op(const NodeArgs& a) { return {gt(a.input(0), rhs(a))}; }
Outs less_equal_op(const NodeArgs& a) { return {le(a.input(0), rhs(a))}; }
Outs greater_equal_op(const NodeArgs& a) { return {ge(a.input(0), rhs(a))}; }
Outs not_op(const NodeArgs& a) { return {logical_not(a.input(0))}; }
Outs and_op(const NodeArgs& a) { return {logical_and(a.input(0), rhs(a))}; }
Outs or_op(const NodeArgs& a) { return {logical_or(a.input(0), rhs(a))}; }
Outs xor_op(const NodeArgs& a) { return {ne(a.input(0).to(kBool), rhs(a).to(kBool))}; }
Outs where_op(const NodeArgs& a) {
  const Tensor &x = a.input(1), &y = a.input(2);
  const DType dt = promote_types(x.dtype(), y.dtype());
  return {where(a.input(0).to(kBool), x.to(dt), y.to(dt))};
}
Outs isnan_op(const NodeArgs& a) { return {ne(a.input(0), a.input(0))}; }
Outs isinf_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const double inf = std::numeric_limits<double>::infinity();
  const bool pos = a.attr_int("detect_positive", 1) != 0, neg_ = a.attr_int("detect_negative", 1) != 0;
  Tensor r = zeros(x.shape(), TensorOptions(kBool, x.device()));
  if (!x.is_floating_point()) return {r};
  if (pos) r = logical_or(r, eq(x, inf));
  if (neg_) r = logical_or(r, eq(x, -inf));
  return {r};
}
Outs bitshift_op(const NodeArgs& a) {
  const std::string dir = a.attr_string("direction");
  if (dir != "LEFT" && dir != "RIGHT") a.invalid("direction must be LEFT or RIGHT, got '" + dir + "'");
  return {run_binary<fn::BitShift>(a.input(0), a.input(1), dir == "LEFT" ? 1.0 : 0.0)};
}

}  // namespace

void register_elementwise_ops(OpTable& t) {
  t.add("Add", add_op);
  t.add("Sub", sub_op);
  t.add("Mul", mul_op);
  t.add("Div", div_op);
  t.add("Pow", pow_op);
  t.add("Mod", mod_op);
  t.add("Neg", neg_op);
  t.add("Abs", abs_op);
  t.add("Reciprocal", reciprocal_op);
  t.add("Min", min_op);
  t.add("Max", max_op);
  t.add("Sum", sum_op);
  t.add("Mean", mean_op);
  t.add("Clip", clip_op);
  t.add("Sqrt", sqrt_op);
  t.add("Exp", exp_op);
  t.add("Log", log_op);
  t.add("Sin", sin_op);
  t.add("Cos", cos_op);
  t.add("Tan", tan_op);
  t.add("Asin", asin_op);
  t.add("Acos", acos_op);
  t.add("Atan", atan_op);
  t.add("Sinh", sinh_op);
  t.add("Cosh", cosh_op);
  t.add("Tanh", tanh_op);
  t.add("Asinh", asinh_op);
  t.add("Acosh", acosh_op);
  t.add("Atanh", atanh_op);
  t.add("Erf", erf_op);
  t.add("Floor", floor_op);
  t.add("Ceil", ceil_op);
  t.add("Round", round_op);
  t.add("Sign", sign_op);
  t.add("Equal", equal_op);
  t.add("Less", less_op);
  t.add("Greater", greater_op);
  t.add("LessOrEqual", less_equal_op);
  t.add("GreaterOrEqual", greater_equal_op);
  t.add("Not", not_op);
  t.add("And", and_op);
  t.add("Or", or_op);
  t.add("Xor", xor_op);
  t.add("Where", where_op);
  t.add("IsNaN", isnan_op);
  t.add("IsInf", isinf_op);
  t.add("BitShift", bitshift_op);
}

}  // namespace ember::onnx::detail
