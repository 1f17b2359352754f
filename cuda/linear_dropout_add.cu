// CUDA kernels of ops/linear_dropout_add.cpp: the elementwise half of
// linear_dropout_add, after a GEMM that ran without the bias.
//
// Forward, one pass, one thread per Philox counter as in cuda/dropout.cu
// (the counter's four words decide elements 4c .. 4c+3, so the mask is
// dropout's, on either device):
//   pre = y + b,  d = keep ? pre / (1 - p) : 0,  out = residual + d.
// Each step is rounded to the dtype the composed ops would store it in
// (pre and d to the product's dtype T, out to the residual's), so a 16-bit
// product gives the values linear, dropout and add give; the arithmetic is
// float32 for the 16-bit types.
// Backward, one pass over the rows: dpre = T(dout) * keep / (1 - p),
// written, and summed down each column into db (the bias's gradient) by
// cuda/column_sum.cuh's map_column_sum, so the sum is deterministic and
// needs no atomics.
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/dropout.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/linear_dropout_add.h>
#include <ember/cuda/column_sum.cuh>

namespace ember::cuda {
namespace {

// T: the product's dtype; R: the residual's and the result's (T, or float
// over a 16-bit T). keep null: no dropout.
template <class T, class R>
__global__ void bias_dropout_add_forward(const T* y, const T* __restrict__ bias, const R* __restrict__ res, R* out,
                                         bool* __restrict__ keep, int64_t total, int64_t n, RandomSpec spec,
                                         uint32_t threshold, opmath_t<T> scale) {
  using A = opmath_t<T>;
  const int64_t counters = (total + 3) / 4;
  const uint64_t seed = keep ? philox_seed(spec) : 0, offset = keep ? philox_offset(spec) : 0;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += int64_t(gridDim.x) * blockDim.x) {
    uint32_t bits[4] = {0, 0, 0, 0};
    if (keep) {
      const Philox4x32 r = Philox4x32::generate(seed, offset + static_cast<uint64_t>(c));
      for (int j = 0; j < 4; ++j) bits[j] = r.v[j];
    }
    for (int j = 0; j < 4; ++j) {
      const int64_t e = 4 * c + j;
      if (e >= total) break;
      // y is read before out is written: they may share storage.
      T d = bias ? T(A(y[e]) + A(bias[e % n])) : y[e];
      if (keep) {
        // u = (bits >> 8) / 2^24 >= p, decided in integers as dropout does.
        const bool k = (bits[j] >> 8) >= threshold;
        keep[e] = k;
        d = T(A(d) * (k ? scale : A(0)));
      }
      out[e] = R(opmath_t<R>(res[e]) + opmath_t<R>(d));
    }
  }
}

// dpre = T(dout) * keep / (1 - p), element i (map_column_sum's f); keep
// null: no mask.
template <class T, class R>
struct DropoutGrad {
  const R* g;
  const bool* keep;
  opmath_t<T> scale;
  __device__ T operator()(int64_t i) const {
    using A = opmath_t<T>;
    T d = T(g[i]);  // the engine's cast of add's gradient to the product's dtype
    if (keep) d = T(A(d) * (keep[i] ? scale : A(0)));
    return d;
  }
};

// Calls f(T{}, R{}) for the product's dtype t and the residual's r: r is t,
// or float32 over a 16-bit t (what linear_dropout_add hands the kernels).
template <class F>
void dispatch_pair(DType t, DType r, const char* name, F&& f) {
  dispatch_floating_and_half(t, name, [&](auto tag) {
    using T = decltype(tag);
    if (r == t) {
      f(tag, tag);
      return;
    }
    if constexpr (is_half_v<T>) {
      if (r == DType::Float32) {
        f(tag, float{});
        return;
      }
    }
    throw DTypeError(std::string(name) + ": a " + dtype_name(r) + " residual over a " + dtype_name(t) + " product");
  });
}

double keep_scale(double p) { return 1.0 / (1.0 - p); }

void cuda_bias_dropout_add(const Tensor& y, const Tensor& bias, const Tensor& residual, Tensor& out, Tensor& keep,
                           const RandomSpec& spec, double p) {
  const int64_t total = y.numel(), n = y.size(1);
  if (total == 0) return;
  const int dev = y.device().index;
  const bool drop = keep.defined();
  dispatch_pair(y.dtype(), residual.dtype(), "linear_dropout_add", [&](auto tt, auto rt) {
    using T = decltype(tt);
    using R = decltype(rt);
    EMBER_CUDA_LAUNCH((bias_dropout_add_forward<T, R>), blocks_for((total + 3) / 4, 256, 4096), 256, 0, dev,
                      static_cast<const T*>(y.data_ptr()),
                      bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr,
                      static_cast<const R*>(residual.data_ptr()), static_cast<R*>(out.data_ptr()),
                      drop ? static_cast<bool*>(keep.data_ptr()) : nullptr, total, n, spec,
                      drop ? dropout_threshold(p) : 0u, static_cast<opmath_t<T>>(drop ? keep_scale(p) : 1.0));
  });
}

void cuda_dropout_bias_backward(const Tensor& dout, const Tensor& keep, double p, Tensor& dpre, Tensor& dbias) {
  const int64_t rows = dout.size(0), n = dout.size(1);
  if (rows == 0 || n == 0) return;
  const int dev = dout.device().index;
  const DType t = dpre.defined() ? dpre.dtype() : dbias.dtype();
  dispatch_pair(t, dout.dtype(), "linear_dropout_add_backward", [&](auto tt, auto rt) {
    using T = decltype(tt);
    using R = decltype(rt);
    const DropoutGrad<T, R> f{static_cast<const R*>(dout.data_ptr()),
                              keep.defined() ? static_cast<const bool*>(keep.data_ptr()) : nullptr,
                              static_cast<opmath_t<T>>(keep.defined() ? keep_scale(p) : 1.0)};
    map_column_sum(f, dpre.defined() ? static_cast<T*>(dpre.data_ptr()) : nullptr,
                   dbias.defined() ? static_cast<T*>(dbias.data_ptr()) : nullptr, rows, n, dev);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(detail::bias_dropout_add_kernel, CUDA, cuda_bias_dropout_add);
EMBER_REGISTER_KERNEL(detail::dropout_bias_backward_kernel, CUDA, cuda_dropout_bias_backward);

}  // namespace ember::cuda
