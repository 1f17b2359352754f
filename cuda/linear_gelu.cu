// CUDA kernels of ops/linear_gelu.cpp: the elementwise half of linear_gelu,
// after a GEMM that ran without the bias.
//
// Forward, one pass: pre = y + b (written back over y: the pre-activation
// backward needs), out = gelu(pre). Backward, one pass over the rows:
// dpre = dout gelu'(pre), written, and summed down each column into db
// (the bias's gradient) by cuda/column_sum.cuh's map_column_sum, so the sum
// is deterministic and needs no atomics.
// bfloat16 and float16 compute in float32: pre is rounded once, gelu and
// gelu' are taken of the rounded pre (what a 16-bit linear then gelu see),
// and db is summed in float32 and rounded once.
#include <ember/core/dtype_dispatch.h>
#include <ember/ops/functors.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/linear_gelu.h>
#include <ember/cuda/column_sum.cuh>

namespace ember::cuda {
namespace {

template <class T, class G>
__global__ void bias_gelu_forward(T* __restrict__ pre, const T* __restrict__ bias, T* __restrict__ out, int64_t total,
                                  int64_t n) {
  using A = opmath_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const T p = bias ? T(A(pre[i]) + A(bias[i % n])) : pre[i];
    pre[i] = p;
    out[i] = T(G{}(A(p)));
  }
}

// dpre = dout gelu'(pre), element i (map_column_sum's f).
template <class T, class GB>
struct GeluGrad {
  const T* g;
  const T* pre;
  __device__ T operator()(int64_t i) const {
    using A = opmath_t<T>;
    return T(GB{}(A(g[i]), A(pre[i])));
  }
};

void cuda_bias_gelu(Tensor& pre, const Tensor& bias, Tensor& out, GeluApproximation approximate) {
  const int64_t total = pre.numel(), n = pre.size(1);
  if (total == 0) return;
  const int dev = pre.device().index;
  dispatch_floating_and_half(pre.dtype(), "linear_gelu", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(pre.data_ptr());
    const T* b = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* o = static_cast<T*>(out.data_ptr());
    if (approximate == GeluApproximation::Tanh)
      EMBER_CUDA_LAUNCH((bias_gelu_forward<T, fn::GeluTanh>), blocks_for(total, 256), 256, 0, dev, p, b, o, total, n);
    else
      EMBER_CUDA_LAUNCH((bias_gelu_forward<T, fn::Gelu>), blocks_for(total, 256), 256, 0, dev, p, b, o, total, n);
  });
}

void cuda_bias_gelu_backward(const Tensor& dout, const Tensor& pre, Tensor& dpre, Tensor& dbias,
                             GeluApproximation approximate) {
  const int64_t rows = pre.size(0), n = pre.size(1);
  if (rows == 0 || n == 0) return;  // linear_gelu runs empty products composed
  const int dev = pre.device().index;
  dispatch_floating_and_half(pre.dtype(), "linear_gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dout.data_ptr());
    const T* p = static_cast<const T*>(pre.data_ptr());
    T* d = static_cast<T*>(dpre.data_ptr());
    T* db = dbias.defined() ? static_cast<T*>(dbias.data_ptr()) : nullptr;
    if (approximate == GeluApproximation::Tanh)
      map_column_sum(GeluGrad<T, fn::GeluTanhBackward>{g, p}, d, db, rows, n, dev);
    else
      map_column_sum(GeluGrad<T, fn::GeluBackward>{g, p}, d, db, rows, n, dev);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(detail::bias_gelu_kernel, CUDA, cuda_bias_gelu);
EMBER_REGISTER_KERNEL(detail::bias_gelu_backward_kernel, CUDA, cuda_bias_gelu_backward);

}  // namespace ember::cuda
