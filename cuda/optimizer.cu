// CUDA kernels of the optimizers (tables: ops/optimizer_kernels.h): the
// fused Adam/AdamW step, one pass over p, g, m, v (four loads, three stores
// per element), per parameter and for a whole parameter group in as few
// launches as possible (PyTorch's multi-tensor apply: the kernel receives up
// to kMaxTensors parameters by value and a table mapping each block to a
// chunk of one of them), and the gradient norm's sum of squares. The formula
// is the CPU kernel's, term by term. bfloat16 and float16 parameters (with
// moments of their dtype, as PyTorch keeps them) compute in float32, as the
// CPU's (ops/optimizer_kernels_half.cpp); with stochastic rounding a bfloat16
// p takes word i % 4 of Philox counter offset + i / 4, the CPU's words. The
// fused SGD step of 16-bit parameters runs the CPU's sgd_element.
#include <algorithm>
#include <type_traits>
#include <vector>

#include <ember/core/dtype_dispatch.h>
#include <ember/core/random.h>
#include <ember/cuda/common.h>
#include <ember/ops/factory.h>
#include <ember/ops/functors.h>
#include <ember/ops/optimizer_kernels.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

template <class T>
struct AdamScalars {
  T b1, b2, eps, step_size, bc2_sqrt, wd, decay;
  bool decoupled;
  // In a CUDA graph: step_size, bc2_sqrt and decay as float64 in device
  // memory, this replay's (AdamStep::device_scalars).
  const double* device = nullptr;
  bool stochastic = false;  // stochastic rounding of a bfloat16 p
  uint64_t seed = 0;        // its Philox key
};

// x stored as the parameter's T: rounded to nearest even, or for bfloat16
// with stochastic rounding by element i's random word (word i % 4 of
// counter offset + i / 4, as the CPU kernels draw them).
template <class T, class A>
__device__ __forceinline__ T round_param(A x, bool stochastic, uint64_t seed, uint64_t offset, int64_t i) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (stochastic) {
      const uint32_t r = Philox4x32::generate(seed, offset + static_cast<uint64_t>(i) / 4).v[i & 3];
      return bfloat16::from_bits(optim::bf16_bits_stochastic(x, r));
    }
  }
  return T(x);
}

// The step's scalars: as given, or this replay's from device memory,
// rounded to A as the host rounds them.
template <class A>
__device__ __forceinline__ AdamScalars<A> current(AdamScalars<A> c) {
  if (c.device) {
    c.step_size = static_cast<A>(c.device[0]);
    c.bc2_sqrt = static_cast<A>(c.device[1]);
    c.decay = static_cast<A>(c.device[2]);
  }
  return c;
}

// T: the element type of p, g, m, v; A = opmath_t<T>: the formula (float32
// for the 16-bit types: each value loaded as float32, p, m and v rounded once
// on store, as PyTorch's CUDA Adam does for 16-bit parameters).
template <class T, class A = opmath_t<T>>
__device__ __forceinline__ void adam_element(T& p, T g, T& m, T& v, const AdamScalars<A>& c, uint64_t offset,
                                             int64_t i) {
  A grad = A(g);
  A param = A(p);
  if (c.decoupled)
    param *= c.decay;  // AdamW: decay the weight itself
  else
    grad += c.wd * param;  // Adam: L2 through the gradient
  const A mi = c.b1 * A(m) + (A(1) - c.b1) * grad;
  const A vi = c.b2 * A(v) + (A(1) - c.b2) * grad * grad;
  m = T(mi);
  v = T(vi);
  p = round_param<T>(param - c.step_size * mi / (fn::hd::sqrt(vi) / c.bc2_sqrt + c.eps), c.stochastic, c.seed, offset,
                     i);
}

// Kernel parameters stay under the classic 4 KiB limit.
constexpr int kMaxTensors = 32;
constexpr int kMaxBlocks = 160;
constexpr int64_t kChunk = 16384;  // elements per block

