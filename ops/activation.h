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
/// approximate = "none": x * Phi(x) with the exact erf; "tanh": PyTorch's
/// approximate="tanh" form. Other strings throw ValueError.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
/// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
///@{
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor silu(const Tensor& x);
///@}

}  // namespace ember
