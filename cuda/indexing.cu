// CUDA kernels of ops/indexing.cpp: index checks, index_select (embedding's
// forward), gather, scatter_add, one_hot; and of ops/index_copy.cpp:
// index_copy_. index_add (embedding's backward) is cuda/index_add.cu.
//
// scatter_add gives each thread one destination column and walks the index
// in increasing order, as the CPU kernel does: no atomics, so sums are
// deterministic and equal to the CPU's order. The price is parallelism
// limited to the number of columns; index_add sorts the index first.
#include <limits>

#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/cuda/graph_pool.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

// The whole check in one launch: every block folds its entries into the
// device's words (index_check_words: atomicMin of the first bad position,
// atomicAdd of the count; integers, so exact in any order), then counts
// itself in the grid counter; the last block to finish moves the words to
// out ([first_bad, count]), sets them back to (~0, 0) and, inside a CUDA
// graph (err: the graph's error record [found, value, size], zeroed at the
// start of each replay; the first op to find a bad entry writes it),
// records a bad entry there.
__global__ void index_check_kernel_impl(const int64_t* __restrict__ idx, int64_t n, int64_t size, bool has_ignore,
                                        int64_t ignore, unsigned long long* acc, unsigned int* counter,
                                        unsigned long long* out, unsigned long long* err) {
  unsigned long long bad = ~0ull, c = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = idx[i];
    const bool ignored = has_ignore && v == ignore;
    c += ignored ? 0 : 1;
    if (!ignored && (v < 0 || v >= size) && static_cast<unsigned long long>(i) < bad)
      bad = static_cast<unsigned long long>(i);
  }
  if (c) atomicAdd(acc + 1, c);
  if (bad != ~0ull) atomicMin(acc, bad);
  if (!last_block_to_arrive(counter) || threadIdx.x != 0) return;
  const unsigned long long first = atomicExch(acc, ~0ull), count = atomicExch(acc + 1, 0ull);
  out[0] = first;
  out[1] = count;
  if (err && first != ~0ull && atomicCAS(err, 0ull, 1ull) == 0ull) {
    err[1] = static_cast<unsigned long long>(idx[first]);
    err[2] = static_cast<unsigned long long>(size);
  }
  *counter = 0u;
}

__global__ void index_max_kernel_impl(const int64_t* __restrict__ idx, int64_t n, long long* best) {
  long long m = std::numeric_limits<long long>::min();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m = idx[i] > m ? idx[i] : m;
  atomicMax(best, m);
}

// Two int64 words on the device, initialised from the host, read back.
Tensor scratch_words(Device d, int64_t a, int64_t b) { return from_vector(std::vector<int64_t>{a, b}).to(d); }

IndexCheckResult cuda_index_check(const Tensor& index, int64_t size, bool has_ignore, int64_t ignore) {
  const int64_t n = index.numel();
  const int dev = index.device().index;
  // Captured (an error record exists): nothing can be read back now; the
  // check reports to the record and the count stays on the device.
  unsigned long long* err = detail::graph_error_record(dev);
  Tensor words = empty({2}, TensorOptions(DType::Int64, index.device()));
  EMBER_CUDA_LAUNCH(index_check_kernel_impl, blocks_for(n, kThreads, 1024), kThreads, 0, dev, index.data<int64_t>(), n,
                    size, has_ignore, ignore, index_check_words(dev), grid_counter(dev),
                    static_cast<unsigned long long*>(words.data_ptr()), err);
  IndexCheckResult r;
  r.count_device = words.select(0, 1);
  if (err) {
    r.count = -1;
    return r;
  }
  const std::vector<int64_t> host = words.cpu().to_vector<int64_t>();
  r.bad_pos = host[0];  // ~0ull reads back as -1
  r.count = host[1];
  return r;
}

int64_t cuda_index_max(const Tensor& index) {
  Tensor words = scratch_words(index.device(), std::numeric_limits<int64_t>::min(), 0);
  const int64_t n = index.numel();
  if (n > 0)
    EMBER_CUDA_LAUNCH(index_max_kernel_impl, blocks_for(n, kThreads, 1024), kThreads, 0, index.device().index,
                      index.data<int64_t>(), n, static_cast<long long*>(words.data_ptr()));
  return words.cpu().to_vector<int64_t>()[0];
}

