/// \file
/// Parameter initialisation as torch.nn.init: each fills a tensor in place
/// (under no-grad) and returns it. Fans follow PyTorch: for a weight of shape
/// (out, in, k...), fan_in = in * prod(k), fan_out = out * prod(k).
#pragma once

#include <string>
#include <utility>

#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember::nn::init {

/// (fan_in, fan_out) of a weight: (in, out) of a (out, in) matrix, times the receptive field for
/// convolutions (PyTorch's rule).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);
/// gain for a nonlinearity: "linear"/"sigmoid" 1, "tanh" 5/3, "relu" sqrt 2,
/// "leaky_relu" sqrt(2 / (1 + a^2)).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

/// In-place fills (under no grad), returning t: zeros, ones, a constant, U(low, high), N(mean, std).
///@{
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& constant_(Tensor& t, double value);
Tensor& uniform_(Tensor& t, double low = 0, double high = 1, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
///@}
/// Normal(mean, std) redrawn until inside [a, b].
///@{
Tensor& trunc_normal_(Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2,
                      Generator* gen = nullptr);
Tensor& xavier_uniform_(Tensor& t, double gain = 1, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1, Generator* gen = nullptr);
///@}
/// mode "fan_in" or "fan_out"; nonlinearity as calculate_gain, with a its param.
///@{
Tensor& kaiming_uniform_(Tensor& t, double a = 0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
///@}

}  // namespace ember::nn::init
