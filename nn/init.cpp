// torch.nn.init's formulas.
#include <ember/nn/init.h>

#include <cmath>

#include <ember/core/autograd.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/reduce.h>

namespace ember::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.dim() >= 2, ShapeError, "init: fan in and fan out need a tensor with at least 2 dims, got shape ",
              t.shape().str());
  int64_t receptive = 1;
  for (int i = 2; i < t.dim(); ++i) receptive *= t.size(i);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

namespace {
constexpr std::pair<Nonlinearity, const char*> kNonlinearityNames[] = {
    {Nonlinearity::Linear, "linear"},
    {Nonlinearity::Conv1d, "conv1d"},
    {Nonlinearity::Conv2d, "conv2d"},
    {Nonlinearity::Conv3d, "conv3d"},
    {Nonlinearity::ConvTranspose1d, "conv_transpose1d"},
    {Nonlinearity::ConvTranspose2d, "conv_transpose2d"},
    {Nonlinearity::ConvTranspose3d, "conv_transpose3d"},
    {Nonlinearity::Sigmoid, "sigmoid"},
    {Nonlinearity::Tanh, "tanh"},
    {Nonlinearity::ReLU, "relu"},
    {Nonlinearity::LeakyReLU, "leaky_relu"},
    {Nonlinearity::SELU, "selu"},
};
}  // namespace

Nonlinearity nonlinearity(const std::string& name) {
  std::string choices;
  for (const auto& [nl, n] : kNonlinearityNames) {
    if (name == n) return nl;
    choices += choices.empty() ? n : std::string(", ") + n;
  }
  throw ValueError("init: unsupported nonlinearity '" + name + "' (one of " + choices + ")");
}

const char* nonlinearity_name(Nonlinearity nl) {
  for (const auto& [k, n] : kNonlinearityNames)
    if (k == nl) return n;
  return "?";
}

FanMode fan_mode(const std::string& name) {
  if (name == "fan_in") return FanMode::FanIn;
  if (name == "fan_out") return FanMode::FanOut;
  throw ValueError("kaiming init: mode must be fan_in or fan_out, got '" + name + "'");
}

const char* fan_mode_name(FanMode mode) { return mode == FanMode::FanIn ? "fan_in" : "fan_out"; }

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::SELU:
      return 3.0 / 4.0;
    default:  // linear, the convolutions, sigmoid
      return 1.0;
  }
}

namespace {
thread_local int skip_init_depth = 0;
}  // namespace

SkipInitGuard::SkipInitGuard() { ++skip_init_depth; }
SkipInitGuard::~SkipInitGuard() { --skip_init_depth; }
bool SkipInitGuard::active() { return skip_init_depth > 0; }

Tensor& constant_(Tensor& t, double value) {
  if (SkipInitGuard::active()) return t;
  NoGradGuard no_grad;
  return t.fill_(value);
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  if (SkipInitGuard::active()) return t;
  NoGradGuard no_grad;
  return ember::uniform_(t, low, high, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  if (SkipInitGuard::active()) return t;
  NoGradGuard no_grad;
  return ember::normal_(t, mean, std, gen);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  EMBER_CHECK(a < b, ValueError, "trunc_normal_: a = ", a, " must be below b = ", b);
  if (SkipInitGuard::active()) return t;
  NoGradGuard no_grad;
  Tensor v = normal(t.shape(), mean, std, TensorOptions(DType::Float64), gen);
  // Redraw the values outside [a, b]; each round keeps a fixed fraction, so
  // this ends quickly (and deterministically for a given generator).
  for (int round = 0; round < 1000; ++round) {
    const Tensor out = logical_or(lt(v, a), gt(v, b));
    if (!sum(out.to(DType::Int64)).item<int64_t>()) break;
    v = where(out, normal(t.shape(), mean, std, TensorOptions(DType::Float64), gen), v);
  }
  return t.copy_(clamp(v, a, b));
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  const auto [fi, fo] = fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  const auto [fi, fo] = fan_in_and_fan_out(t);
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  const auto [fi, fo] = fan_in_and_fan_out(t);
  const double fan = static_cast<double>(mode == FanMode::FanIn ? fi : fo);
  return calculate_gain(nl, a) / std::sqrt(fan);
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator* gen) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator* gen) {
  return init::normal_(t, 0.0, kaiming_std(t, a, mode, nl), gen);
}

}  // namespace ember::nn::init