// The kernels below never touch memory outside their tensors, also for an
// index out of range: the ops check indices before launching them, but
// inside a captured CUDA graph that check runs on the device and reports
// after the replay (cuda_index_check), so the replay itself must stay in
// bounds (an out-of-range entry reads as 0 and adds nowhere).

// out3[a, k, b] = x3[a, index[k], b]: one thread per output element.
template <class T>
__global__ void index_select_kernel_impl(const T* __restrict__ x, const int64_t* __restrict__ idx, T* __restrict__ out,
                                         int64_t A, int64_t N, int64_t K, int64_t B) {
  const int64_t total = A * K * B;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i % B, k = (i / B) % K, a = i / (B * K), n = idx[k];
    out[i] = n >= 0 && n < N ? x[(a * N + n) * B + b] : T(0);
  }
}

void cuda_index_select(const Tensor& x3, const Tensor& index, Tensor& out3) {
  const int64_t A = x3.size(0), N = x3.size(1), B = x3.size(2), K = index.numel();
  if (A * K * B == 0) return;
  dispatch_all(x3.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(index_select_kernel_impl<T>, blocks_for(A * K * B, kThreads, 8192), kThreads, 0,
                      x3.device().index, static_cast<const T*>(x3.data_ptr()), index.data<int64_t>(),
                      static_cast<T*>(out3.data_ptr()), A, N, K, B);
  });
}

// self3[a, index[k], b] = src3[a, k, b] on strided views: thread (a, b)
// walks k in order (the last k wins, as on the CPU). An index out of range
// writes nothing; inside a graph (err) the first thread to meet one records
// it, as cuda_index_check would have (index_copy_ runs no check there).
template <class T>
__global__ void index_copy_kernel_impl(T* __restrict__ out, const int64_t* __restrict__ idx, const T* __restrict__ src,
                                       int64_t A, int64_t N, int64_t K, int64_t B, int64_t o0, int64_t o1, int64_t o2,
                                       int64_t s0, int64_t s1, int64_t s2, unsigned long long* err) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < A * B; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = c / B, b = c % B;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t n = idx[k];
      if (n >= 0 && n < N) {
        out[a * o0 + n * o1 + b * o2] = src[a * s0 + k * s1 + b * s2];
      } else if (err && atomicCAS(err, 0ull, 1ull) == 0ull) {
        err[1] = static_cast<unsigned long long>(n);
        err[2] = static_cast<unsigned long long>(N);
      }
    }
  }
}

void cuda_index_copy(Tensor& self3, const Tensor& index, const Tensor& src3) {
  const int64_t A = self3.size(0), N = self3.size(1), B = self3.size(2), K = index.numel();
  if (A * B == 0 || K == 0) return;
  const int dev = self3.device().index;
  unsigned long long* err = detail::graph_error_record(dev);  // null outside a capture
  dispatch_all(self3.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(index_copy_kernel_impl<T>, blocks_for(A * B, kThreads, 8192), kThreads, 0, dev,
                      static_cast<T*>(self3.data_ptr()), index.data<int64_t>(), static_cast<const T*>(src3.data_ptr()),
                      A, N, K, B, self3.stride(0), self3.stride(1), self3.stride(2), src3.stride(0), src3.stride(1),
                      src3.stride(2), err);
  });
}

// gather / scatter_add geometry: index's shape, and the contiguous strides
// of the data tensor (which may be larger than index in the other dims).
struct GatherDims {
  int nd;
  int dim;
  int64_t xsize;  // x's (or out's) size along dim
  int64_t ishape[kMaxDims];
  int64_t xstride[kMaxDims];
};

GatherDims gather_dims(const Shape& xshape, int64_t dim, const Shape& ishape) {
  GatherDims g{};
  g.nd = ishape.size();
  g.dim = static_cast<int>(dim);
  g.xsize = xshape[dim];
  const Shape xs = contiguous_strides(xshape);
  for (int d = 0; d < g.nd; ++d) {
    g.ishape[d] = ishape[d];
    g.xstride[d] = xs[d];
  }
  return g;
}

