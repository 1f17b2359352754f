// CUDA kernel of ops/indexing.cpp's index_add (embedding's backward):
// out3[a, index[k], b] += src3[a, k, b], each destination row receiving its
// contributions in increasing k, as the CPU kernel adds them, so the sums
// are the CPU's bits and the same run after run (no float atomics).
//
// A short index (at most kSerialMax entries): a thread per column (a, b)
// walks k in order. Past that, a thread per column would make the launch as
// long as K dependent read-modify-writes of out (GPT-2 124M's embedding
// backward, 16,384 tokens: about 4 ms on an H200). So the positions k are
// sorted by destination row first, stably (an LSD radix sort of 8-bit
// digits, a block of 256 entries at a time):
//   init:    key[k] = index[k], or N for an entry to skip (skip, or out of
//            range: the index check reports those); val[k] = k;
//   per digit: each block counts its entries per digit (hist[d][block]),
//            one block turns the counts into exclusive offsets in (digit,
//            block) order, and each entry goes to offset + its rank among
//            the block's earlier entries with the same digit: stable, so
//            equal keys keep increasing k;
//   sums:    a block per sorted position that starts a run of one key adds
//            the run's src rows into out, threads over the columns, in run
//            order (increasing k).
// 8 launches for a vocabulary below 65,536 (a digit per byte of N).
#include <cstdint>

#include <ember/core/dtype_dispatch.h>
#include <ember/cuda/common.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSerialMax = 64;  // index entries the one-launch kernel takes
constexpr int kDigits = 256;        // 8-bit digits
constexpr int kSortBlock = 256;     // entries per block of a radix pass, one per thread
constexpr int kScanThreads = 256;

// out3[a, index[k], b] += src3[a, k, b]: thread (a, b) walks k in order.
template <class T>
__global__ void index_add_serial_impl(T* __restrict__ out, const int64_t* __restrict__ idx, const T* __restrict__ src,
                                      int64_t A, int64_t N, int64_t K, int64_t B, int64_t skip) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < A * B; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t a = c / B, b = c % B;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t n = idx[k];
      if (n == skip || n < 0 || n >= N) continue;
      out[(a * N + n) * B + b] += src[(a * K + k) * B + b];
    }
  }
}

__global__ void sort_init_impl(const int64_t* __restrict__ idx, uint32_t* __restrict__ key, uint32_t* __restrict__ val,
                               int64_t K, int64_t N, int64_t skip) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < K; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx[k];
    key[k] = static_cast<uint32_t>(n == skip || n < 0 || n >= N ? N : n);
    val[k] = static_cast<uint32_t>(k);
  }
}

// The digit of this thread's entry (kDigits past the end), its rank among
// the block's earlier entries with the same digit, and whether it is the
// block's last entry with that digit. digits: __shared__ int[kSortBlock].
__device__ __forceinline__ int digit_rank(const uint32_t* key, int64_t K, int shift, int* digits, int* rank,
                                          bool* last) {
  const int64_t e = int64_t(blockIdx.x) * kSortBlock + threadIdx.x;
  const int d = e < K ? static_cast<int>((key[e] >> shift) & (kDigits - 1)) : kDigits;
  digits[threadIdx.x] = d;
  __syncthreads();
  int r = 0;
  bool later = false;
  for (int j = 0; j < kSortBlock; ++j) {
    const bool same = digits[j] == d;
    r += same && j < static_cast<int>(threadIdx.x);
    later |= same && j > static_cast<int>(threadIdx.x);
  }
  *rank = r;
  *last = !later;
  return d;
}

// hist[d * blocks + block] = the block's entries with digit d.
__global__ void radix_hist_impl(const uint32_t* __restrict__ key, uint32_t* __restrict__ hist, int64_t K, int shift) {
  __shared__ int digits[kSortBlock];
  __shared__ uint32_t counts[kDigits];
  counts[threadIdx.x] = 0;  // kSortBlock == kDigits threads
  int rank;
  bool last;
  const int d = digit_rank(key, K, shift, digits, &rank, &last);
  if (d < kDigits && last) counts[d] = static_cast<uint32_t>(rank + 1);
  __syncthreads();
  hist[int64_t(threadIdx.x) * gridDim.x + blockIdx.x] = counts[threadIdx.x];
}

// In place: h[i] = sum of h[0 .. i - 1], in one block; thread t takes a
// contiguous run of the M counts.
__global__ void exclusive_scan_impl(uint32_t* __restrict__ h, int64_t M) {
  __shared__ uint32_t sums[kScanThreads];
  const int64_t per = (M + kScanThreads - 1) / kScanThreads, lo = threadIdx.x * per;
  const int64_t hi = lo + per < M ? lo + per : M;
  uint32_t s = 0;
  for (int64_t i = lo; i < hi; ++i) s += h[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t run = 0;
    for (int t = 0; t < kScanThreads; ++t) {
      const uint32_t x = sums[t];
      sums[t] = run;
      run += x;
    }
  }
  __syncthreads();
  uint32_t run = sums[threadIdx.x];
  for (int64_t i = lo; i < hi; ++i) {
    const uint32_t x = h[i];
    h[i] = run;
    run += x;
  }
}

