// The tensor-core forward of causal attention (ops/causal_attention.h) for
// bfloat16 and float16, head dims 64 and 128: FlashAttention 2's tiling on
// the warp-level m16n8k16 product of cuda/mma.cuh. cuda/causal_attention.cu
// dispatches to it and keeps the backward (float32 SIMT kernels on upcast
// copies).
//
// One block of four warps owns a tile of 64 queries of one (batch entry,
// head), each warp 16 rows, its Q rows held in registers as mma A fragments
// for the whole key loop. Per tile of 64 keys (K and V staged in shared
// memory; tiles wholly above the diagonal never loaded, and a warp whose 16
// rows see none of a tile skips it):
//   S = Q K^T            16 x 64 per warp: 8 column blocks x D/16 mmas, f32
//   m' = max(m, rowmax(S scale)),  P = exp(S scale - m')            (f32)
//   l = l exp(m - m') + rowsum P,   O = O exp(m - m') + (P f) V      (mma)
// with P rounded to the input type for the second product (as FA2 does); a
// row's max and sum are reduced over the four lanes that hold it (lanes
// 4g .. 4g + 3 hold rows g and g + 8). Only O / l and the row log-sum-exp
// m + log l (float32) are written: nothing of size L x S exists.
//
// Dropout, when p > 0, multiplies P by the same factors as every other path
// (element e of the (N, H, L, S) weights keeps word e % 4 of Philox counter
// offset + e / 4), after l has taken the undropped P.
#include <cmath>
#include <cstdint>
#include <limits>

#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/dropout.h>
#include <ember/ops/functors.h>
#include <ember/cuda/mma.cuh>