// Offset in x of index position p, with the indexed coordinate left out.
__device__ __forceinline__ int64_t base_offset(const GatherDims& g, int64_t p) {
  int64_t off = 0;
  for (int d = g.nd - 1; d >= 0; --d) {
    const int64_t c = p % g.ishape[d];
    p /= g.ishape[d];
    if (d != g.dim) off += c * g.xstride[d];
  }
  return off;
}

template <class T>
__global__ void gather_kernel_impl(const T* __restrict__ x, const int64_t* __restrict__ idx, T* __restrict__ out,
                                   int64_t n, GatherDims g) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x)
    out[p] = idx[p] >= 0 && idx[p] < g.xsize ? x[base_offset(g, p) + idx[p] * g.xstride[g.dim]] : T(0);
}

// Thread per column (the coordinates other than dim), walking k in order.
template <class T>
__global__ void scatter_add_kernel_impl(T* __restrict__ out, const int64_t* __restrict__ idx, const T* __restrict__ src,
                                        int64_t A, int64_t K, int64_t B, GatherDims g) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < A * B; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = c / B, b = c % B;
    const int64_t base = base_offset(g, a * K * B + b);  // position (a, 0, b)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t p = (a * K + k) * B + b;
      if (idx[p] >= 0 && idx[p] < g.xsize) out[base + idx[p] * g.xstride[g.dim]] += src[p];
    }
  }
}

void split_at(const Shape& s, int64_t dim, int64_t& A, int64_t& K, int64_t& B) {
  A = 1;
  B = 1;
  for (int d = 0; d < dim; ++d) A *= s[d];
  K = s[static_cast<int>(dim)];
  for (int d = static_cast<int>(dim) + 1; d < s.size(); ++d) B *= s[d];
}

void cuda_gather(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const GatherDims g = gather_dims(x.shape(), dim, index.shape());
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(gather_kernel_impl<T>, blocks_for(n, kThreads, 8192), kThreads, 0, x.device().index,
                      static_cast<const T*>(x.data_ptr()), index.data<int64_t>(), static_cast<T*>(out.data_ptr()), n,
                      g);
  });
}

void cuda_scatter_add(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  const GatherDims g = gather_dims(out.shape(), dim, index.shape());
  int64_t A, K, B;
  split_at(index.shape(), dim, A, K, B);
  dispatch_numeric(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(scatter_add_kernel_impl<T>, blocks_for(A * B, kThreads, 8192), kThreads, 0, out.device().index,
                      static_cast<T*>(out.data_ptr()), index.data<int64_t>(), static_cast<const T*>(src.data_ptr()), A,
                      K, B, g);
  });
}

__global__ void one_hot_kernel_impl(const int64_t* __restrict__ idx, int64_t* __restrict__ out, int64_t M, int64_t C) {
  for (int64_t m = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; m < M; m += int64_t(gridDim.x) * blockDim.x)
    if (idx[m] >= 0 && idx[m] < C) out[m * C + idx[m]] = 1;
}

void cuda_one_hot(const Tensor& index, Tensor& out) {
  const int64_t M = index.numel(), C = out.size(-1);
  const int dev = out.device().index;
  profiler::add_device_launch();
  EMBER_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, sizeof(int64_t) * M * C, stream(dev)));
  if (M > 0)
    EMBER_CUDA_LAUNCH(one_hot_kernel_impl, blocks_for(M, kThreads, 8192), kThreads, 0, dev, index.data<int64_t>(),
                      out.data<int64_t>(), M, C);
}

}  // namespace

EMBER_REGISTER_KERNEL(index_check_kernel, CUDA, cuda_index_check);
EMBER_REGISTER_KERNEL(index_max_kernel, CUDA, cuda_index_max);
EMBER_REGISTER_KERNEL(index_select_kernel, CUDA, cuda_index_select);
EMBER_REGISTER_KERNEL(index_copy_kernel, CUDA, cuda_index_copy);
EMBER_REGISTER_KERNEL(gather_kernel, CUDA, cuda_gather);
EMBER_REGISTER_KERNEL(scatter_add_kernel, CUDA, cuda_scatter_add);
EMBER_REGISTER_KERNEL(one_hot_kernel, CUDA, cuda_one_hot);

}  // namespace ember::cuda
