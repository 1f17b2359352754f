// ONNX import: activation functions, composed from Ember's differentiable
// ops where Ember has no fused one.
//
// The exponential branches (Elu, Selu, Celu) take exp of min(x, 0): where()
// passes a zero gradient to the branch it did not pick, and zero times the
// exp of a large positive x would be 0 * inf = NaN.
#include <limits>

#include <ember/onnx/import_helpers.h>
#include <ember/ops/activation.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

Tensor neg_part(const Tensor& x) { return clamp(x, -std::numeric_limits<double>::infinity(), 0.0); }

// alpha (exp(min(x, 0) / scale) - 1) where x <= 0, x elsewhere.
Tensor elu_like(const Tensor& x, double alpha, double scale) {
  const Tensor e = sub(exp(div(neg_part(x), scale)), 1.0);
  return where(gt(x, 0.0), x, mul(e, alpha));
}

Outs relu_op(const NodeArgs& a) { return {relu(a.input(0))}; }
Outs sigmoid_op(const NodeArgs& a) { return {sigmoid(a.input(0))}; }
Outs leaky_relu_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  return {where(lt(x, 0.0), mul(x, a.attr_float("alpha", 0.01f)), x)};
}
Outs elu_op(const NodeArgs& a) { return {elu_like(a.input(0), a.attr_float("alpha", 1.0f), 1.0)}; }
Outs celu_op(const NodeArgs& a) {
  const double alpha = a.attr_float("alpha", 1.0f);
  return {elu_like(a.input(0), alpha, alpha)};
}
Outs selu_op(const NodeArgs& a) {
  const double alpha = a.attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = a.attr_float("gamma", 1.05070102214813232421875f);
  return {mul(elu_like(a.input(0), alpha, 1.0), gamma)};
}
// clamp(alpha x + beta, 0, 1); HardSwish is x times it with alpha = 1/6, beta = 1/2.
Outs hard_sigmoid_op(const NodeArgs& a) {
  return {clamp(add(mul(a.input(0), a.attr_float("alpha", 0.2f)), a.attr_float("beta", 0.5f)), 0.0, 1.0)};
}
Outs hard_swish_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  return {mul(x, clamp(add(div(x, 6.0), 0.5), 0.0, 1.0))};
}
// log(1 + exp(x)); Ember's softplus returns x itself above x = 20, where log1p(exp(-x)) < 2.1e-9.
Outs softplus_op(const NodeArgs& a) { return {softplus(a.input(0))}; }
Outs softsign_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  return {div(x, add(abs(x), 1.0))};
}
// Unidirectional broadcasting of the slope to X. PyTorch's PReLU(C) as exported by old converters has a
// slope of shape [C] for an input [N, C, ...]: aligned with dim 1, as PyTorch means it.
Outs prelu_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  Tensor slope = a.input(1);
  if (slope.dim() == 1 && x.dim() >= 2 && slope.size(0) == x.size(1) && slope.size(0) != x.size(-1) &&
      slope.size(0) != 1) {
    Shape s{slope.size(0)};
    for (int i = 2; i < x.dim(); ++i) s.push_back(1);
    slope = slope.reshape(s);
  }
  return {where(lt(x, 0.0), mul(x, slope), x)};
}
Outs thresholded_relu_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  return {where(gt(x, a.attr_float("alpha", 1.0f)), x, zeros_like(x))};
}
// x tanh(softplus(x)).
Outs mish_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  return {mul(x, tanh(softplus(x)))};
}
Outs gelu_op(const NodeArgs& a) {
  const std::string approx = a.attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh") a.invalid("approximate must be 'none' or 'tanh', got '" + approx + "'");
  return {gelu(a.input(0), approx)};
}
// x + bias below -lambd, x - bias above lambd, 0 between.
Outs shrink_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const double lambd = a.attr_float("lambd", 0.5f), bias = a.attr_float("bias", 0.0f);
  const Tensor z = zeros_like(x);
  Tensor r = where(lt(x, -lambd), add(x, bias), z);
  r = where(gt(x, lambd), sub(x, bias), r);
  return {r.dtype() == x.dtype() ? r : r.to(x.dtype())};
}

}  // namespace

void register_activation_ops(OpTable& t) {
  t.add("Relu", relu_op);
  t.add("Sigmoid", sigmoid_op);
  t.add("LeakyRelu", leaky_relu_op);
  t.add("Elu", elu_op);
  t.add("Celu", celu_op);
  t.add("Selu", selu_op);
  t.add("HardSigmoid", hard_sigmoid_op);
  t.add("HardSwish", hard_swish_op);
  t.add("Softplus", softplus_op);
  t.add("Softsign", softsign_op);
  t.add("PRelu", prelu_op);
  t.add("ThresholdedRelu", thresholded_relu_op);
  t.add("Mish", mish_op);
  t.add("Gelu", gelu_op);
  t.add("Shrink", shrink_op);
}

}  // namespace ember::onnx::detail
