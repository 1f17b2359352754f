/// \file
/// What the tensor-core attention kernels share (cuda/causal_attention_tc.cu
/// forward, cuda/causal_attention_tc_bwd.cu backward; causal, or
/// bidirectional for multi_head_attention's fused path through
/// cuda/attention.cu): the geometry, the dropout factor, quad reductions, and moving
/// 16-bit tiles from global memory to shared memory (cp.async) and on into
/// the m16n8k16 fragments of cuda/mma.cuh (ldmatrix; g = lane / 4,
/// t = lane % 4 throughout).
#pragma once

#include <cstdint>

#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/cuda/attention_geometry.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/dropout.h>
#include <ember/ops/random_kernels.h>
#include <ember/cuda/mma.cuh>

namespace ember::cuda::attention_tc {

inline constexpr int kWarps = 4;           // warps per block, 16 rows each
inline constexpr int kRows = 16 * kWarps;  // queries (forward, dQ) or keys (dK/dV) per block
inline constexpr int kTile = 64;           // rows per shared tile of the other side
inline constexpr int kPad = 8;             // shared rows are D + kPad elements (16-byte multiples):
                                           // the 8 rows of an ldmatrix matrix, 16 bytes each,
                                           // start 4 banks apart and cover all 32 banks

/// Shared-memory buffers per staged operand at head dim D: two (the next
/// tile's copy runs while the current one is used) where the kernels' two
/// operands, double-buffered, and dK/dV's lse and Delta fit the 48 KiB a
/// block has by default (D = 64: 37 KiB), else one (D = 128: 34 KiB).
template <int D>
inline constexpr size_t kTwoBufferBytes = (2 * 2 * kTile * (D + kPad)) * sizeof(uint16_t) +
                                          (2 * 2 * kTile) * sizeof(float);
template <int D>
inline constexpr int kBuffers = kTwoBufferBytes<D> <= 48 * 1024 ? 2 : 1;

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
  fill_geometry<float>(g, q, k, v, pr);
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

/// Rows r0 .. r0 + kTile - 1 of src (row stride rs) into shared dst (row
/// stride D + kPad, 16-byte multiples), the whole block cooperating; rows at
/// or past lim are zeros (a weight of 0 times them stays 0). Where src's
/// rows start on 16 bytes (a projection's packed output: row strides of 3E,
/// heads at multiples of D) as cp.async copies of eight elements that the
/// caller commits and waits for (cp_async_commit, cp_async_wait); otherwise
/// element by element with plain loads, done on return.
template <int D>
__device__ __forceinline__ void stage(uint16_t* dst, const uint16_t* src, int64_t rs, int64_t r0, int64_t lim) {
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && rs % 8 == 0) {
    for (int idx = static_cast<int>(threadIdx.x); idx < kTile * D / 8; idx += kWarps * 32) {
      const int r = idx / (D / 8), d = 8 * (idx % (D / 8));
      const bool in = r0 + r < lim;
      cp_async_16(dst + r * (D + kPad) + d, in ? src + (r0 + r) * rs + d : src, in);
    }
    return;
  }
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * D; idx += kWarps * 32) {
    const int r = idx / D, d = idx % D;
    dst[r * (D + kPad) + d] = r0 + r < lim ? src[(r0 + r) * rs + d] : uint16_t(0);
  }
}

/// A fragments of the 16 rows r0 .. r0 + 15 of a shared tile x (row stride
/// ld) over all D columns, for D / 16 steps of k: one ldmatrix x4 per step,
/// lane l addressing row r0 + l % 16 at column 16 kk + 8 (l / 16), so the
/// four matrices are the step's top left, bottom left, top right and bottom
/// right 8 x 8 blocks, a[kk][0..3] in mma's order.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[D / 16][4], const uint16_t* x, int ld, int r0) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint16_t* row = x + (r0 + lane % 16) * ld + 8 * (lane / 16);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(a[kk], row + 16 * kk);
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
/// Blocks x 8 rows of X (shared, row stride ld) as B: S = Q K^T's pattern,
/// B[k][n] = X[8 c + n][16 kk + k], whose k pairs are adjacent in a row of
/// X. One ldmatrix x4 gives column block c's B fragments of k steps kk and
/// kk + 1: lane l addresses row 8 c + l % 8 at column 16 kk + 8 (l / 8).
template <MmaType M, int D, int Blocks>
__device__ __forceinline__ void mma_rows(float (&acc)[Blocks][4], const uint32_t (&a)[D / 16][4], const uint16_t* x,
                                         int ld) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint16_t* row = x + (lane % 8) * ld + 8 * (lane / 8);
#pragma unroll
  for (int c = 0; c < Blocks; ++c)
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
      uint32_t b[4];  // k step kk: b[0], b[1]; kk + 1: b[2], b[3]
      ldmatrix_x4(b, row + 8 * c * ld + 16 * kk);
      mma_m16n8k16<M>(acc[c], a[kk], b, acc[c]);
      mma_m16n8k16<M>(acc[c], a[kk + 1], b + 2, acc[c]);
    }
}

/// acc (16 x D) += P X for P in accumulators (16 x kTile, 8 column blocks)
/// and X's kTile rows (shared, row stride ld): O = P V's pattern, B[k][n] =
/// X[16 kk + k][8 d + n], transposed on the way in. One ldmatrix x4.trans
/// gives column blocks d and d + 1 of k step kk: lane l addresses row
/// 16 kk + l % 16 at column 8 d + 8 (l / 16).
template <MmaType M, int D>
__device__ __forceinline__ void mma_cols(float (&acc)[D / 8][4], const float (&p)[kTile / 8][4], const uint16_t* x,
                                         int ld) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint16_t* row = x + (lane % 16) * ld + 8 * (lane / 16);
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[4];
    acc_to_a<M>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int d = 0; d < D / 8; d += 2) {
      uint32_t b[4];  // column block d: b[0], b[1]; d + 1: b[2], b[3]
      ldmatrix_x4_trans(b, row + 16 * kk * ld + 8 * d);
      mma_m16n8k16<M>(acc[d], a, b, acc[d]);
      mma_m16n8k16<M>(acc[d + 1], a, b + 2, acc[d + 1]);
    }
  }
}

}  // namespace ember::cuda::attention_tc
