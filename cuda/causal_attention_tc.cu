// The tensor-core forward of causal attention (ops/causal_attention.h) for
// bfloat16 and float16, head dims 64 and 128: FlashAttention 2's tiling on
// the warp-level m16n8k16 product of cuda/mma.cuh (cuda/causal_attention.cu
// dispatches to it; the backward is cuda/causal_attention_tc_bwd.cu).
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
// With Geom::causal off (multi_head_attention's fused path, cuda/attention.cu)
// every query sees all S keys: the same loop over every key tile, only the
// tails past S masked.
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
#include <ember/cuda/attention_tc.cuh>

namespace ember::cuda {
namespace {

using namespace attention_tc;

// q, k, v: 16-bit patterns of type M; out (N, L, H D) contiguous, lse
// (N, H, L) float32. Shared: kBuffers K and V tiles (Q's first, through the
// last V buffer).
template <MmaType M, int D>
__global__ void __launch_bounds__(kWarps * 32)
    tc_forward_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                      uint16_t* __restrict__ out, float* __restrict__ lse, Geom g) {
  constexpr int ld = D + kPad, dBlocks = D / 8, NB = kBuffers<D>;
  EMBER_DYNAMIC_SHARED(uint16_t, smem);
  auto ks = [&](int buf) { return smem + buf * kTile * ld; };
  auto vs = [&](int buf) { return smem + (NB + buf) * kTile * ld; };
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int gr = lane / 4, tq = lane % 4;  // fragment row group and column pair
  const int64_t E = g.H * D, shift = g.S - g.L, tiles = (g.L + kRows - 1) / kRows;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    // The last query tiles see the most keys: they go first.
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, i0 = (tiles - 1 - b % tiles) * kRows;
    const int64_t nq = g.L - i0 < kRows ? g.L - i0 : kRows;
    const int64_t r0 = i0 + 16 * warp;  // the warp's first row
    const uint16_t* kh = k + n * g.ks0 + h * D;
    const uint16_t* vh = v + n * g.vs0 + h * D;
    const int64_t jend = g.causal ? i0 + nq + shift : g.S;  // keys the tile's last query sees (<= S)
    // The Q tile passes through the last V buffer on its way to registers
    // while the first key tile (with one buffer: its K) is copied.
    __syncthreads();  // the previous task's readers are done with every buffer
    stage<D>(vs(NB - 1), q + n * g.qs0 + h * D, g.qs1, i0, g.L);
    cp_async_commit();
    if (jend > 0) {
      stage<D>(ks(0), kh, g.ks1, 0, jend);
      if (NB == 2) stage<D>(vs(0), vh, g.vs1, 0, jend);
    }
    cp_async_commit();
    cp_async_wait<1>();  // Q has landed (the key tile's copy may still run)
    __syncthreads();
    uint32_t qa[D / 16][4];  // the warp's Q rows as A fragments (rows past L are zeros)
    load_a<D>(qa, vs(NB - 1), ld, 16 * warp);
    float o[dBlocks][4];
    zero(o);
    float m[2] = {neg_inf, neg_inf}, l[2] = {0.0f, 0.0f};  // rows gr and gr + 8
    // Per key tile, two buffers: the next tile's K and V are copied while
    // this one's are used. One buffer: V's copy runs while S and the
    // softmax are computed, the next K's while O += P V is.
    int cur = 0;
    for (int64_t j0 = 0; j0 < jend; j0 += kTile, cur = NB - 1 - cur) {
      const bool next = j0 + kTile < jend;
      __syncthreads();  // every warp is done with the buffers the copies below fill
      if constexpr (NB == 2) {
        if (next) {
          stage<D>(ks(1 - cur), kh, g.ks1, j0 + kTile, jend);
          stage<D>(vs(1 - cur), vh, g.vs1, j0 + kTile, jend);
        }
      } else {
        stage<D>(vs(0), vh, g.vs1, j0, jend);
      }
      cp_async_commit();
      cp_async_wait<1>();  // this tile's K (and with two buffers its V) has landed
      __syncthreads();
      // Warp-uniform: rows past L, or none of the 16 rows seeing key j0.
      const bool active = r0 < g.L && !(g.causal && r0 + 15 + shift < j0);
      float s[kTile / 8][4];  // S for keys j0 + 8 c + 2 tq + {0, 1}, rows gr and gr + 8
      zero(s);
      if (active) {
        mma_rows<M, D>(s, qa, ks(cur), ld);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int64_t i = r0 + gr + 8 * hr;
          float mx = m[hr];
#pragma unroll
          for (int c = 0; c < kTile / 8; ++c)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t j = j0 + 8 * c + 2 * tq + e;
              const float x = visible(g, i, j) && j < jend ? s[c][2 * hr + e] * g.scale : neg_inf;
              s[c][2 * hr + e] = x;
              mx = fmaxf(mx, x);
            }
          mx = quad_max(mx);
          const float base = mx == neg_inf ? 0.0f : mx;  // a row with nothing visible yet
          const float corr = __expf(m[hr] - base);       // 0 while m is -inf
          float sum = 0.0f;
#pragma unroll
          for (int c = 0; c < kTile / 8; ++c)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float p = __expf(s[c][2 * hr + e] - base);
              sum += p;
              if (g.dropout && p != 0.0f && i < g.L) p *= drop_factor(g, t, i, j0 + 8 * c + 2 * tq + e);
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
      }
      if constexpr (NB == 1) {
        cp_async_wait<0>();  // this tile's V has landed
        __syncthreads();     // and every warp is done with ks
        if (next) stage<D>(ks(0), kh, g.ks1, j0 + kTile, jend);
        cp_async_commit();
      }
      if (active) mma_cols<M, D>(o, s, vs(cur), ld);  // O += P V, P rounded to M
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
void launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Geom& g, Tensor& out, Tensor& lse) {
  const int64_t blocks = g.N * g.H * ((g.L + kRows - 1) / kRows);
  if (blocks == 0) return;
  const size_t smem = 2 * kBuffers<D> * kTile * (D + kPad) * sizeof(uint16_t);
  EMBER_CUDA_LAUNCH((tc_forward_kernel<M, D>), blocks_for(blocks, 1, 65535), kWarps * 32, smem, q.device().index,
                    static_cast<const uint16_t*>(q.data_ptr()), static_cast<const uint16_t*>(k.data_ptr()),
                    static_cast<const uint16_t*>(v.data_ptr()), static_cast<uint16_t*>(out.data_ptr()),
                    static_cast<float*>(lse.data_ptr()), g);
}

}  // namespace