// The multi-tensor packing shared by the Adam step and the clipping: walks
// the kChunk-element chunks of tensors lo .. hi-1 in order into list (its
// tensor[] and chunk[] tables map each block to a chunk), at most kMaxTensors
// tensors and kMaxBlocks blocks per launch. add(slot, k) stores tensor k's
// pointers in a slot, at its first chunk and again after each launch;
// launch(blocks) runs what is packed.
template <class List, class Numel, class Add, class Launch>
void pack_chunks(List& list, size_t lo, size_t hi, Numel numel, Add add, Launch launch) {
  int ntensors = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) launch(nblocks);
    ntensors = nblocks = 0;
  };
  for (size_t k = lo; k < hi; ++k) {
    const int64_t chunks = (numel(k) + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || nblocks == 0) {
        if (ntensors == kMaxTensors) flush();
        add(ntensors++, k);
      }
      list.tensor[nblocks] = static_cast<uint8_t>(ntensors - 1);
      list.chunk[nblocks] = static_cast<int32_t>(c);
      if (++nblocks == kMaxBlocks) flush();
    }
  }
  flush();
}

template <class T>
struct AdamChunks {
  T* p[kMaxTensors];
  const T* g[kMaxTensors];
  T* m[kMaxTensors];
  T* v[kMaxTensors];
  int64_t n[kMaxTensors];
  uint64_t offset[kMaxTensors];  // first Philox counter (stochastic rounding)
  uint8_t tensor[kMaxBlocks];    // block -> tensor
  int32_t chunk[kMaxBlocks];     // block -> chunk of that tensor
};

template <class T>
__global__ void adam_multi_kernel_impl(AdamChunks<T> list, AdamScalars<opmath_t<T>> c_in) {
  const AdamScalars<opmath_t<T>> c = current(c_in);
  const int t = list.tensor[blockIdx.x];
  const int64_t begin = int64_t(list.chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < list.n[t] ? begin + kChunk : list.n[t];
  T* p = list.p[t];
  const T* g = list.g[t];
  T* m = list.m[t];
  T* v = list.v[t];
  const uint64_t offset = list.offset[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) adam_element(p[i], g[i], m[i], v[i], c, offset, i);
}

template <class T>
__global__ void adam_kernel_impl(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                                 int64_t n, AdamScalars<opmath_t<T>> c_in, uint64_t offset) {
  const AdamScalars<opmath_t<T>> c = current(c_in);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adam_element(p[i], g[i], m[i], v[i], c, offset, i);
}

template <class T>
AdamScalars<T> scalars(const optim::AdamStep& s) {
  return {static_cast<T>(s.beta1),
          static_cast<T>(s.beta2),
          static_cast<T>(s.eps),
          static_cast<T>(s.lr / s.bias_correction1),
          static_cast<T>(std::sqrt(s.bias_correction2)),
          static_cast<T>(s.weight_decay),
          static_cast<T>(1.0 - s.lr * s.weight_decay),
          s.decoupled,
          s.device_scalars,
          s.stochastic_rounding,
          s.seed};
}

void cuda_adam_multi(std::vector<optim::AdamParam>& params, const optim::AdamStep& s) {
  if (params.empty()) return;
  const Device dev = params[0].p.device();
  dispatch_floating_and_half(params[0].p.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    const AdamScalars<opmath_t<T>> c = scalars<opmath_t<T>>(s);
    AdamChunks<T> list{};
    pack_chunks(
        list, 0, params.size(), [&](size_t k) { return params[k].p.numel(); },
        [&](int slot, size_t k) {
          const optim::AdamParam& a = params[k];
          list.p[slot] = static_cast<T*>(a.p.data_ptr());
          list.g[slot] = static_cast<const T*>(a.g.data_ptr());
          list.m[slot] = static_cast<T*>(a.m.data_ptr());
          list.v[slot] = static_cast<T*>(a.v.data_ptr());
          list.n[slot] = a.p.numel();
          list.offset[slot] = a.offset;
        },
        [&](int blocks) { EMBER_CUDA_LAUNCH(adam_multi_kernel_impl<T>, blocks, 256, 0, dev.index, list, c); });
  });
}

void cuda_adam(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const optim::AdamStep& s) {
  const int64_t n = p.numel();
  if (n == 0) return;
  dispatch_floating_and_half(p.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(adam_kernel_impl<T>, blocks_for(n, 256, 8192), 256, 0, p.device().index,
                      static_cast<T*>(p.data_ptr()), static_cast<const T*>(g.data_ptr()), static_cast<T*>(m.data_ptr()),
                      static_cast<T*>(v.data_ptr()), n, scalars<opmath_t<T>>(s), s.offset);
  });
}

