// Autocast regions (core/autocast.h): per-thread state and the op table.
#include <ember/core/autocast.h>

#include <cstring>

#include <ember/core/error.h>
#include <ember/core/tensor.h>

namespace ember {

namespace detail {
thread_local bool t_autocast_any = false;
}  // namespace detail

namespace {
// Per device type (CPU, CUDA): on/off and dtype; suspended by AutocastSuspend.
struct State {
  bool enabled = false;
  DType dtype = DType::BFloat16;
};
thread_local State t_state[2];
thread_local bool t_suspended = false;

State& state(DeviceType d) { return t_state[d == DeviceType::CPU ? 0 : 1]; }
void refresh() { detail::t_autocast_any = !t_suspended && (t_state[0].enabled || t_state[1].enabled); }
}  // namespace

const std::vector<std::pair<const char*, AutocastPolicy>>& autocast_table() {
  // PyTorch's autocast lists (torch/csrc/autocast_mode.cpp), for the ops
  // Ember has: lower precision for the GEMM-shaped ops, float32 for the
  // ones whose range or accumulation needs it.
  static const std::vector<std::pair<const char*, AutocastPolicy>> table = {
      {"matmul", AutocastPolicy::LowerPrecision},
      {"mm", AutocastPolicy::LowerPrecision},
      {"bmm", AutocastPolicy::LowerPrecision},
      {"linear", AutocastPolicy::LowerPrecision},
      {"conv2d", AutocastPolicy::LowerPrecision},
      {"multi_head_attention", AutocastPolicy::LowerPrecision},
      {"multi_head_self_attention", AutocastPolicy::LowerPrecision},
      {"softmax", AutocastPolicy::Float32},
      {"log_softmax", AutocastPolicy::Float32},
      {"layer_norm", AutocastPolicy::Float32},
      {"mse_loss", AutocastPolicy::Float32},
      {"cross_entropy", AutocastPolicy::Float32},
      {"nll_loss", AutocastPolicy::Float32},
      {"binary_cross_entropy_with_logits", AutocastPolicy::Float32},
      {"sum", AutocastPolicy::Float32},
      {"mean", AutocastPolicy::Float32},
      {"exp", AutocastPolicy::Float32},
      {"log", AutocastPolicy::Float32},
  };
  return table;
}

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : device_(device) {
  EMBER_CHECK(!enabled || is_half(dtype), DTypeError, "autocast: the region's dtype must be bfloat16 or float16, got ",
              dtype_name(dtype));
  State& s = state(device);
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
  refresh();
}

AutocastGuard::~AutocastGuard() {
  State& s = state(device_);
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  refresh();
}

bool autocast_enabled(DeviceType device) { return state(device).enabled; }
DType autocast_dtype(DeviceType device) { return state(device).dtype; }

AutocastSuspend::AutocastSuspend() : prev_(t_suspended) {
  t_suspended = true;
  refresh();
}
AutocastSuspend::~AutocastSuspend() {
  t_suspended = prev_;
  refresh();
}

std::optional<DType> detail::autocast_dtype_for_slow(const char* op, const Tensor& t) {
  if (!t.defined()) return std::nullopt;
  const State& s = state(t.device().type);
  if (!s.enabled) return std::nullopt;
  for (const auto& [name, policy] : autocast_table())
    if (std::strcmp(name, op) == 0) return policy == AutocastPolicy::LowerPrecision ? s.dtype : DType::Float32;
  return std::nullopt;
}

Tensor autocast_cast(const Tensor& t, DType dt) {
  // PyTorch's eligibility: floating and not float64 (a float64 tensor is
  // never cast, either way).
  const bool eligible = t.defined() && t.is_floating_point() && t.dtype() != DType::Float64;
  return eligible && t.dtype() != dt ? t.to(dt) : t;
}

}  // namespace ember
