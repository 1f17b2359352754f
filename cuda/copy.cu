// CUDA kernels of ops/copy.cpp: copy with dtype conversion between any
// layouts, and fill. (Copies between devices are in context.cu.)
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/copy.h>
#include <ember/cuda/loops.cuh>

namespace ember::cuda {
namespace {

template <class D, class S>
struct Convert {
  EMBER_HD D operator()(S v) const { return convert_element<D, S>(v); }
};

template <class T>
struct Constant {
  T v;
  EMBER_HD T operator()() const { return v; }
};

void cuda_copy(const Tensor& src, Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && src.shape() == dst.shape()) {
    const size_t n = static_cast<size_t>(dst.numel()) * dst.element_size();
    if (n && src.data_ptr() != dst.data_ptr()) {
      profiler::add_device_launch();
      EMBER_CUDA_CHECK(
          cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice, stream(dst.device().index)));
    }
    return;
  }
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      map<D, S>(dst, {&src}, Convert<D, S>{});
    });
  });
}

void cuda_fill(Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map<T>(dst, {}, Constant<T>{static_cast<T>(value)});
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(copy_kernel, CUDA, cuda_copy);
EMBER_REGISTER_KERNEL(fill_kernel, CUDA, cuda_fill);

}  // namespace ember::cuda