__global__ void radix_scatter_impl(const uint32_t* __restrict__ key, const uint32_t* __restrict__ val,
                                   const uint32_t* __restrict__ offsets, uint32_t* __restrict__ key_out,
                                   uint32_t* __restrict__ val_out, int64_t K, int shift) {
  __shared__ int digits[kSortBlock];
  int rank;
  bool last;
  const int d = digit_rank(key, K, shift, digits, &rank, &last);
  if (d == kDigits) return;
  const int64_t e = int64_t(blockIdx.x) * kSortBlock + threadIdx.x;
  const uint32_t at = offsets[int64_t(d) * gridDim.x + blockIdx.x] + static_cast<uint32_t>(rank);
  key_out[at] = key[e];
  val_out[at] = val[e];
}

// Block p (and p + gridDim.x, ...): when sorted position p starts a run of
// one destination row n, out3[a, n, :] += the run's src3 rows in order.
// Each thread keeps kRunCols columns (c, c + blockDim.x, ...) in registers,
// so a long run (a frequent token) has that many independent sums, and the
// loads of several positions, in flight; each column's additions stay in
// the run's order.
constexpr int kRunCols = 4;
template <class T>
__global__ void run_sums_impl(T* __restrict__ out, const uint32_t* __restrict__ key, const uint32_t* __restrict__ val,
                              const T* __restrict__ src, int64_t A, int64_t N, int64_t K, int64_t B) {
  for (int64_t p = blockIdx.x; p < K; p += gridDim.x) {
    const uint32_t n = key[p];
    if (n == N || (p > 0 && key[p - 1] == n)) continue;  // skipped entries, or not a run's start
    int64_t end = p + 1;
    while (end < K && key[end] == n) ++end;
    for (int64_t c0 = 0; c0 < A * B; c0 += int64_t(blockDim.x) * kRunCols) {
      T acc[kRunCols];
      const T* from[kRunCols];
      T* to[kRunCols];
#pragma unroll
      for (int j = 0; j < kRunCols; ++j) {
        const int64_t c = c0 + threadIdx.x + int64_t(j) * blockDim.x, a = c / B, b = c % B;
        to[j] = c < A * B ? out + (a * N + n) * B + b : nullptr;
        from[j] = src + a * K * B + b;
        acc[j] = to[j] ? *to[j] : T(0);
      }
#pragma unroll 4
      for (int64_t q = p; q < end; ++q) {
        const int64_t row = int64_t(val[q]) * B;
#pragma unroll
        for (int j = 0; j < kRunCols; ++j)
          if (to[j]) acc[j] += from[j][row];
      }
#pragma unroll
      for (int j = 0; j < kRunCols; ++j)
        if (to[j]) *to[j] = acc[j];
    }
  }
}

void cuda_index_add(Tensor& out3, const Tensor& index, const Tensor& src3, int64_t skip) {
  const int64_t A = out3.size(0), N = out3.size(1), B = out3.size(2), K = index.numel();
  if (A * B * K == 0) return;
  const int dev = out3.device().index;
  const int64_t* idx = index.data<int64_t>();
  // Keys N .. and positions below 2^32 fit the sort's 32-bit words.
  const bool sort = K > kSerialMax && N < (int64_t(1) << 32) - 1 && K < (int64_t(1) << 32);
  if (!sort) {
    dispatch_numeric(out3.dtype(), "index_add", [&](auto tag) {
      using T = decltype(tag);
      EMBER_CUDA_LAUNCH(index_add_serial_impl<T>, blocks_for(A * B, kThreads, 8192), kThreads, 0, dev,
                        static_cast<T*>(out3.data_ptr()), idx, static_cast<const T*>(src3.data_ptr()), A, N, K, B,
                        skip);
    });
    return;
  }
  const TensorOptions words(DType::Float32, out3.device());  // 4-byte words, used as uint32
  const int64_t blocks = (K + kSortBlock - 1) / kSortBlock;
  Tensor keys = empty({2, K}, words), vals = empty({2, K}, words), hist = empty({kDigits * blocks}, words);
  uint32_t* key[2] = {static_cast<uint32_t*>(keys.data_ptr()), static_cast<uint32_t*>(keys.data_ptr()) + K};
  uint32_t* val[2] = {static_cast<uint32_t*>(vals.data_ptr()), static_cast<uint32_t*>(vals.data_ptr()) + K};
  uint32_t* h = static_cast<uint32_t*>(hist.data_ptr());
  EMBER_CUDA_LAUNCH(sort_init_impl, blocks_for(K, kThreads), kThreads, 0, dev, idx, key[0], val[0], K, N, skip);
  int cur = 0;
  for (int shift = 0; shift < 32 && (static_cast<uint64_t>(N) >> shift) != 0; shift += 8, cur = 1 - cur) {
    EMBER_CUDA_LAUNCH(radix_hist_impl, static_cast<unsigned>(blocks), kSortBlock, 0, dev, key[cur], h, K, shift);
    EMBER_CUDA_LAUNCH(exclusive_scan_impl, 1, kScanThreads, 0, dev, h, kDigits * blocks);
    EMBER_CUDA_LAUNCH(radix_scatter_impl, static_cast<unsigned>(blocks), kSortBlock, 0, dev, key[cur], val[cur], h,
                      key[1 - cur], val[1 - cur], K, shift);
  }
  dispatch_numeric(out3.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    EMBER_CUDA_LAUNCH(run_sums_impl<T>, blocks_for(K, 1, 65535), kThreads, 0, dev, static_cast<T*>(out3.data_ptr()),
                      key[cur], val[cur], static_cast<const T*>(src3.data_ptr()), A, N, K, B);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(index_add_kernel, CUDA, cuda_index_add);

}  // namespace ember::cuda
