/// \file
/// Elementwise loops over an ElementwisePlan, for every pointwise kernel of
/// the backend (copy, fill, the functor ops, where, masked_fill, dropout's
/// backward): a contiguous fast path that moves 4 elements per thread with
/// one 16-byte access per operand when every operand is aligned (float32;
/// narrower for other dtypes), and a strided fallback that unravels each
/// index through the plan (broadcast operands have stride 0). Grid-stride
/// loops, so any size and any grid cap are correct; tails run scalar.
#pragma once

#include <array>
#include <utility>

#include <ember/core/elementwise_plan.h>
#include <ember/core/hostdevice.h>
#include <ember/cuda/common.h>

namespace ember::cuda {

inline constexpr int kThreads = 256;
inline constexpr int kVec = 4;

/// The plan in plain arrays with strides in bytes: what a kernel receives.
template <int N>
struct Geometry {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
};

template <int N>
struct Operands {
  char* p[N];
};

template <class T, int V>
struct alignas(sizeof(T) * V) VecOf {
  T v[V];
};

/// out = f(in...) at byte offsets off[0..N).
template <class Out, class... In, class F, size_t... I>
__device__ __forceinline__ void apply_at(const Operands<sizeof...(In) + 1>& ops, const int64_t* off, const F& f,
                                         std::index_sequence<I...>) {
  *reinterpret_cast<Out*>(ops.p[0] + off[0]) = f(*reinterpret_cast<const In*>(ops.p[I + 1] + off[I + 1])...);
}

template <class Out, class... In, class F, size_t... I>
__device__ __forceinline__ void apply_vec(const Operands<sizeof...(In) + 1>& ops, int64_t i, const F& f,
                                          std::index_sequence<I...>) {
  // One aligned vector load per input, V results, one vector store.
  const std::tuple<VecOf<In, kVec>...> in{*reinterpret_cast<const VecOf<In, kVec>*>(ops.p[I + 1] + i * sizeof(In))...};
  VecOf<Out, kVec> o;
#pragma unroll
  for (int j = 0; j < kVec; ++j) o.v[j] = f(std::get<I>(in).v[j]...);
  *reinterpret_cast<VecOf<Out, kVec>*>(ops.p[0] + i * sizeof(Out)) = o;
}

template <class Out, class F, class... In>
__global__ void map_contiguous_kernel(int64_t n, Operands<sizeof...(In) + 1> ops, F f, bool vectorised) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kVec;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec; i < n; i += stride) {
    if (vectorised && i + kVec <= n) {
      apply_vec<Out, In...>(ops, i, f, std::index_sequence_for<In...>{});
    } else {
      for (int64_t e = i; e < n && e < i + kVec; ++e) {
        int64_t off[N];
        off[0] = e * int64_t(sizeof(Out));
        const int64_t sizes[] = {int64_t(sizeof(In))..., 0};
        for (int k = 1; k < N; ++k) off[k] = e * sizes[k - 1];
        apply_at<Out, In...>(ops, off, f, std::index_sequence_for<In...>{});
      }
    }
  }
}

template <class Out, class F, class... In>
__global__ void map_strided_kernel(int64_t n, Geometry<sizeof...(In) + 1> g, Operands<sizeof...(In) + 1> ops, F f) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[N];
    for (int k = 0; k < N; ++k) off[k] = 0;
    int64_t rem = i;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % g.sizes[d];
      rem /= g.sizes[d];
      for (int k = 0; k < N; ++k) off[k] += idx * g.strides[k][d];
    }
    apply_at<Out, In...>(ops, off, f, std::index_sequence_for<In...>{});
  }
}

/// out = f(ins...) elementwise on out's device; every input already has
/// out's shape (broadcast views allowed) and the element types Out, In....
template <class Out, class... In, class F>
void map(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  std::array<const Tensor*, N> all;
  all[0] = &out;
  for (size_t k = 0; k < ins.size(); ++k) all[k + 1] = ins[k];
  const ElementwisePlan<N> plan = make_plan<N>(all);
  Operands<N> ops;
  const int64_t elsize[N] = {int64_t(sizeof(Out)), int64_t(sizeof(In))...};
  bool aligned = true;
  for (int k = 0; k < N; ++k) {
    ops.p[k] = static_cast<char*>(all[k]->data_ptr());
    if (reinterpret_cast<uintptr_t>(ops.p[k]) % (elsize[k] * kVec) != 0) aligned = false;
  }
  const int device = out.device().index;
  if (plan.contiguous()) {
    EMBER_CUDA_LAUNCH((map_contiguous_kernel<Out, F, In...>), blocks_for((n + kVec - 1) / kVec, kThreads, 8192),
                      kThreads, 0, device, n, ops, f, aligned);
    return;
  }
  Geometry<N> g;
  g.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) {
    g.sizes[d] = plan.sizes[d];
    for (int k = 0; k < N; ++k) g.strides[k][d] = plan.strides[k][d] * elsize[k];
  }
  EMBER_CUDA_LAUNCH((map_strided_kernel<Out, F, In...>), blocks_for(n, kThreads, 8192), kThreads, 0, device, n, g, ops,
                    f);
}

/// map as the Loops of ops/pointwise_kernels.h: the pointwise kernels (and
/// users' functors, ops/pointwise_register.h) over this backend's loop.
struct CudaLoops {
  template <class Out, class... In, class F>
  static void map(Tensor& out, const std::array<const Tensor*, sizeof...(In)>& ins, const F& f) {
    cuda::map<Out, In...>(out, ins, f);
  }
};

}  // namespace ember::cuda