// The fused SGD step of a 16-bit parameter: sgd_element in float32, buf and
// p each rounded once.
template <class T>
__global__ void sgd_kernel_impl(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t n,
                                optim::SGDStep s) {
  using A = opmath_t<T>;
  const A lr = static_cast<A>(s.lr), mom = static_cast<A>(s.momentum);
  const A keep = static_cast<A>(1.0 - s.dampening), wd = static_cast<A>(s.weight_decay);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    A pi = A(p[i]), bi = A(0);
    if (buf && !s.first) bi = A(buf[i]);
    optim::sgd_element(pi, A(g[i]), bi, lr, mom, keep, wd, s.nesterov, s.first);
    if (buf) buf[i] = T(bi);
    p[i] = round_param<T>(pi, s.stochastic_rounding, s.seed, s.offset, i);
  }
}

void cuda_sgd(Tensor& p, const Tensor& g, Tensor& buf, const optim::SGDStep& s) {
  const int64_t n = p.numel();
  if (n == 0) return;
  dispatch_floating_and_half(p.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    T* b = s.momentum != 0 ? static_cast<T*>(buf.data_ptr()) : nullptr;
    EMBER_CUDA_LAUNCH(sgd_kernel_impl<T>, blocks_for(n, 256, 8192), 256, 0, p.device().index,
                      static_cast<T*>(p.data_ptr()), static_cast<const T*>(g.data_ptr()), b, n, s);
  });
}

// clip_grad_norm_'s sum of squares in float64: one partial per block, added
// on the host in block order (a fixed grid for a given size: deterministic).
template <class T>
__global__ void sum_squares_kernel_impl(const T* __restrict__ x, int64_t n, double* __restrict__ partial) {
  __shared__ double scratch[32];
  double s = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(static_cast<opmath_t<T>>(x[i]));
    s += v * v;
  }
  s = block_reduce(s, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

double cuda_sum_squares(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  const unsigned blocks = blocks_for(n, 256, 1024);
  Tensor partial = empty({static_cast<int64_t>(blocks)}, TensorOptions(DType::Float64, x.device()));
  dispatch_floating_and_half(x.dtype(), "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(sum_squares_kernel_impl<T>, blocks, 256, 0, x.device().index, static_cast<const T*>(x.data_ptr()),
                      n, static_cast<double*>(partial.data_ptr()));
  });
  double total = 0;
  for (double v : partial.cpu().to_vector<double>()) total += v;
  return total;
}

// clip_grad_norm_ on the device, in a few launches for all the gradients
// (the multi-tensor chunking of the Adam step): the sum of squares of each
// chunk of 16384 elements into a float64 partial, one block summing the
// partials in a fixed order (deterministic for given shapes), and the
// scaling, each chunk by the coefficient read from device memory.
template <class T>
struct GradChunks {
  T* g[kMaxTensors];
  int64_t n[kMaxTensors];
  uint8_t tensor[kMaxBlocks];  // block -> tensor
  int32_t chunk[kMaxBlocks];   // block -> chunk of that tensor
  int64_t first;               // the partial of this launch's block 0
};

template <class T>
__global__ void chunk_sum_squares_kernel(GradChunks<T> list, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int t = list.tensor[blockIdx.x];
  const int64_t begin = int64_t(list.chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < list.n[t] ? begin + kChunk : list.n[t];
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = static_cast<double>(static_cast<opmath_t<T>>(list.g[t][i]));
    s += v * v;
  }
  s = block_reduce(s, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) partial[list.first + blockIdx.x] = s;
}

