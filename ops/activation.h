// Activation functions, each one fused pass forward and one backward.
#pragma once

#include <string>

#include <ember/core/tensor.h>

namespace ember {

Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// approximate = "none": x * Phi(x) with the exact erf; "tanh": PyTorch's
// approximate="tanh" form. Other strings throw ValueError.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor silu(const Tensor& x);

}  // namespace ember