namespace ember::cuda {
namespace {

constexpr int kTcWarps = 4;                // warps per block, 16 query rows each
constexpr int kTcQueries = 16 * kTcWarps;  // queries per block
constexpr int kTcKeys = 64;                // keys per shared tile

struct TcGeom {
  int64_t N, H, L, S;
  int64_t qs0, qs1, ks0, ks1, vs0, vs1;  // element strides; head h starts at column h * D
  float scale;                           // 1 / sqrt(D)
  bool dropout;
  RandomSpec spec;
  uint32_t threshold;  // dropout_threshold(p)
  float keep_scale;    // 1 / (1 - p)
};

// The dropout multiplier of weight (task t, query i, key j): 0 or 1/(1-p).
__device__ __forceinline__ float tc_drop_factor(const TcGeom& g, int64_t t, int64_t i, int64_t j) {
  const int64_t e = (t * g.L + i) * g.S + j;
  const Philox4x32 r = Philox4x32::generate(philox_seed(g.spec), philox_offset(g.spec) + static_cast<uint64_t>(e / 4));
  return (r.v[e % 4] >> 8) >= g.threshold ? g.keep_scale : 0.0f;
}

// The sum or max of a row's value over the four lanes that hold the row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// q, k, v, out: 16-bit patterns of type M; out (N, L, H D) contiguous, lse
// (N, H, L) float32. Shared: the K and V tiles, kTcKeys rows of D + 8
// elements (the padding puts the rows a warp reads together in different banks).
template <MmaType M, int D>
__global__ void __launch_bounds__(kTcWarps * 32)
    tc_forward_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                      uint16_t* __restrict__ out, float* __restrict__ lse, TcGeom g) {
  constexpr int ld = D + 8, kSteps = D / 16, dBlocks = D / 8;
  EMBER_DYNAMIC_SHARED(uint16_t, smem);
  uint16_t* ks = smem;
  uint16_t* vs = ks + kTcKeys * ld;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int gr = lane / 4, tq = lane % 4;  // fragment row group and column pair
  const int64_t E = g.H * D, shift = g.S - g.L, tiles = (g.L + kTcQueries - 1) / kTcQueries;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    // The last query tiles see the most keys: they go first.
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, i0 = (tiles - 1 - b % tiles) * kTcQueries;
    const int64_t nq = g.L - i0 < kTcQueries ? g.L - i0 : kTcQueries;
    const int64_t r0 = i0 + 16 * warp;  // the warp's first row
    const uint16_t* qh = q + n * g.qs0 + h * D;
    const uint16_t* kh = k + n * g.ks0 + h * D;
    const uint16_t* vh = v + n * g.vs0 + h * D;
    // The warp's Q rows as A fragments (rows past L are zeros).
    uint32_t qa[kSteps][4];
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t i = r0 + gr + (r % 2 ? 8 : 0);
        const int c = 16 * kk + 2 * tq + (r >= 2 ? 8 : 0);
        const uint16_t* p = qh + i * g.qs1 + c;
        qa[kk][r] = i < g.L ? mma_pack(p[0], p[1]) : 0u;
      }
    float o[dBlocks][4];
#pragma unroll
    for (int d = 0; d < dBlocks; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m[2] = {neg_inf, neg_inf}, l[2] = {0.0f, 0.0f};  // rows gr and gr + 8
    const int64_t jend = i0 + nq + shift;                  // keys the tile's last query sees (<= S)
    for (int64_t j0 = 0; j0 < jend; j0 += kTcKeys) {
      __syncthreads();  // the previous tile's readers are done with ks, vs
      for (int idx = static_cast<int>(threadIdx.x); idx < kTcKeys * D; idx += kTcWarps * 32) {
        const int r = idx / D, d = idx % D;
        const int64_t j = j0 + r;
        // Keys past the tile's end are zeros: P is 0 there, and 0 * V stays 0.
        ks[r * ld + d] = j < jend ? kh[j * g.ks1 + d] : uint16_t(0);
        vs[r * ld + d] = j < jend ? vh[j * g.vs1 + d] : uint16_t(0);
      }
      __syncthreads();
      // Warp-uniform: rows past L, or none of the 16 rows seeing key j0.
      if (r0 >= g.L || r0 + 15 + shift < j0) continue;
      float s[8][4];  // S for keys j0 + 8 c + 2 tq + {0, 1}, rows gr and gr + 8
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.0f;
        const uint16_t* kr = ks + (8 * c + gr) * ld + 2 * tq;
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk) {
          const uint32_t bk[2] = {mma_pack(kr[16 * kk], kr[16 * kk + 1]), mma_pack(kr[16 * kk + 8], kr[16 * kk + 9])};
          mma_m16n8k16<M>(s[c], qa[kk], bk, s[c]);
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int64_t i = r0 + gr + 8 * hr;
        float mx = m[hr];
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t j = j0 + 8 * c + 2 * tq + e;
            const float x = j <= i + shift && j < jend ? s[c][2 * hr + e] * g.scale : neg_inf;
            s[c][2 * hr + e] = x;
            mx = fmaxf(mx, x);
          }
        mx = quad_max(mx);
        const float base = mx == neg_inf ? 0.0f : mx;  // a row with nothing visible yet
        const float corr = __expf(m[hr] - base);       // 0 while m is -inf
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float p = __expf(s[c][2 * hr + e] - base);
            sum += p;
            if (g.dropout && p != 0.0f && i < g.L) p *= tc_drop_factor(g, t, i, j0 + 8 * c + 2 * tq + e);
            s[c][2 * hr + e] = p;
          }
        l[hr] = l[hr] * corr + quad_sum(sum);
        m[hr] = mx;
#pragma unroll
        for (int d = 0; d < dBlocks; ++d) {
          o[d][2 * hr] *= corr;
          o[d][2 * hr + 1] *= corr;
        }
      }
      // O += P V: P's accumulator layout for key columns 16 kk .. 16 kk + 15
      // is the A fragment of step kk (column blocks 2 kk and 2 kk + 1).
