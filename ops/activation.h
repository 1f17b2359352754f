/// \file
/// Activation functions, each one fused pass forward and one backward.
#pragma once

#include <string>

#include <ember/core/tensor.h>

namespace ember {

/// max(x, 0); the gradient at 0 is 0, as in PyTorch.
Tensor relu(const Tensor& x);
/// 1 / (1 + exp(-x)), computed without overflow.
Tensor sigmoid(const Tensor& x);
/// Hyperbolic tangent.
Tensor tanh(const Tensor& x);
/// GELU's two forms: x * Phi(x) with the exact erf (None), or PyTorch's
/// approximate="tanh" form (Tanh).
enum class GeluApproximation { None, Tanh };
/// The form PyTorch names "none" or "tanh" (flags, configs); ValueError
/// naming the choices otherwise.
GeluApproximation gelu_approximation(const std::string& name);
/// PyTorch's name of the form: "none" or "tanh".
const char* gelu_approximation_name(GeluApproximation a);
/// x * Phi(x), exact or in the tanh form.
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
/// The same with the form as PyTorch spells it, gelu(x, "tanh").
Tensor gelu(const Tensor& x, const std::string& approximate);
/// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
///@{
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor silu(const Tensor& x);
///@}

}  // namespace ember
