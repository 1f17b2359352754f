// CUDA kernel of ops/kv_cache_attention.cpp: one query per row against a KV
// cache over the keys 0 .. pos[b], the position read on the device (so a
// captured graph replays it at every position).
//
// The keys 0 .. n - 1 (n = pos[b] + 1) of each (row, head) are split into P
// ranges [c n / P, (c + 1) n / P), one block of kWarps warps per (row,
// head, range), so that a batch of one still spreads over the device (GPT-2
// has 12 heads). In a block, warp w takes the 32-key tiles w, w + kWarps,
// ... of the range: lane j scores key j0 + j (a dot product over D against
// the query, held in shared memory as float32 / float64), then the warp runs
// the online softmax on its tile (running max m and sum l; when a tile
// raises the max from m to m', what was summed so far is rescaled by
// exp(m - m')) and adds the tile's weighted value rows into its own
// accumulator row in shared memory, lanes over the D columns (each value
// row read once, coalesced). The block merges its warps' (m, l, acc). With
// one range it writes the output; with more it writes its range's (M, L, O)
// to a workspace, and a second launch, a block per (row, head) and a thread
// per column, merges the P ranges in range order, as the online softmax
// merges blocks:
//   M = max_c M_c,  out = sum_c O_c exp(M_c - M) / sum_c L_c exp(M_c - M).
// (Not the last block to finish, in the first launch: one block would read
// every (row, head)'s ranges alone, as layer_norm's backward did at about
// 0.5 ms a call on an H200.)
// The work follows the position, not the cache's length, and the result
// does not depend on how the blocks were scheduled.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/cuda/graph_pool.h>
#include <ember/ops/factory.h>
#include <ember/ops/functors.h>
#include <ember/ops/kv_cache_attention.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {
namespace {

constexpr int kWarps = 8;  // 256 threads per block

struct Geom {
  int64_t B, H, S, D, P;  // P: key ranges per (row, head)
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

// The keys row b sees: pos[b] + 1, or 0 for a position out of range.
__device__ __forceinline__ int64_t visible_keys(const int64_t* pos, const Geom& g, int64_t b) {
  const int64_t p = pos[g.per_row ? b : 0];
  return p < 0 || p >= g.S ? 0 : p + 1;
}

// part: per task t = (b h) P + c, D + 2 values: the range's unnormalised
// output O_c (sum_j exp(s_j - M_c) v_j), then M_c and L_c.
template <class T, class A>
__global__ void kv_cache_attention_impl(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                        const int64_t* __restrict__ pos, T* __restrict__ out, A* __restrict__ part,
                                        Geom g, unsigned long long* err) {
  EMBER_DYNAMIC_SHARED(A, smem);
  const int64_t D = g.D, E = g.H * D;
  A* qs = smem;
  A* ps = qs + D;
  A* acc = ps + kWarps * 32;
  A* ml = acc + kWarps * D;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const A scale = static_cast<A>(g.scale), ninf = -std::numeric_limits<A>::infinity();
  for (int64_t t = blockIdx.x; t < g.B * g.H * g.P; t += gridDim.x) {
    const int64_t bh = t / g.P, c = t % g.P, b = bh / g.H, h = bh % g.H;
    const int64_t n = visible_keys(pos, g, b);
    // A position out of range (only inside a graph, where the op could not
    // check it on the host): recorded once, the row's output zero, nothing read.
    if (n == 0 && err && c == 0 && threadIdx.x == 0 && atomicCAS(err, 0ull, 1ull) == 0ull) {
      err[1] = static_cast<unsigned long long>(pos[g.per_row ? b : 0]);
      err[2] = static_cast<unsigned long long>(g.S);
    }
    const int64_t lo = c * n / g.P, hi = (c + 1) * n / g.P;
    const T* kh = k + b * g.ks0 + h * D;
    const T* vh = v + b * g.vs0 + h * D;
    __syncthreads();  // the previous task's readers are done with qs, acc, ml
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = static_cast<A>(q[b * g.qs0 + h * D + d]);
    for (int64_t d = lane; d < D; d += 32) acc[warp * D + d] = A(0);
    __syncthreads();
    A m = ninf, l = 0;
    for (int64_t j0 = lo + int64_t(warp) * 32; j0 < hi; j0 += kWarps * 32) {
      const int64_t j = j0 + lane;
      A s = ninf;
      if (j < hi) {
        A dot = 0;
        const T* kr = kh + j * g.ks1;
        for (int64_t d = 0; d < D; ++d) dot += qs[d] * static_cast<A>(kr[d]);
        s = dot * scale;
      }
      const A mx = warp_reduce(s, MaxOp{});  // finite: key j0 < hi is in the tile
      const A mn = m > mx ? m : mx;
      const A pj = j < hi ? fn::hd::exp(s - mn) : A(0);
      const A corr = m == ninf ? A(0) : fn::hd::exp(m - mn);
      l = l * corr + warp_reduce(pj, SumOp{});
      m = mn;
      ps[warp * 32 + lane] = pj;
      __syncwarp();  // the tile's weights are written
      const int64_t nv = hi - j0 < 32 ? hi - j0 : 32;
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
    A M = ninf, L = 0;
    for (int w = 0; w < kWarps; ++w) M = ml[w] > M ? ml[w] : M;
    for (int w = 0; w < kWarps; ++w) L += ml[w] == ninf ? A(0) : ml[kWarps + w] * fn::hd::exp(ml[w] - M);
    // With one range the merge is this block's own: O / L is the output.
    A* pt = g.P == 1 ? nullptr : part + t * (D + 2);  // no workspace then
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      A o = 0;
      for (int w = 0; w < kWarps; ++w)
        if (ml[w] != ninf) o += acc[w * D + d] * fn::hd::exp(ml[w] - M);
      if (!pt)
        out[b * E + h * D + d] = static_cast<T>(L == A(0) ? A(0) : o / L);
      else
        pt[d] = o;
    }
    if (pt && threadIdx.x == 0) pt[D] = M, pt[D + 1] = L;
  }
}

// The P ranges of (row, head) blockIdx.x merged in range order: thread d
// (and d + blockDim.x, ...) writes column d of the output.
template <class T, class A>
__global__ void kv_cache_merge_impl(const A* __restrict__ part, T* __restrict__ out, Geom g) {
  const int64_t D = g.D, E = g.H * D, bh = blockIdx.x, b = bh / g.H, h = bh % g.H;
  const A ninf = -std::numeric_limits<A>::infinity();
  const A* p0 = part + bh * g.P * (D + 2);
  A M = ninf;
  for (int64_t c = 0; c < g.P; ++c) M = p0[c * (D + 2) + D] > M ? p0[c * (D + 2) + D] : M;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    A L = 0, o = 0;
    for (int64_t c = 0; c < g.P; ++c) {
      const A mc = p0[c * (D + 2) + D];
      if (mc == ninf) continue;  // a range without keys
      const A f = fn::hd::exp(mc - M);
      L += p0[c * (D + 2) + D + 1] * f;
      o += p0[c * (D + 2) + d] * f;
    }
    out[b * E + h * D + d] = static_cast<T>(L == A(0) ? A(0) : o / L);
  }
}

// Key ranges per (row, head): enough blocks to spread a batch of one over a
// device (about 256 in all), each range at least 32 keys of a full cache,
// at most 64 ranges.
int64_t key_ranges(int64_t B, int64_t H, int64_t S) {
  const int64_t want = (256 + B * H - 1) / (B * H), most = (S + 31) / 32;
  return std::max<int64_t>(1, std::min<int64_t>({want, most, 64}));
}

template <class T, class A>
void run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, int64_t H, Tensor& out) {
  Geom g{};
  g.B = q.size(0);
  g.H = H;
  g.S = k.size(1);
  g.D = q.size(2) / H;
  g.P = key_ranges(g.B, H, g.S);
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
  const DType adt = std::is_same_v<A, double> ? DType::Float64 : DType::Float32;
  Tensor part = g.P > 1 ? empty({g.B * H * g.P * (g.D + 2)}, TensorOptions(adt, q.device())) : Tensor();
  A* part_ptr = part.defined() ? static_cast<A*>(part.data_ptr()) : nullptr;
  EMBER_CUDA_LAUNCH((kv_cache_attention_impl<T, A>), blocks_for(g.B * H * g.P, 1, 65535), kWarps * 32,
                    shared_bytes<A>(g.D), dev, static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
                    static_cast<const T*>(v.data_ptr()), pos.data<int64_t>(), static_cast<T*>(out.data_ptr()), part_ptr,
                    g, err);
  if (g.P > 1)
    EMBER_CUDA_LAUNCH((kv_cache_merge_impl<T, A>), static_cast<unsigned>(g.B * H),
                      static_cast<unsigned>(std::min<int64_t>(((g.D + 31) / 32) * 32, 256)), 0, dev, part_ptr,
                      static_cast<T*>(out.data_ptr()), g);
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
