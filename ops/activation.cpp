// Activations: forward through the shared functors, backward through their
// fused backward functors (ops/functors.h), saving x or, where the
// derivative is cheaper from it, the output (sigmoid, tanh).
#include <ember/ops/activation.h>

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

Tensor relu(const Tensor& x) { return activation<fn::Relu, fn::ReluBackward>("relu", x, false); }
Tensor sigmoid(const Tensor& x) { return activation<fn::Sigmoid, fn::SigmoidBackward>("sigmoid", x, true); }
Tensor tanh(const Tensor& x) { return activation<fn::Tanh, fn::TanhBackward>("tanh", x, true); }
Tensor silu(const Tensor& x) { return activation<fn::Silu, fn::SiluBackward>("silu", x, false); }

GeluApproximation gelu_approximation(const std::string& name) {
  if (name == "none") return GeluApproximation::None;
  if (name == "tanh") return GeluApproximation::Tanh;
  throw ValueError("gelu: approximate must be \"none\" or \"tanh\", got \"" + name + "\"");
}

const char* gelu_approximation_name(GeluApproximation a) { return a == GeluApproximation::Tanh ? "tanh" : "none"; }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::Tanh) return activation<fn::GeluTanh, fn::GeluTanhBackward>("gelu", x, false);
  return activation<fn::Gelu, fn::GeluBackward>("gelu", x, false);
}

Tensor gelu(const Tensor& x, const std::string& approximate) { return gelu(x, gelu_approximation(approximate)); }

Tensor softplus(const Tensor& x, double beta, double threshold) {
  EMBER_CHECK(beta > 0, ValueError, "softplus: beta must be positive, got ", beta);
  return activation<fn::Softplus, fn::SoftplusBackward>("softplus", x, false, beta, threshold);
}

}  // namespace ember
