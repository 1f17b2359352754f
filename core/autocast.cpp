// Autocast regions (core/autocast.h): the per-thread state, and the cast
// cache of core/autocast_cache.h, emptied when the outermost region ends.
#include <ember/core/autocast.h>
#include <ember/core/autocast_cache.h>

#include <memory>
#include <unordered_map>

#include <ember/core/autograd.h>
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

// One cached cast: what it was cast from (the parameter, weakly: an address
// reused by a new tensor must not hit) and the cast.
struct CachedCast {
  std::weak_ptr<TensorImpl> src;
  const Storage* storage;
  uint64_t version;
  int64_t offset;
  Shape shape, strides;
  Tensor cast;
};
thread_local std::unordered_map<const TensorImpl*, CachedCast> t_cast_cache;
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
  if (!t_state[0].enabled && !t_state[1].enabled) t_cast_cache.clear();  // the outermost region ended
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

Tensor autocast_param_cast(const Tensor& t, DType dt) {
  const bool cacheable = t.defined() && t.dtype() == DType::Float32 && is_half(dt) && !autograd::grad_enabled() &&
                         t.requires_grad() && t.is_leaf();
  if (!cacheable) return t;
  const TensorImpl* key = t.unsafe_impl();
  auto it = t_cast_cache.find(key);
  if (it != t_cast_cache.end()) {
    const CachedCast& c = it->second;
    if (c.src.lock() == t.impl_ptr() && c.storage == t.storage().get() && c.version == t.version() &&
        c.offset == t.offset() && c.shape == t.shape() && c.strides == t.strides() && c.cast.dtype() == dt)
      return c.cast;
  }
  Tensor cast = t.to(dt);
  t_cast_cache[key] =
      CachedCast{t.impl_ptr(), t.storage().get(), t.version(), t.offset(), t.shape(), t.strides(), cast};
  return cast;
}

size_t autocast_cache_size() { return t_cast_cache.size(); }

}  // namespace ember
