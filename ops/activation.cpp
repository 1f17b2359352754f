// Activations: forward through the shared functors, backward through their
// fused backward functors (ops/functors.h), saving x or, where the
// derivative is cheaper from it, the output (sigmoid, tanh).
#include <ember/core/op.h>
#include <ember/ops/activation.h>
#include <ember/ops/onnx_lowerings.h>

#include <ember/core/autograd.h>
#include <ember/ops/pointwise.h>

namespace ember {

namespace {

// y = F(x); backward dx = FB(dy, saved) with saved = x or y.
template <class F, class FB>
Tensor activation(const char* name, const Tensor& x, bool save_output, double a = 0, double b = 0) {
  Tensor out = unary_forward<F>(x, a, b);
  if (autograd::needs_grad({x}))
    autograd::record(name, {x}, out,
                     [s = autograd::SavedTensor(save_output ? out : x), a, b](autograd::BackwardContext& ctx) {
                       ctx.set_grad(0, binary_forward<FB>(ctx.grad_output(), s.get(), a, b));
                     });
  return out;
}

}  // namespace

constexpr OpDef relu_op{.name = "relu", .onnx = lowering::unary<"Relu">};
EMBER_REGISTER_OP(relu_op);

Tensor relu(const Tensor& x) {
  return op::call_captured<relu_op>(
      [&](const auto&...) -> Tensor { return activation<fn::Relu, fn::ReluBackward>("relu", x, false); }, x);
}
constexpr OpDef sigmoid_op{.name = "sigmoid", .onnx = lowering::unary<"Sigmoid">};
EMBER_REGISTER_OP(sigmoid_op);

Tensor sigmoid(const Tensor& x) {
  return op::call_captured<sigmoid_op>(
      [&](const auto&...) -> Tensor { return activation<fn::Sigmoid, fn::SigmoidBackward>("sigmoid", x, true); }, x);
}
constexpr OpDef tanh_op{.name = "tanh", .onnx = lowering::unary<"Tanh">};
EMBER_REGISTER_OP(tanh_op);

Tensor tanh(const Tensor& x) {
  return op::call_captured<tanh_op>(
      [&](const auto&...) -> Tensor { return activation<fn::Tanh, fn::TanhBackward>("tanh", x, true); }, x);
}
// Opset 17 has no Gelu node: gelu(x) = x/2 (1 + erf(x / sqrt 2)), or with tanh,
// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch.onnx writes them.
std::string lowering::gelu_value(Graph& g, const std::string& x, DType dt, bool tanh) {
  std::string inner;
  if (tanh) {
    const std::string x3 = g.node("Pow", {x, g.scalar(3.0, dt)})[0];
    const std::string u = g.node("Add", {x, g.node("Mul", {x3, g.scalar(0.044715, dt)})[0]})[0];
    inner = g.node("Tanh", {g.node("Mul", {u, g.scalar(std::sqrt(2.0 / M_PI), dt)})[0]})[0];
  } else {
    inner = g.node("Erf", {g.node("Div", {x, g.scalar(std::sqrt(2.0), dt)})[0]})[0];
  }
  const std::string one_plus = g.node("Add", {inner, g.scalar(1.0, dt)})[0];
  return g.node("Mul", {g.node("Mul", {x, g.scalar(0.5, dt)})[0], one_plus})[0];
}

namespace {
// silu(x) = x * sigmoid(x)
void lower_silu(lowering::Graph& g, const lowering::Call& c) {
  const std::string x = g.value(c.tensor(0));
  g.bind(c.outputs[0], g.node("Mul", {x, g.node("Sigmoid", {x})[0]})[0]);
}
void lower_gelu(lowering::Graph& g, const lowering::Call& c) {
  const bool tanh = static_cast<GeluApproximation>(c.i(1)) == GeluApproximation::Tanh;
  g.bind(c.outputs[0], lowering::gelu_value(g, g.value(c.tensor(0)), c.tensor(0).dtype(), tanh));
}
// softplus(x) = log(1 + exp(beta x)) / beta; the threshold (linear above it) changes nothing in float32.
void lower_softplus(lowering::Graph& g, const lowering::Call& c) {
  const DType dt = c.tensor(0).dtype();
  const double beta = c.f(1);
  std::string x = g.value(c.tensor(0));
  if (beta == 1.0) return g.bind(c.outputs[0], g.node("Softplus", {x})[0]);
  x = g.node("Softplus", {g.node("Mul", {x, g.scalar(beta, dt)})[0]})[0];
  g.bind(c.outputs[0], g.node("Div", {x, g.scalar(beta, dt)})[0]);
}
}  // namespace

constexpr OpDef silu_op{.name = "silu", .onnx = lower_silu};
EMBER_REGISTER_OP(silu_op);

Tensor silu(const Tensor& x) {
  return op::call_captured<silu_op>(
      [&](const auto&...) -> Tensor { return activation<fn::Silu, fn::SiluBackward>("silu", x, false); }, x);
}

GeluApproximation gelu_approximation(const std::string& name) {
  if (name == "none") return GeluApproximation::None;
  if (name == "tanh") return GeluApproximation::Tanh;
  throw ValueError("gelu: approximate must be \"none\" or \"tanh\", got \"" + name + "\"");
}

const char* gelu_approximation_name(GeluApproximation a) { return a == GeluApproximation::Tanh ? "tanh" : "none"; }

constexpr OpDef gelu_op{.name = "gelu", .onnx = lower_gelu};
EMBER_REGISTER_OP(gelu_op);

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return op::call_captured<gelu_op>(
      [&](const auto&...) -> Tensor {
        if (approximate == GeluApproximation::Tanh)
          return activation<fn::GeluTanh, fn::GeluTanhBackward>("gelu", x, false);
        return activation<fn::Gelu, fn::GeluBackward>("gelu", x, false);
      },
      x, approximate);
}

Tensor gelu(const Tensor& x, const std::string& approximate) { return gelu(x, gelu_approximation(approximate)); }

constexpr OpDef softplus_op{.name = "softplus", .onnx = lower_softplus};
EMBER_REGISTER_OP(softplus_op);

Tensor softplus(const Tensor& x, double beta, double threshold) {
  return op::call_captured<softplus_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(beta > 0, ValueError, "softplus: beta must be positive, got ", beta);
        return activation<fn::Softplus, fn::SoftplusBackward>("softplus", x, false, beta, threshold);
      },
      x, beta, threshold);
}

}  // namespace ember
