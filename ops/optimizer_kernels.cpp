// The optimizers' update kernels on the CPU (tables: ops/optimizer_kernels.h):
// the fused Adam/AdamW step, one pass over p, g, m, v per parameter, and the
// float64 sum of squares behind clip_grad_norm_. bfloat16 and float16
// parameters: ops/optimizer_kernels_half.cpp (with the fused SGD step).
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
#include <ember/ops/optimizer_kernels_cpu.h>

namespace ember::optim {

decltype(adam_kernel) adam_kernel("adam_step");
decltype(adam_multi_kernel) adam_multi_kernel("adam_step (all parameters)");
decltype(sum_squares_kernel) sum_squares_kernel("sum_squares");
decltype(sgd_kernel) sgd_kernel("sgd_step");
decltype(clip_grad_norm_kernel) clip_grad_norm_kernel("clip_grad_norm");

namespace {

void cpu_adam(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamStep& s) {
  if (is_half(p.dtype())) return cpu_adam_half(p, g, m, v, s);
  dispatch_floating(p.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    T* pp = static_cast<T*>(p.data_ptr());
    const T* gp = static_cast<const T*>(g.data_ptr());
    T* mp = static_cast<T*>(m.data_ptr());
    T* vp = static_cast<T*>(v.data_ptr());
    const auto step = adam_stepper<T>(s);
    parallel_for(0, p.numel(), 16384, [&](int64_t lo, int64_t hi) { step(lo, hi, pp, gp, mp, vp); });
  });
}

// Fixed chunks whose partial sums are added in order: the same total for any
// thread count (runs stay deterministic for a seed and thread count, and
// across thread counts here).
double cpu_sum_squares(const Tensor& x) {
  constexpr int64_t kChunk = 16384;
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
  if (is_half(x.dtype())) {
    parallel_for(0, chunks, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
        partial[static_cast<size_t>(c)] = sum_squares_half(x, begin, end);
      }
    });
  } else {
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
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

EMBER_REGISTER_KERNEL(adam_kernel, CPU, cpu_adam);
EMBER_REGISTER_KERNEL(sum_squares_kernel, CPU, cpu_sum_squares);
EMBER_REGISTER_KERNEL(sgd_kernel, CPU, cpu_sgd_half);

}  // namespace ember::optim