#pragma unroll
      for (int kk = 0; kk < kTcKeys / 16; ++kk) {
        const uint32_t pa[4] = {mma_pack(mma_bits<M>(s[2 * kk][0]), mma_bits<M>(s[2 * kk][1])),
                                mma_pack(mma_bits<M>(s[2 * kk][2]), mma_bits<M>(s[2 * kk][3])),
                                mma_pack(mma_bits<M>(s[2 * kk + 1][0]), mma_bits<M>(s[2 * kk + 1][1])),
                                mma_pack(mma_bits<M>(s[2 * kk + 1][2]), mma_bits<M>(s[2 * kk + 1][3]))};
        const uint16_t* vr = vs + (16 * kk + 2 * tq) * ld + gr;
#pragma unroll
        for (int d = 0; d < dBlocks; ++d) {
          const uint16_t* p = vr + 8 * d;
          const uint32_t bv[2] = {mma_pack(p[0], p[ld]), mma_pack(p[8 * ld], p[9 * ld])};
          mma_m16n8k16<M>(o[d], pa, bv, o[d]);
        }
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t i = r0 + gr + 8 * hr;
      if (i >= g.L) continue;
      const float inv = 1.0f / l[hr];
      uint16_t* orow = out + n * g.L * E + i * E + h * D + 2 * tq;
#pragma unroll
      for (int d = 0; d < dBlocks; ++d) {
        orow[8 * d] = static_cast<uint16_t>(mma_bits<M>(o[d][2 * hr] * inv));
        orow[8 * d + 1] = static_cast<uint16_t>(mma_bits<M>(o[d][2 * hr + 1] * inv));
      }
      if (tq == 0) lse[t * g.L + i] = m[hr] + logf(l[hr]);
    }
  }
}

template <MmaType M, int D>
void launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const TcGeom& g, Tensor& out, Tensor& lse) {
  const int64_t blocks = g.N * g.H * ((g.L + kTcQueries - 1) / kTcQueries);
  if (blocks == 0) return;
  const size_t smem = 2 * kTcKeys * (D + 8) * sizeof(uint16_t);
  EMBER_CUDA_LAUNCH((tc_forward_kernel<M, D>), blocks_for(blocks, 1, 65535), kTcWarps * 32, smem, q.device().index,
                    static_cast<const uint16_t*>(q.data_ptr()), static_cast<const uint16_t*>(k.data_ptr()),
                    static_cast<const uint16_t*>(v.data_ptr()), static_cast<uint16_t*>(out.data_ptr()),
                    static_cast<float*>(lse.data_ptr()), g);
}

}  // namespace

// The forward for bfloat16 or float16 q, k, v (unit last stride) into out
// (N, L, E) of their dtype and lse (N, H, L) float32; head dims
// detail::cuda_causal_tensor_core takes.
void causal_forward_tensor_core(const Tensor& q, const Tensor& k, const Tensor& v,
                                const detail::CausalAttentionParams& pr, Tensor& out, Tensor& lse) {
  const int64_t D = q.size(2) / pr.heads;
  EMBER_CHECK(detail::cuda_causal_tensor_core(q.dtype(), D), ValueError,
              "causal_attention (cuda tensor cores): takes bfloat16 or float16 with head dim 64 or 128, got ",
              dtype_name(q.dtype()), " with head dim ", D);
  EMBER_CHECK(lse.dtype() == DType::Float32, ValueError,
              "causal_attention (cuda tensor cores): the log-sum-exp must be float32, got ", dtype_name(lse.dtype()));
  TcGeom g{};
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
  const bool bf16 = q.dtype() == DType::BFloat16;
  if (D == 64)
    bf16 ? launch_forward<MmaType::BFloat16, 64>(q, k, v, g, out, lse)
         : launch_forward<MmaType::Float16, 64>(q, k, v, g, out, lse);
  else
    bf16 ? launch_forward<MmaType::BFloat16, 128>(q, k, v, g, out, lse)
         : launch_forward<MmaType::Float16, 128>(q, k, v, g, out, lse);
}

}  // namespace ember::cuda
