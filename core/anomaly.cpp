// Anomaly mode: the switch, the finite check over strided tensors, and the
// per-kernel-call check the kernel tables run when it is on.
#include <ember/core/anomaly.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include <ember/core/half.h>
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

// True when n contiguous values are all finite. A value is NaN or infinite
// exactly when its exponent bits are all ones. Checked block by block
// without branches, so the loop vectorises (an element-by-element isfinite
// loop with an early exit made anomaly mode cost a large part of a training
// step: docs/PERFORMANCE.md, "Figures behind the code's comments").
// The exponent field of each floating type, and its bits as an unsigned
// integer of the same size.
template <class T>
constexpr auto exponent_mask() {
  if constexpr (std::is_same_v<T, bfloat16>)
    return uint16_t{0x7f80};
  else if constexpr (std::is_same_v<T, float16>)
    return uint16_t{0x7c00};
  else if constexpr (sizeof(T) == 4)
    return uint32_t{0x7f800000u};
  else
    return uint64_t{0x7ff0000000000000ull};
}
template <class T>
bool finite_value(T v) {
  if constexpr (is_half_v<T>)
    return std::isfinite(static_cast<float>(v));
  else
    return std::isfinite(v);
}

template <class T>
bool run_all_finite(const T* p, int64_t n) {
  constexpr auto kExp = exponent_mask<T>();
  using Bits = std::remove_const_t<decltype(kExp)>;
  static_assert(sizeof(Bits) == sizeof(T));
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    // The largest exponent field in the block is all ones exactly when a
    // value is non-finite; an unsigned max reduction vectorises.
    Bits m = 0;
#pragma omp simd reduction(max : m)
    for (int64_t i = start; i < end; ++i) {
      Bits b;
      std::memcpy(&b, p + i, sizeof b);
      m = std::max<Bits>(m, b & kExp);
    }
    if (m == kExp) return false;
  }
  return true;
}

// Walks the strided elements of t (any layout, any number of dims) and stops
// at the first run holding a non-finite value.
template <class T>
bool strided_all_finite(const T* base, const Shape& full_shape, const Shape& full_strides) {
  // Every element once, in any order: drop broadcast (stride 0) and size-1
  // dims, and put the smallest stride innermost, so a transposed or expanded
  // view is read as contiguous runs rather than element by element.
  Shape shape, strides;
  for (int d = 0; d < full_shape.size(); ++d)
    if (full_shape[d] > 1 && full_strides[d] != 0) {
      int pos = shape.size();
      shape.push_back(full_shape[d]);
      strides.push_back(full_strides[d]);
      for (; pos > 0 && strides[pos - 1] < strides[pos]; --pos) {
        std::swap(shape[pos - 1], shape[pos]);
        std::swap(strides[pos - 1], strides[pos]);
      }
    }
  const int nd = shape.size();
  if (nd == 0) return finite_value(*base);
  int64_t idx[kMaxDims] = {};
  const int64_t inner = shape[nd - 1], inner_stride = strides[nd - 1];
  for (;;) {
    const T* p = base;
    for (int d = 0; d + 1 < nd; ++d) p += idx[d] * strides[d];
    if (inner_stride == 1) {
      if (!run_all_finite(p, inner)) return false;
    } else {
      for (int64_t i = 0; i < inner; ++i)
        if (!finite_value(p[i * inner_stride])) return false;
    }
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
  // Each floating dtype read as itself: the bits of a 16-bit tensor are not
  // those of a float32 or float64 one.
  const auto check = [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.data_ptr());
    return t.is_contiguous() ? run_all_finite(p, t.numel()) : strided_all_finite(p, t.shape(), t.strides());
  };
  switch (t.dtype()) {
    case DType::Float32:
      return check(float{});
    case DType::BFloat16:
      return check(bfloat16{});
    case DType::Float16:
      return check(float16{});
    default:
      return check(double{});
  }
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
