/// \file
/// What the tensor-core attention kernels share (cuda/causal_attention_tc.cu
/// forward, cuda/causal_attention_tc_bwd.cu backward; causal, or
/// bidirectional for multi_head_attention's fused path through
/// cuda/attention.cu): the geometry, the dropout factor, quad reductions, and moving
/// 16-bit tiles between global memory, shared memory and the m16n8k16
/// fragments of cuda/mma.cuh (g = lane / 4, t = lane % 4 throughout).
#pragma once

#include <cstdint>

#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/dropout.h>
#include <ember/ops/random_kernels.h>
#include <ember/cuda/mma.cuh>

namespace ember::cuda::attention_tc {

inline constexpr int kWarps = 4;           // warps per block, 16 rows each
inline constexpr int kRows = 16 * kWarps;  // queries (forward, dQ) or keys (dK/dV) per block
inline constexpr int kTile = 64;           // rows per shared tile of the other side
inline constexpr int kPad = 8;             // shared rows are D + kPad elements: the rows a
                                           // warp reads together start in different banks

/// The problem besides pointers: element strides, head h at column h * D.
struct Geom {
  int64_t N, H, L, S;
  int64_t qs0, qs1, ks0, ks1, vs0, vs1;
  float scale;  // 1 / sqrt(D)
  bool dropout;
  RandomSpec spec;
  uint32_t threshold;  // dropout_threshold(p)
  float keep_scale;    // 1 / (1 - p)
  bool causal;         // query i sees keys j <= i + S - L (else every key)
};

/// Whether query i sees key j (both in range): the causal band, or all.
__host__ __device__ __forceinline__ bool visible(const Geom& g, int64_t i, int64_t j) {
  return !g.causal || j <= i + g.S - g.L;
}

/// q (N, L, H D) and k, v (N, S, H D) with unit last stride, and pr's
/// heads, scale and dropout, as a Geom (pr: detail::CausalAttentionParams
/// or detail::FusedAttentionParams, which carry the same fields).
template <class Params>
Geom make_geom(const Tensor& q, const Tensor& k, const Tensor& v, const Params& pr, bool causal) {
  Geom g{};
  g.N = q.size(0);
  g.H = pr.heads;
  g.L = q.size(1);
  g.S = k.size(1);
  g.qs0 = q.stride(0);
  g.qs1 = q.stride(1);
  g.ks0 = k.stride(0);
  g.ks1 = k.stride(1);
  g.vs0 = v.stride(0);
  g.vs1 = v.stride(1);
  g.scale = static_cast<float>(pr.scale);
  g.dropout = pr.p > 0;
  g.spec = pr.spec;
  g.threshold = g.dropout ? dropout_threshold(pr.p) : 0;
  g.keep_scale = static_cast<float>(1.0 / (1.0 - pr.p));
  g.causal = causal;
  return g;
}

/// The dropout multiplier of weight (task t, query i, key j), 0 or 1/(1-p):
/// element e of the (N, H, L, S) weights keeps word e % 4 of Philox counter
/// offset + e / 4, as every other path draws it.
__device__ __forceinline__ float drop_factor(const Geom& g, int64_t t, int64_t i, int64_t j) {
  const int64_t e = (t * g.L + i) * g.S + j;
  const Philox4x32 r = Philox4x32::generate(philox_seed(g.spec), philox_offset(g.spec) + static_cast<uint64_t>(e / 4));
  return (r.v[e % 4] >> 8) >= g.threshold ? g.keep_scale : 0.0f;
}

/// The launches (cuda/causal_attention_tc.cu, _tc_bwd.cu) for bfloat16 or
/// float16 q, k, v with unit last stride at head dim 64 or 128 (callers
/// check): out (N, L, H D) contiguous of q's dtype, lse (N, H, L) float32;
/// backward's gr (dO) of q's dtype with unit last stride, dq, dk, dv views
/// of q's dtype with unit last stride or undefined.
///@{
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Geom& g, Tensor& out, Tensor& lse);
void backward(const Tensor& gr, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Geom& g, Tensor& dq, Tensor& dk, Tensor& dv);
///@}

/// The max or sum over the four lanes 4g .. 4g + 3 that hold rows g, g + 8.
///@{
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
///@}

/// A fragments of 16 rows r0 .. r0 + 15 of a (row stride rs) over all D
/// columns, for D / 16 steps of k; rows at or past lim are zeros.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[D / 16][4], const uint16_t* src, int64_t rs, int64_t r0,
                                       int64_t lim) {
  const int lane = static_cast<int>(threadIdx.x % 32), gr = lane / 4, tq = lane % 4;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = r0 + gr + (r % 2 ? 8 : 0);
      const uint16_t* p = src + i * rs + 16 * kk + 2 * tq + (r >= 2 ? 8 : 0);
      a[kk][r] = i < lim ? mma_pack(p[0], p[1]) : 0u;
    }
}