namespace attention_tc {

// The forward for bfloat16 or float16 q, k, v (unit last stride) into out
// (N, L, E) of their dtype and lse (N, H, L) float32, causal or not as g
// says; head dims 64 and 128 (the callers check).
void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Geom& g, Tensor& out, Tensor& lse) {
  const int64_t D = q.size(2) / g.H;
  const bool bf16 = q.dtype() == DType::BFloat16;
  if (D == 64)
    bf16 ? launch_forward<MmaType::BFloat16, 64>(q, k, v, g, out, lse)
         : launch_forward<MmaType::Float16, 64>(q, k, v, g, out, lse);
  else
    bf16 ? launch_forward<MmaType::BFloat16, 128>(q, k, v, g, out, lse)
         : launch_forward<MmaType::Float16, 128>(q, k, v, g, out, lse);
}

}  // namespace attention_tc

// The causal forward: head dims detail::cuda_causal_tensor_core takes.
void causal_forward_tensor_core(const Tensor& q, const Tensor& k, const Tensor& v,
                                const detail::CausalAttentionParams& pr, Tensor& out, Tensor& lse) {
  const int64_t D = q.size(2) / pr.heads;
  EMBER_CHECK(detail::cuda_causal_tensor_core(q.dtype(), D), ValueError,
              "causal_attention (cuda tensor cores): takes bfloat16 or float16 with head dim 64 or 128, got ",
              dtype_name(q.dtype()), " with head dim ", D);
  EMBER_CHECK(lse.dtype() == DType::Float32, ValueError,
              "causal_attention (cuda tensor cores): the log-sum-exp must be float32, got ", dtype_name(lse.dtype()));
  attention_tc::forward(q, k, v, attention_tc::make_geom(q, k, v, pr, true), out, lse);
}

}  // namespace ember::cuda
