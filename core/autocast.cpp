// Autocast regions (core/autocast.h): the per-thread state.
#include <ember/core/autocast.h>

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

Tensor autocast_cast(const Tensor& t, DType dt) {
  // PyTorch's eligibility: floating and not float64 (a float64 tensor is
  // never cast, either way).
  const bool eligible = t.defined() && t.is_floating_point() && t.dtype() != DType::Float64;
  return eligible && t.dtype() != dt ? t.to(dt) : t;
}

}  // namespace ember
