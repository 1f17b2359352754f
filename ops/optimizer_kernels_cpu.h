// The CPU optimizer kernels' shared pieces (internal to ops/): the float32 /
// float64 Adam loop, which the 16-bit step runs on float32 copies of a block
// (so both compute the same formula in the same order), the float64 sum of
// squares of one chunk, and the 16-bit entry points
// (ops/optimizer_kernels_half.cpp) that ops/optimizer_kernels.cpp calls and
// registers.
#pragma once

#include <cmath>
#include <cstdint>

#include <ember/ops/optimizer_kernels.h>

namespace ember::optim {

// Elements [lo, hi) of one step. A function of its own, on restrict pointers
// and with the decay branch a template argument, so that GCC vectorises it:
// inside the pool's lambda, through captured references, it does not, and
// the step runs at the speed of scalar sqrt and division, not of memory.
template <class T, bool kDecoupled>
inline void adam_range(int64_t lo, int64_t hi, T* __restrict pp, const T* __restrict gp, T* __restrict mp,
                       T* __restrict vp, T b1, T b2, T eps, T step_size, T bc2_sqrt, T wd, T decay) {
  for (int64_t i = lo; i < hi; ++i) {
    T grad = gp[i];
    T param = pp[i];
    if constexpr (kDecoupled)
      param *= decay;
    else
      grad += wd * param;
    mp[i] = b1 * mp[i] + (T(1) - b1) * grad;
    vp[i] = b2 * vp[i] + (T(1) - b2) * grad * grad;
    pp[i] = param - step_size * mp[i] / (std::sqrt(vp[i]) / bc2_sqrt + eps);
  }
}

// adam_range for one step of AdamStep s, in T: its scalars rounded from
// float64 once (as cuda/optimizer.cu's AdamScalars<T> rounds them), the
// decay branch chosen; called as step(lo, hi, p, g, m, v).
template <class T>
inline auto adam_stepper(const AdamStep& s) {
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2), eps = static_cast<T>(s.eps);
  const T step_size = static_cast<T>(s.lr / s.bias_correction1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(s.bias_correction2));
  const T wd = static_cast<T>(s.weight_decay), decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
  const auto range = s.decoupled ? adam_range<T, true> : adam_range<T, false>;
  return [=](int64_t lo, int64_t hi, T* pp, const T* gp, T* mp, T* vp) {
    range(lo, hi, pp, gp, mp, vp, b1, b2, eps, step_size, bc2_sqrt, wd, decay);
  };
}

// One chunk's sum of squares, in float64, in vector lanes. A function of its
// own on a restrict pointer: written inside the pool's lambda, GCC 12
// vectorised the loop with gathers, at a tenth of the speed of memory.
template <class T>
inline double sum_squares_range(const T* __restrict x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

/// The Adam/AdamW step of a bfloat16 or float16 parameter.
void cpu_adam_half(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s);
/// The SGD step of a bfloat16 or float16 parameter (sgd_kernel's CPU kernel).
void cpu_sgd_half(Tensor& p, const Tensor& g, Tensor& buf, const SGDStep& s);
/// The float64 sum of squares of elements [begin, end) of a contiguous
/// bfloat16 or float16 tensor.
double sum_squares_half(const Tensor& x, int64_t begin, int64_t end);

}  // namespace ember::optim
