// CUDA kernel of optim/optimizer.cpp: the fused Adam/AdamW step, one pass
// over p, g, m, v (four loads, three stores per element). The formula is the
// CPU kernel's, term by term (optim/adam_kernel.h).
#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/functors.h>
#include <ember/optim/adam_kernel.h>

namespace ember::cuda {
namespace {

template <class T>
__global__ void adam_kernel_impl(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                                 int64_t n, T b1, T b2, T eps, T step_size, T bc2_sqrt, T wd, T decay,
                                 bool decoupled) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T grad = g[i];
    T param = p[i];
    if (decoupled) param *= decay;  // AdamW: decay the weight itself
    else grad += wd * param;        // Adam: L2 through the gradient
    const T mi = b1 * m[i] + (T(1) - b1) * grad;
    const T vi = b2 * v[i] + (T(1) - b2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    p[i] = param - step_size * mi / (fn::sqrt_(vi) / bc2_sqrt + eps);
  }
}

void cuda_adam(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const optim::AdamStep& s) {
  const int64_t n = p.numel();
  if (n == 0) return;
  dispatch_floating(p.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(adam_kernel_impl<T>, blocks_for(n, 256, 8192), 256, 0, p.device().index,
                      static_cast<T*>(p.data_ptr()), static_cast<const T*>(g.data_ptr()), static_cast<T*>(m.data_ptr()),
                      static_cast<T*>(v.data_ptr()), n, static_cast<T>(s.beta1), static_cast<T>(s.beta2),
                      static_cast<T>(s.eps), static_cast<T>(s.lr / s.bias_correction1),
                      static_cast<T>(std::sqrt(s.bias_correction2)), static_cast<T>(s.weight_decay),
                      static_cast<T>(1.0 - s.lr * s.weight_decay), s.decoupled);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(optim::adam_kernel, CUDA, cuda_adam);

}  // namespace ember::cuda
