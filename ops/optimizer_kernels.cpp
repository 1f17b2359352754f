// The optimizers' update kernels on the CPU (tables: ops/optimizer_kernels.h):
// the fused Adam/AdamW step, one pass over p, g, m, v per parameter, and the
// float64 sum of squares behind clip_grad_norm_.
//
// Adam, step t, gradient g (PyTorch 1.13, amsgrad off):
//   Adam:  g += wd * p                 AdamW: p *= 1 - lr * wd
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <ember/ops/optimizer_kernels.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/core/dtype_dispatch.h>
#include <ember/core/parallel.h>

namespace ember::optim {

decltype(adam_kernel) adam_kernel("adam_step");
decltype(adam_multi_kernel) adam_multi_kernel("adam_step (all parameters)");
decltype(sum_squares_kernel) sum_squares_kernel("sum_squares");
decltype(clip_grad_norm_kernel) clip_grad_norm_kernel("clip_grad_norm");

namespace {

// Elements [lo, hi) of one step. A function of its own, on restrict pointers
// and with the decay branch a template argument, so that GCC vectorises it:
// inside the pool's lambda, through captured references, it does not, and
// the step runs at the speed of scalar sqrt and division, not of memory.
template <class T, bool kDecoupled>
void adam_range(int64_t lo, int64_t hi, T* __restrict pp, const T* __restrict gp, T* __restrict mp, T* __restrict vp,
                T b1, T b2, T eps, T step_size, T bc2_sqrt, T wd, T decay) {
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

void cpu_adam(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) {
  dispatch_floating(p.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    T* pp = static_cast<T*>(p.data_ptr());
    const T* gp = static_cast<const T*>(g.data_ptr());
    T* mp = static_cast<T*>(m.data_ptr());
    T* vp = static_cast<T*>(v.data_ptr());
    const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2), eps = static_cast<T>(s.eps);
    const T step_size = static_cast<T>(s.lr / s.bias_correction1);
    const T bc2_sqrt = static_cast<T>(std::sqrt(s.bias_correction2));
    const T wd = static_cast<T>(s.weight_decay), decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
    const auto range = s.decoupled ? adam_range<T, true> : adam_range<T, false>;
    parallel_for(0, p.numel(), 16384, [&](int64_t lo, int64_t hi) {
      range(lo, hi, pp, gp, mp, vp, b1, b2, eps, step_size, bc2_sqrt, wd, decay);
    });
  });
}

// One chunk's sum of squares, in float64, in vector lanes. A function of its
// own on a restrict pointer: written inside the pool's lambda, GCC 12
// vectorised the loop with gathers, at a tenth of the speed of memory.
template <class T>
double sum_squares_range(const T* __restrict x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

// Fixed chunks whose partial sums are added in order: the same total for any
// thread count (runs stay deterministic for a seed and thread count, and
// across thread counts here).
double cpu_sum_squares(const Tensor& x) {
  constexpr int64_t kChunk = 16384;
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  dispatch_floating(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    parallel_for(0, chunks, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
        partial[static_cast<size_t>(c)] = sum_squares_range(xp + begin, end - begin);
      }
    });
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

EMBER_REGISTER_KERNEL(adam_kernel, CPU, cpu_adam);
EMBER_REGISTER_KERNEL(sum_squares_kernel, CPU, cpu_sum_squares);

}  // namespace ember::optim
