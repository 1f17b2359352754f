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

/// The nonlinearity a gain is computed for (torch.nn.init's names).
enum class Nonlinearity {
  Linear,
  Conv1d,
  Conv2d,
  Conv3d,
  ConvTranspose1d,
  ConvTranspose2d,
  ConvTranspose3d,
  Sigmoid,
  Tanh,
  ReLU,
  LeakyReLU,
  SELU
};
/// PyTorch's spelling ("linear", "conv2d", "conv_transpose2d", "sigmoid",
/// "tanh", "relu", "leaky_relu", "selu") to the enum, for flags and configs;
/// ValueError naming the choices otherwise.
Nonlinearity nonlinearity(const std::string& name);
/// The enum's PyTorch spelling.
const char* nonlinearity_name(Nonlinearity nl);

/// Which fan a Kaiming init preserves the variance of: the forward pass's
/// (FanIn) or the backward pass's (FanOut).
enum class FanMode { FanIn, FanOut };
/// "fan_in" or "fan_out" to the enum; ValueError otherwise.
FanMode fan_mode(const std::string& name);
/// "fan_in" or "fan_out".
const char* fan_mode_name(FanMode mode);

/// (fan_in, fan_out) of a weight: (in, out) of a (out, in) matrix, times the receptive field for
/// convolutions (PyTorch's rule).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);
/// gain for a nonlinearity: linear, convolutions and sigmoid 1, tanh 5/3,
/// relu sqrt 2, leaky_relu sqrt(2 / (1 + param^2)), selu 3/4.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

/// While one lives, the fills below leave their tensor as it is, on this
/// thread: a model built only to receive loaded weights is not initialised
/// first (PyTorch's torch.nn.utils.skip_init). Its parameters hold whatever
/// their memory held until the load replaces them; a large tensor's pages
/// are not touched, so they cost no memory and no time (a GPT-2 1.5B loads
/// without a random 6 GB copy first). Nests.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
  /// Whether a guard is alive on this thread.
  static bool active();
};

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
/// std = gain / sqrt(fan), the gain as calculate_gain with a its param
/// (the negative slope for LeakyReLU).
///@{
Tensor& kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::FanIn,
                         Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* gen = nullptr);
///@}

}  // namespace ember::nn::init
