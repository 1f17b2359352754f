// CUDA kernels of ops/factory.cpp: random tensors and ranges. One thread
// per Philox counter computes the same values as the CPU (random_values in
// ops/random_kernels.h), so a seed gives identical tensors on both devices;
// one thread per element of arange / linspace likewise (range_value in
// ops/range_kernels.h), on the device, so that a range needs no copy from the
// host and can be captured in a CUDA graph.
#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/random_kernels.h>
#include <ember/ops/range_kernels.h>

namespace ember::cuda {
namespace {

template <class T>
__global__ void random_kernel_impl(T* p, int64_t n, int64_t k, RandomSpec spec) {
  const int64_t counters = (n + k - 1) / k;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += int64_t(gridDim.x) * blockDim.x) {
    T v[4] = {};
    random_values<T>(spec, static_cast<uint64_t>(c), v);
    for (int64_t j = 0; j < k && k * c + j < n; ++j) p[k * c + j] = v[j];
  }
}

void cuda_random(Tensor& out, const RandomSpec& spec) {
  EMBER_CHECK(out.is_contiguous(), ValueError, "random: output must be contiguous");
  dispatch_numeric(out.dtype(), "random", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = out.numel();
    const int64_t k = (spec.kind == RandomKind::Uniform && out.dtype() == DType::Float32) ? 4 : 2;
    EMBER_CUDA_LAUNCH(random_kernel_impl<T>, blocks_for((n + k - 1) / k, 256, 4096), 256, 0, out.device().index,
                      static_cast<T*>(out.data_ptr()), n, k, spec);
  });
}

template <class T>
__global__ void range_kernel_impl(T* p, RangeSpec spec) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < spec.n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = convert_element<T, double>(range_value(spec, i));
}

void cuda_range(Tensor& out, const RangeSpec& spec) {
  EMBER_CHECK(out.is_contiguous(), ValueError, "range: output must be contiguous");
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(range_kernel_impl<T>, blocks_for(spec.n, 256, 4096), 256, 0, out.device().index,
                      static_cast<T*>(out.data_ptr()), spec);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(random_kernel, CUDA, cuda_random);
EMBER_REGISTER_KERNEL(range_kernel, CUDA, cuda_range);

}  // namespace ember::cuda
