// Anomaly mode: the switch, the finite check over strided tensors, and the
// per-kernel-call check the kernel tables run when it is on.
#include <ember/core/anomaly.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <ember/core/tensor.h>

namespace ember {

namespace detail {
std::atomic<unsigned> g_kernel_hooks{0};
}  // namespace detail

namespace {

thread_local bool t_in_check = false;

struct InCheck {
  bool prev = t_in_check;
  InCheck() { t_in_check = true; }
  ~InCheck() { t_in_check = prev; }
};

// EMBER_DETECT_ANOMALY=1: anomaly mode for the whole run.
struct EnvSwitch {
  EnvSwitch() {
    const char* e = std::getenv("EMBER_DETECT_ANOMALY");
    if (e && *e && std::string(e) != "0") detail::set_kernel_hook(detail::kHookAnomaly, true);
  }
} env_switch;

// Walks the strided elements of t (any layout, any number of dims) and stops
// at the first non-finite one.
template <class T>
bool strided_all_finite(const T* base, const Shape& shape, const Shape& strides) {
  const int nd = shape.size();
  if (nd == 0) return std::isfinite(*base);
  int64_t idx[kMaxDims] = {};
  const int64_t inner = shape[nd - 1], inner_stride = strides[nd - 1];
  for (;;) {
    const T* p = base;
    for (int d = 0; d + 1 < nd; ++d) p += idx[d] * strides[d];
    for (int64_t i = 0; i < inner; ++i)
      if (!std::isfinite(p[i * inner_stride])) return false;
    int d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return true;
  }
}

std::string describe(const Tensor& t) {
  return detail::cat_str(dtype_name(t.dtype()), " tensor of shape ", t.shape().str());
}

}  // namespace

void set_detect_anomaly(bool on) { detail::set_kernel_hook(detail::kHookAnomaly, on); }

bool in_anomaly_check() { return t_in_check; }

bool all_finite(const Tensor& t) {
  if (!t.defined() || !t.is_floating_point() || t.numel() == 0) return true;
  InCheck guard;
  if (!t.device().is_cpu()) return all_finite(t.detach().cpu());
  if (t.dtype() == DType::Float32) return strided_all_finite(static_cast<const float*>(t.data_ptr()), t.shape(), t.strides());
  return strided_all_finite(static_cast<const double*>(t.data_ptr()), t.shape(), t.strides());
}

void AnomalyCheck::input(const Tensor& t) {
  if (inputs_finite_ && !all_finite(t)) inputs_finite_ = false;
}

void AnomalyCheck::scalar(double v) {
  if (!std::isfinite(v)) inputs_finite_ = false;
}

void AnomalyCheck::output(const Tensor& t) {
  if (!inputs_finite_ || all_finite(t)) return;
  throw AnomalyError(detail::cat_str("anomaly mode: kernel '", kernel_, "' produced a non-finite value (NaN or ",
                                     "infinity) in its ", describe(t), " output from finite inputs"));
}

}  // namespace ember