// One block: acc = [sum, sqrt(sum) (the norm), max_norm / (norm + 1e-6)].
__global__ void clip_total_kernel(const double* __restrict__ partial, int64_t count, double max_norm,
                                  double* __restrict__ acc) {
  __shared__ double scratch[32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_reduce(s, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) {
    acc[0] = s;
    acc[1] = sqrt(s);
    acc[2] = max_norm / (acc[1] + 1e-6);
  }
}

// g *= coef where coef < 1, in opmath_t<T> and rounded once (as mul_ by a scalar).
template <class T>
__global__ void chunk_scale_kernel(GradChunks<T> list, const double* __restrict__ acc) {
  const double coef = acc[2];
  if (!(coef < 1.0)) return;
  using A = opmath_t<T>;
  const A c = static_cast<A>(coef);
  const int t = list.tensor[blockIdx.x];
  const int64_t begin = int64_t(list.chunk[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < list.n[t] ? begin + kChunk : list.n[t];
  T* g = list.g[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) g[i] = T(A(g[i]) * c);
}

// Calls launch(list, blocks) for the chunks of grads[lo, hi) (one dtype), at
// most kMaxTensors tensors and kMaxBlocks chunks per call, blocks in order.
template <class T, class Launch>
void for_chunks(const std::vector<Tensor>& grads, size_t lo, size_t hi, int64_t& first, Launch launch) {
  GradChunks<T> list{};
  list.first = first;
  pack_chunks(
      list, lo, hi, [&](size_t k) { return grads[k].numel(); },
      [&](int slot, size_t k) {
        list.g[slot] = static_cast<T*>(grads[k].data_ptr());
        list.n[slot] = grads[k].numel();
      },
      [&](int blocks) {
        launch(list, blocks);
        first += blocks;
        list.first = first;
      });
}

// Runs body(lo, hi, tag) over the runs of consecutive gradients of one dtype.
template <class Body>
void by_dtype(const std::vector<Tensor>& grads, Body body) {
  for (size_t lo = 0; lo < grads.size();) {
    size_t hi = lo + 1;
    while (hi < grads.size() && grads[hi].dtype() == grads[lo].dtype()) ++hi;
    dispatch_floating_and_half(grads[lo].dtype(), "clip_grad_norm", [&](auto tag) { body(lo, hi, tag); });
    lo = hi;
  }
}

Tensor cuda_clip_grad_norm(const std::vector<Tensor>& grads, double max_norm) {
  const Device dev = grads.at(0).device();
  int64_t chunks = 0;
  for (const Tensor& g : grads) chunks += (g.numel() + kChunk - 1) / kChunk;
  Tensor partial = empty({std::max<int64_t>(chunks, 1)}, TensorOptions(DType::Float64, dev));
  Tensor acc = empty({3}, TensorOptions(DType::Float64, dev));
  auto* pp = static_cast<double*>(partial.data_ptr());
  auto* a = static_cast<double*>(acc.data_ptr());
  int64_t first = 0;
  by_dtype(grads, [&](size_t lo, size_t hi, auto tag) {
    using T = decltype(tag);
    for_chunks<T>(grads, lo, hi, first, [&](const GradChunks<T>& list, int blocks) {
      EMBER_CUDA_LAUNCH(chunk_sum_squares_kernel<T>, blocks, 256, 0, dev.index, list, pp);
    });
  });
  EMBER_CUDA_LAUNCH(clip_total_kernel, 1, 1024, 0, dev.index, static_cast<const double*>(pp), chunks, max_norm, a);
  first = 0;
  by_dtype(grads, [&](size_t lo, size_t hi, auto tag) {
    using T = decltype(tag);
    for_chunks<T>(grads, lo, hi, first, [&](const GradChunks<T>& list, int blocks) {
      EMBER_CUDA_LAUNCH(chunk_scale_kernel<T>, blocks, 256, 0, dev.index, list, static_cast<const double*>(a));
    });
  });
  return acc.select(0, 1);
}

}  // namespace

EMBER_REGISTER_KERNEL(optim::sum_squares_kernel, CUDA, cuda_sum_squares);
EMBER_REGISTER_KERNEL(optim::clip_grad_norm_kernel, CUDA, cuda_clip_grad_norm);
EMBER_REGISTER_KERNEL(optim::adam_kernel, CUDA, cuda_adam);
EMBER_REGISTER_KERNEL(optim::adam_multi_kernel, CUDA, cuda_adam_multi);
EMBER_REGISTER_KERNEL(optim::sgd_kernel, CUDA, cuda_sgd);

}  // namespace ember::cuda
