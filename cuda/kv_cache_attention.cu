// CUDA kernel of ops/kv_cache_attention.cpp: one query per row against a KV
// cache over the keys 0 .. pos[b], the position read on the device (so a
// captured graph replays it at every position).
//
// One block of kWarps warps per (row, head). Warp w takes the key tiles
// [w 32 + i kWarps 32, + 32): lane j scores key j0 + j (a dot product over
// D against the query, held in shared memory as float32 / float64), then
// the warp runs the online softmax on its tile (running max m and sum l;
// when a tile raises the max from m to m', what was summed so far is
// rescaled by exp(m - m')) and adds the tile's weighted value rows into its
// own accumulator row in shared memory, lanes over the D columns (each
// value row read once, coalesced). At the end the warps' (m, l, acc) are
// merged: out = sum_w acc_w exp(m_w - M) / sum_w l_w exp(m_w - M), M the
// largest m_w. The work is proportional to pos, not to the cache's length.
#include <cmath>
#include <limits>

#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/cuda/graph_pool.h>
#include <ember/ops/functors.h>
#include <ember/ops/kv_cache_attention.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

constexpr int kWarps = 8;  // 256 threads per block

struct Geom {
  int64_t B, H, S, D;
  int64_t qs0, ks0, ks1, vs0, vs1;
  bool per_row;  // pos holds one position per row (else one for all)
  double scale;  // 1 / sqrt(D)
};

// Shared memory, in A: the query row (D), each warp's weights of its tile
// (32), each warp's accumulator row (D), each warp's m and l.
template <class A>
size_t shared_bytes(int64_t D) {
  return sizeof(A) * static_cast<size_t>(D + kWarps * 32 + kWarps * D + 2 * kWarps);
}

template <class T, class A>
__global__ void kv_cache_attention_impl(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                        const int64_t* __restrict__ pos, T* __restrict__ out, Geom g,
                                        unsigned long long* err) {
  EMBER_DYNAMIC_SHARED(A, smem);
  const int64_t D = g.D, E = g.H * D;
  A* qs = smem;
  A* ps = qs + D;
  A* acc = ps + kWarps * 32;
  A* ml = acc + kWarps * D;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const A scale = static_cast<A>(g.scale), ninf = -std::numeric_limits<A>::infinity();
  for (int64_t t = blockIdx.x; t < g.B * g.H; t += gridDim.x) {
    const int64_t b = t / g.H, h = t % g.H, p = pos[g.per_row ? b : 0];
    // A position out of range (only inside a graph, where the op could not
    // check it on the host): recorded, the row's output zero, nothing read.
    const bool bad = p < 0 || p >= g.S;
    if (bad && err && threadIdx.x == 0 && atomicCAS(err, 0ull, 1ull) == 0ull) {
      err[1] = static_cast<unsigned long long>(p);
      err[2] = static_cast<unsigned long long>(g.S);
    }
    const int64_t n = bad ? 0 : p + 1;
    const T* kh = k + b * g.ks0 + h * D;
    const T* vh = v + b * g.vs0 + h * D;
    __syncthreads();  // the previous task's readers are done with qs, acc, ml
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = static_cast<A>(q[b * g.qs0 + h * D + d]);
    for (int64_t d = lane; d < D; d += 32) acc[warp * D + d] = A(0);
    __syncthreads();
    A m = ninf, l = 0;
    for (int64_t j0 = int64_t(warp) * 32; j0 < n; j0 += kWarps * 32) {
      const int64_t j = j0 + lane;
      A s = ninf;
      if (j < n) {
        A dot = 0;
        const T* kr = kh + j * g.ks1;
        for (int64_t d = 0; d < D; ++d) dot += qs[d] * static_cast<A>(kr[d]);
        s = dot * scale;
      }
      const A mx = warp_reduce(s, MaxOp{});  // finite: key j0 < n is in the tile
      const A mn = m > mx ? m : mx;
      const A pj = j < n ? fn::hd::exp(s - mn) : A(0);
      const A corr = m == ninf ? A(0) : fn::hd::exp(m - mn);
      l = l * corr + warp_reduce(pj, SumOp{});
      m = mn;
      ps[warp * 32 + lane] = pj;
      __syncwarp();  // the tile's weights are written
      const int64_t nv = n - j0 < 32 ? n - j0 : 32;
      for (int64_t d = lane; d < D; d += 32) {
        A a = acc[warp * D + d] * corr;
        for (int64_t jj = 0; jj < nv; ++jj) a += ps[warp * 32 + jj] * static_cast<A>(vh[(j0 + jj) * g.vs1 + d]);
        acc[warp * D + d] = a;
      }
      __syncwarp();  // the lanes are done with the weights
    }
    if (lane == 0) {
      ml[warp] = m;
      ml[kWarps + warp] = l;
    }
    __syncthreads();
    A M = ninf;
    for (int w = 0; w < kWarps; ++w) M = ml[w] > M ? ml[w] : M;
    A L = 0;
    for (int w = 0; w < kWarps; ++w) L += ml[w] == ninf ? A(0) : ml[kWarps + w] * fn::hd::exp(ml[w] - M);
    T* orow = out + b * E + h * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      A o = 0;
      for (int w = 0; w < kWarps; ++w)
        if (ml[w] != ninf) o += acc[w * D + d] * fn::hd::exp(ml[w] - M);
      orow[d] = static_cast<T>(n == 0 ? A(0) : o / L);
    }
  }
}

template <class T, class A>
void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, int64_t H, Tensor& out) {
  Geom g{};
  g.B = q.size(0);
  g.H = H;
  g.S = k.size(1);
  g.D = q.size(2) / H;
  g.qs0 = q.stride(0);
  g.ks0 = k.stride(0);
  g.ks1 = k.stride(1);
  g.vs0 = v.stride(0);
  g.vs1 = v.stride(1);
  g.per_row = pos.numel() > 1;
  g.scale = 1.0 / std::sqrt(static_cast<double>(g.D));
  EMBER_CHECK(g.D <= kKvCacheAttentionCudaMaxHeadDim, ValueError, "kv_cache_attention (cuda): head dim ", g.D,
              " is wider than the kernel's ", kKvCacheAttentionCudaMaxHeadDim);
  const int dev = q.device().index;
  unsigned long long* err = detail::graph_error_record(dev);  // null outside a capture
  EMBER_CUDA_LAUNCH((kv_cache_attention_impl<T, A>), blocks_for(g.B * H, 1, 65535), kWarps * 32, shared_bytes<A>(g.D),
                    dev, static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
                    static_cast<const T*>(v.data_ptr()), pos.data<int64_t>(), static_cast<T*>(out.data_ptr()), g, err);
}

void cuda_kv_cache_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, int64_t H,
                             Tensor& out) {
  switch (q.dtype()) {
    case DType::Float64:
      return run<double, double>(q, k, v, pos, H, out);
    case DType::Float32:
      return run<float, float>(q, k, v, pos, H, out);
    case DType::BFloat16:
      return run<bfloat16, float>(q, k, v, pos, H, out);
    case DType::Float16:
      return run<float16, float>(q, k, v, pos, H, out);
    default:
      EMBER_CHECK(false, DTypeError, "kv_cache_attention (cuda): no kernel for ", dtype_name(q.dtype()));
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(::ember::detail::kv_cache_attention_kernel, CUDA, cuda_kv_cache_attention);

}  // namespace ember::cuda
