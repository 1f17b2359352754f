// CUDA kernels of ops/dropout.cpp: fused dropout (keep-mask and scaled
// output in one pass) and its backward. One thread per Philox counter: the
// counter's four 32-bit words decide elements 4c .. 4c+3, exactly as the CPU
// kernel's lanes do, so a seed drops the same elements on both devices.
#include <cmath>

#include <ember/core/dtype_dispatch.h>
#include <ember/ops/dropout.h>
#include <ember/cuda/loops.cuh>

namespace ember::cuda {
namespace {

template <class T>
__global__ void dropout_kernel_impl(const T* __restrict__ x, T* __restrict__ out, bool* __restrict__ keep, int64_t n,
                                    RandomSpec spec, uint32_t threshold, T scale) {
  const int64_t counters = (n + 3) / 4;
  const uint64_t seed = philox_seed(spec), offset = philox_offset(spec);
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += int64_t(gridDim.x) * blockDim.x) {
    const Philox4x32 r = Philox4x32::generate(seed, offset + static_cast<uint64_t>(c));
    for (int j = 0; j < 4; ++j) {
      const int64_t e = 4 * c + j;
      if (e >= n) break;
      // u = (bits >> 8) / 2^24 >= p, decided in integers as on the CPU.
      const bool k = (r.v[j] >> 8) >= threshold;
      keep[e] = k;
      out[e] = x[e] * (k ? scale : T(0));
    }
  }
}

template <class T>
struct MaskedScale {
  T scale;
  EMBER_HD T operator()(T g, bool k) const { return g * (k ? scale : T(0)); }
};

void cuda_dropout(const Tensor& xt, Tensor& outt, Tensor& keept, const RandomSpec& spec, double p) {
  const int64_t n = xt.numel();
  if (n == 0) return;
  const uint32_t threshold = dropout_threshold(p);
  dispatch_floating(xt.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(dropout_kernel_impl<T>, blocks_for((n + 3) / 4, 256, 4096), 256, 0, xt.device().index,
                      static_cast<const T*>(xt.data_ptr()), static_cast<T*>(outt.data_ptr()),
                      static_cast<bool*>(keept.data_ptr()), n, spec, threshold, static_cast<T>(1.0 / (1.0 - p)));
  });
}

void cuda_masked_scale(const Tensor& g, const Tensor& keep, Tensor& dx, double scale) {
  dispatch_floating(g.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    map<T, T, bool>(dx, {&g, &keep}, MaskedScale<T>{static_cast<T>(scale)});
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(dropout_kernel, CUDA, cuda_dropout);
EMBER_REGISTER_KERNEL(masked_scale_kernel, CUDA, cuda_masked_scale);

}  // namespace ember::cuda