/// Eight 16-bit elements: one 16-byte access.
struct alignas(16) Pack8 {
  uint32_t w[4];
};

/// Rows r0 .. r0 + kTile - 1 of src (row stride rs) into shared dst (row
/// stride D + kPad, 16-byte multiples), the whole block cooperating; rows at
/// or past lim are zeros (a weight of 0 times them stays 0). Eight elements
/// per access where src's rows start on 16 bytes (a projection's packed
/// output: row strides of 3E, heads at multiples of D), one otherwise.
template <int D>
__device__ __forceinline__ void stage(uint16_t* dst, const uint16_t* src, int64_t rs, int64_t r0, int64_t lim) {
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && rs % 8 == 0) {
    for (int idx = static_cast<int>(threadIdx.x); idx < kTile * D / 8; idx += kWarps * 32) {
      const int r = idx / (D / 8), d = 8 * (idx % (D / 8));
      const Pack8 zero{};
      *reinterpret_cast<Pack8*>(dst + r * (D + kPad) + d) =
          r0 + r < lim ? *reinterpret_cast<const Pack8*>(src + (r0 + r) * rs + d) : zero;
    }
    return;
  }
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * D; idx += kWarps * 32) {
    const int r = idx / D, d = idx % D;
    dst[r * (D + kPad) + d] = r0 + r < lim ? src[(r0 + r) * rs + d] : uint16_t(0);
  }
}

/// B fragment of B[k][n] = X[n0 + n][k0 + k] (X row-major in shared, row
/// stride ld): the k pairs are adjacent in a row of X (X^T as B: K in S = Q K^T).
__device__ __forceinline__ void b_rows(uint32_t (&b)[2], const uint16_t* x, int ld, int n0, int k0) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  // An even element offset in shared memory: each pair is one aligned 32-bit word, low half first.
  const uint16_t* p = x + (n0 + lane / 4) * ld + k0 + 2 * (lane % 4);
  b[0] = *reinterpret_cast<const uint32_t*>(p);
  b[1] = *reinterpret_cast<const uint32_t*>(p + 8);
}

/// B fragment of B[k][n] = X[k0 + k][n0 + n] (X as B: V in O = P V).
__device__ __forceinline__ void b_cols(uint32_t (&b)[2], const uint16_t* x, int ld, int k0, int n0) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint16_t* p = x + (k0 + 2 * (lane % 4)) * ld + n0 + lane / 4;
  b[0] = mma_pack(p[0], p[ld]);
  b[1] = mma_pack(p[8 * ld], p[9 * ld]);
}

/// The A fragment of k step kk from accumulators: columns 16 kk .. 16 kk + 15
/// of a 16-row product are its column blocks lo = 2 kk and hi = 2 kk + 1,
/// each element rounded to M.
template <MmaType M>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = mma_pack(mma_bits<M>(lo[0]), mma_bits<M>(lo[1]));
  a[1] = mma_pack(mma_bits<M>(lo[2]), mma_bits<M>(lo[3]));
  a[2] = mma_pack(mma_bits<M>(hi[0]), mma_bits<M>(hi[1]));
  a[3] = mma_pack(mma_bits<M>(hi[2]), mma_bits<M>(hi[3]));
}

/// acc[n][0..3] = 0 for every column block.
template <int Blocks>
__device__ __forceinline__ void zero(float (&acc)[Blocks][4]) {
#pragma unroll
  for (int c = 0; c < Blocks; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0f;
}

/// acc (16 x 8 Blocks) += A B^T for A's D / 16 k steps of fragments and the
/// Blocks x 8 rows of X (shared, row stride ld) as B: S = Q K^T's pattern.
template <MmaType M, int D, int Blocks>
__device__ __forceinline__ void mma_rows(float (&acc)[Blocks][4], const uint32_t (&a)[D / 16][4], const uint16_t* x,
                                         int ld) {
#pragma unroll
  for (int c = 0; c < Blocks; ++c)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[2];
      b_rows(b, x, ld, 8 * c, 16 * kk);
      mma_m16n8k16<M>(acc[c], a[kk], b, acc[c]);
    }
}

/// acc (16 x D) += P X for P in accumulators (16 x kTile, 8 column blocks)
/// and X's kTile rows (shared, row stride ld): O = P V's pattern.
template <MmaType M, int D>
__device__ __forceinline__ void mma_cols(float (&acc)[D / 8][4], const float (&p)[kTile / 8][4], const uint16_t* x,
                                         int ld) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[4];
    acc_to_a<M>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      uint32_t b[2];
      b_cols(b, x, ld, 16 * kk, 8 * d);
      mma_m16n8k16<M>(acc[d], a, b, acc[d]);
    }
  }
}

}  // namespace ember::cuda::attention_tc
