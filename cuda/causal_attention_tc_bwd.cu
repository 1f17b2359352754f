// The tensor-core backward of causal attention for bfloat16 and float16,
// head dims 64 and 128 (the forward is cuda/causal_attention_tc.cu):
// FlashAttention 2's backward on the m16n8k16 product, in three launches
// and without atomics (deterministic, as the float32 kernels of
// cuda/causal_attention.cu):
//   Delta_i = dO_i . O_i                         one thread per row, float32
//   dQ:     per 64-query block (a warp per 16 rows), over 64-key tiles:
//           S = Q K^T, P = exp(S scale - lse), dP = dO V^T,
//           dS = P (dP f - Delta), dQ += dS K          (dQ scale at the end)
//   dK, dV: per 64-key block (a warp per 16 keys), over 64-query tiles from
//           the first query that sees the block: the same terms transposed,
//           S^T = K Q^T and dP^T = V dO^T (K and V rows held as A fragments),
//           dV += (P f)^T dO, dK += dS^T Q             (dK scale at the end)
// Products take 16-bit operands and accumulate in float32; P and dS are
// rounded to the input type before their products, as FA2 does. f is the
// forward's dropout factor, drawn again from the same Philox counters.
// With Geom::causal off (cuda/attention.cu) every query sees every key:
// the dK/dV loop starts at query 0 and no tile is skipped.
#include <cmath>
#include <cstdint>

#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/factory.h>
#include <ember/cuda/attention_tc.cuh>

namespace ember::cuda {
namespace {

using namespace attention_tc;

// Pointers and strides of the backward's other tensors (dq, dk, dv null when not wanted).
struct Grads {
  const uint16_t* g;  // dO
  int64_t gs0, gs1;
  const float *lse, *delta;
  uint16_t *dq, *dk, *dv;
  int64_t dqs0, dqs1, dks0, dks1, dvs0, dvs1;
};

// Delta_i = sum_d dO_id O_id: softmax's backward needs sum_j dW_ij W_ij,
// which equals dO_i . O_i (O = (W f) V). out is (N, L, H D) contiguous.
template <MmaType M, int D>
__global__ void tc_delta_kernel(Grads gd, const uint16_t* __restrict__ out, float* __restrict__ delta, Geom g) {
  const int64_t E = g.H * D;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < g.N * g.H * g.L;
       row += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = row / g.L, i = row % g.L, n = t / g.H, h = t % g.H;
    const uint16_t* gr = gd.g + n * gd.gs0 + i * gd.gs1 + h * D;
    const uint16_t* o = out + n * g.L * E + i * E + h * D;
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += mma_float<M>(gr[d]) * mma_float<M>(o[d]);
    delta[row] = s;
  }
}

// Writes a warp's 16 x D accumulators times mul to rows r0 + g, r0 + g + 8
// of dst (row stride rs) that are below lim.
template <MmaType M, int D>
__device__ __forceinline__ void store_rows(uint16_t* dst, int64_t rs, int64_t r0, int64_t lim,
                                           const float (&acc)[D / 8][4], float mul) {
  const int lane = static_cast<int>(threadIdx.x % 32), gr = lane / 4, tq = lane % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = r0 + gr + 8 * hr;
    if (i >= lim) continue;
    uint16_t* row = dst + i * rs + 2 * tq;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      row[8 * d] = static_cast<uint16_t>(mma_bits<M>(acc[d][2 * hr] * mul));
      row[8 * d + 1] = static_cast<uint16_t>(mma_bits<M>(acc[d][2 * hr + 1] * mul));
    }
  }
}

// dQ (the file comment). Shared: kBuffers K and V tiles (Q's and dO's
// first, through the last buffers).
template <MmaType M, int D>
__global__ void __launch_bounds__(kWarps * 32)
    tc_dq_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                 Grads gd, Geom g) {
  constexpr int ld = D + kPad, NB = kBuffers<D>;
  EMBER_DYNAMIC_SHARED(uint16_t, smem);
  auto ks = [&](int buf) { return smem + buf * kTile * ld; };
  auto vs = [&](int buf) { return smem + (NB + buf) * kTile * ld; };
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int gr = lane / 4, tq = lane % 4;
  const int64_t shift = g.S - g.L, tiles = (g.L + kRows - 1) / kRows;
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, i0 = (tiles - 1 - b % tiles) * kRows;
    const int64_t nq = g.L - i0 < kRows ? g.L - i0 : kRows;
    const int64_t r0 = i0 + 16 * warp;
    const uint16_t* kh = k + n * g.ks0 + h * D;
    const uint16_t* vh = v + n * g.vs0 + h * D;
    const int64_t jend = g.causal ? i0 + nq + shift : g.S;
    // The Q and dO tiles pass through the last K and V buffers on their way to registers.
    __syncthreads();  // the previous task's readers are done with every buffer
    stage<D>(ks(NB - 1), q + n * g.qs0 + h * D, g.qs1, i0, g.L);
    stage<D>(vs(NB - 1), gd.g + n * gd.gs0 + h * D, gd.gs1, i0, g.L);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[D / 16][4], ga[D / 16][4];  // the warp's Q and dO rows
    load_a<D>(qa, ks(NB - 1), ld, 16 * warp);
    load_a<D>(ga, vs(NB - 1), ld, 16 * warp);
    float ls[2], dl[2];  // lse and Delta of rows gr, gr + 8
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t i = r0 + gr + 8 * hr;
      ls[hr] = i < g.L ? gd.lse[t * g.L + i] : 0.0f;
      dl[hr] = i < g.L ? gd.delta[t * g.L + i] : 0.0f;
    }
    float dq[D / 8][4];
    zero(dq);
    __syncthreads();  // every warp has its Q and dO rows
    if (jend > 0) {
      stage<D>(ks(0), kh, g.ks1, 0, jend);
      stage<D>(vs(0), vh, g.vs1, 0, jend);
    }
    cp_async_commit();
    // Per key tile, two buffers: the next tile's K and V are copied while
    // this one's are used. One buffer: the next V's copy runs while dS and
    // dQ += dS K are computed.
    int cur = 0;
    for (int64_t j0 = 0; j0 < jend; j0 += kTile, cur = NB - 1 - cur) {
      const bool next = j0 + kTile < jend;
      if constexpr (NB == 2) {
        __syncthreads();  // every warp is done with the other buffers
        if (next) {
          stage<D>(ks(1 - cur), kh, g.ks1, j0 + kTile, jend);
          stage<D>(vs(1 - cur), vh, g.vs1, j0 + kTile, jend);
        }
        cp_async_commit();
        cp_async_wait<1>();  // this tile's K and V have landed
      } else {
        cp_async_wait<0>();  // this tile's K and V have landed
      }
      __syncthreads();
      const bool active = r0 < g.L && !(g.causal && r0 + 15 + shift < j0);  // warp-uniform
      float s[kTile / 8][4], dp[kTile / 8][4];
      zero(s);
      zero(dp);
      if (active) {
        mma_rows<M, D>(s, qa, ks(cur), ld);   // S = Q K^T
        mma_rows<M, D>(dp, ga, vs(cur), ld);  // dP = dO V^T
      }
      if constexpr (NB == 1) {
        __syncthreads();  // every warp is done with vs
        if (next) stage<D>(vs(0), vh, g.vs1, j0 + kTile, jend);
        cp_async_commit();
      }
      if (active) {
#pragma unroll
        for (int c = 0; c < kTile / 8; ++c)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int64_t i = r0 + gr + 8 * (x / 2), j = j0 + 8 * c + 2 * tq + x % 2;
            const bool seen = i < g.L && visible(g, i, j) && j < jend;
            const float p = seen ? __expf(s[c][x] * g.scale - ls[x / 2]) : 0.0f;
            const float f = g.dropout && p != 0.0f ? drop_factor(g, t, i, j) : 1.0f;
            s[c][x] = p * (dp[c][x] * f - dl[x / 2]);  // dS
          }
        mma_cols<M, D>(dq, s, ks(cur), ld);  // dQ += dS K
      }
      if constexpr (NB == 1) {
        __syncthreads();  // every warp is done with ks
        if (next) stage<D>(ks(0), kh, g.ks1, j0 + kTile, jend);
        cp_async_commit();
      }
    }
    if (r0 < g.L) store_rows<M, D>(gd.dq + n * gd.dqs0 + h * D, gd.dqs1, r0, g.L, dq, g.scale);
  }
}

// dK and dV (the file comment). Shared: kBuffers Q and dO tiles (K's and
// V's first, through the last buffers), then their lse and Delta.
template <MmaType M, int D>
__global__ void __launch_bounds__(kWarps * 32)
    tc_dkdv_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                   Grads gd, Geom g) {
  constexpr int ld = D + kPad, NB = kBuffers<D>;
  EMBER_DYNAMIC_SHARED(uint16_t, smem);
  auto qs = [&](int buf) { return smem + buf * kTile * ld; };
  auto gs = [&](int buf) { return smem + (NB + buf) * kTile * ld; };
  // After 2 NB tiles of kTile (D + kPad) 16-bit elements: 16-byte aligned.
  float* const stats = reinterpret_cast<float*>(smem + 2 * NB * kTile * ld);
  auto lses = [&](int buf) { return stats + 2 * buf * kTile; };
  auto deltas = [&](int buf) { return stats + (2 * buf + 1) * kTile; };
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int gr = lane / 4, tq = lane % 4;
  const int64_t shift = g.S - g.L, tiles = (g.S + kRows - 1) / kRows;
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    // The first key tiles are seen by the most queries: they go first.
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, j0 = (b % tiles) * kRows;
    const int64_t r0 = j0 + 16 * warp;  // the warp's first key
    const uint16_t* qh = q + n * g.qs0 + h * D;
    const uint16_t* gh = gd.g + n * gd.gs0 + h * D;
    // lse and Delta of query tile i0 into buffer buf (plain loads).
    auto stage_stats = [&](int buf, int64_t i0) {
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        lses(buf)[threadIdx.x] = i < g.L ? gd.lse[t * g.L + i] : 0.0f;
        deltas(buf)[threadIdx.x] = i < g.L ? gd.delta[t * g.L + i] : 0.0f;
      }
    };
    // The K and V rows pass through the last buffers on their way to registers.
    __syncthreads();  // the previous task's readers are done with every buffer
    stage<D>(qs(NB - 1), k + n * g.ks0 + h * D, g.ks1, j0, g.S);
    stage<D>(gs(NB - 1), v + n * g.vs0 + h * D, g.vs1, j0, g.S);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t ka[D / 16][4], va[D / 16][4];  // the warp's K and V rows
    load_a<D>(ka, qs(NB - 1), ld, 16 * warp);
    load_a<D>(va, gs(NB - 1), ld, 16 * warp);
    float dk[D / 8][4], dv[D / 8][4];
    zero(dk);
    zero(dv);
    // The first query that sees key j0: i + S - L >= j0 (causal), else 0.
    const int64_t istart = g.causal && j0 - shift > 0 ? j0 - shift : 0;
    __syncthreads();  // every warp has its K and V rows
    if (istart < g.L) {
      stage<D>(qs(0), qh, g.qs1, istart, g.L);
      stage<D>(gs(0), gh, gd.gs1, istart, g.L);
      stage_stats(0, istart);
    }
    cp_async_commit();
    // Per query tile, two buffers: the next tile's Q, dO, lse and Delta are
    // copied while this one's are used. One buffer: the next dO's copy runs
    // while dK += dS^T Q is computed, the next Q's between tiles.
    int cur = 0;
    for (int64_t i0 = istart; i0 < g.L; i0 += kTile, cur = NB - 1 - cur) {
      const bool next = i0 + kTile < g.L;
      if constexpr (NB == 2) {
        __syncthreads();  // every warp is done with the other buffers
        if (next) {
          stage<D>(qs(1 - cur), qh, g.qs1, i0 + kTile, g.L);
          stage<D>(gs(1 - cur), gh, gd.gs1, i0 + kTile, g.L);
          stage_stats(1 - cur, i0 + kTile);
        }
        cp_async_commit();
        cp_async_wait<1>();  // this tile's Q and dO have landed
      } else {
        if (i0 != istart) stage_stats(0, i0);  // no warp reads them since the last barrier
        cp_async_wait<0>();                    // this tile's Q and dO have landed
      }
      __syncthreads();
      // Warp-uniform: no key of the warp seen.
      const bool active = r0 < g.S && !(g.causal && i0 + kTile - 1 + shift < r0);
      const float* lt = lses(cur);
      const float* dt = deltas(cur);
      float st[kTile / 8][4], dpt[kTile / 8][4];
      zero(st);
      zero(dpt);
      if (active) {
        mma_rows<M, D>(st, ka, qs(cur), ld);   // S^T = K Q^T
        mma_rows<M, D>(dpt, va, gs(cur), ld);  // dP^T = V dO^T
#pragma unroll
        for (int c = 0; c < kTile / 8; ++c)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const int col = 8 * c + 2 * tq + x % 2;  // the query's place in the tile
            const int64_t j = r0 + gr + 8 * (x / 2), i = i0 + col;
            const bool seen = i < g.L && j < g.S && visible(g, i, j);
            const float p = seen ? __expf(st[c][x] * g.scale - lt[col]) : 0.0f;
            const float f = g.dropout && p != 0.0f ? drop_factor(g, t, i, j) : 1.0f;
            st[c][x] = p * f;                           // (P f)^T
            dpt[c][x] = p * (dpt[c][x] * f - dt[col]);  // dS^T
          }
        mma_cols<M, D>(dv, st, gs(cur), ld);  // dV += (P f)^T dO
      }
      if constexpr (NB == 1) {
        __syncthreads();  // every warp is done with gs
        if (next) stage<D>(gs(0), gh, gd.gs1, i0 + kTile, g.L);
        cp_async_commit();
      }
      if (active) mma_cols<M, D>(dk, dpt, qs(cur), ld);  // dK += dS^T Q
      if constexpr (NB == 1) {
        __syncthreads();  // every warp is done with qs, lse and Delta
        if (next) stage<D>(qs(0), qh, g.qs1, i0 + kTile, g.L);
        cp_async_commit();
      }
    }
    if (r0 < g.S) {
      if (gd.dk) store_rows<M, D>(gd.dk + n * gd.dks0 + h * D, gd.dks1, r0, g.S, dk, g.scale);
      if (gd.dv) store_rows<M, D>(gd.dv + n * gd.dvs0 + h * D, gd.dvs1, r0, g.S, dv, 1.0f);
    }
  }
}

template <MmaType M, int D>
void launch_backward(const Tensor& gr, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, const Geom& g, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int dev = q.device().index;
  Tensor delta = empty({g.N, g.H, g.L}, TensorOptions(DType::Float32, q.device()));
  Grads gd{};
  fill_grads<uint16_t>(gd, gr, lse, delta, dq, dk, dv);
  const auto qp = static_cast<const uint16_t*>(q.data_ptr());
  const auto kp = static_cast<const uint16_t*>(k.data_ptr());
  const auto vp = static_cast<const uint16_t*>(v.data_ptr());
  const int64_t rows = g.N * g.H * g.L;
  if (rows > 0)
    EMBER_CUDA_LAUNCH((tc_delta_kernel<M, D>), blocks_for(rows, 128, 4096), 128, 0, dev, gd,
                      static_cast<const uint16_t*>(out.data_ptr()), static_cast<float*>(delta.data_ptr()), g);
  const size_t smem = 2 * kBuffers<D> * kTile * (D + kPad) * sizeof(uint16_t);
  const int64_t qblocks = g.N * g.H * ((g.L + kRows - 1) / kRows);
  if (gd.dq && qblocks > 0)
    EMBER_CUDA_LAUNCH((tc_dq_kernel<M, D>), blocks_for(qblocks, 1, 65535), kWarps * 32, smem, dev, qp, kp, vp, gd, g);
  // With L = 0 the query loop is empty and the blocks write zeros.
  const int64_t kblocks = g.N * g.H * ((g.S + kRows - 1) / kRows);
  if ((gd.dk || gd.dv) && kblocks > 0)
    EMBER_CUDA_LAUNCH((tc_dkdv_kernel<M, D>), blocks_for(kblocks, 1, 65535), kWarps * 32,
                      smem + 2 * kBuffers<D> * kTile * sizeof(float), dev, qp, kp, vp, gd, g);
}

}  // namespace

namespace attention_tc {

// The backward of attention_tc::forward: gr (dO) of q's dtype with unit last
// stride, q, k, v and out as the forward had them, its float32 lse; dq, dk,
// dv views of q's dtype with unit last stride, or undefined.
void backward(const Tensor& gr, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
              const Geom& g, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t D = q.size(2) / g.H;
  const bool bf16 = q.dtype() == DType::BFloat16;
  if (D == 64)
    bf16 ? launch_backward<MmaType::BFloat16, 64>(gr, q, k, v, out, lse, g, dq, dk, dv)
         : launch_backward<MmaType::Float16, 64>(gr, q, k, v, out, lse, g, dq, dk, dv);
  else
    bf16 ? launch_backward<MmaType::BFloat16, 128>(gr, q, k, v, out, lse, g, dq, dk, dv)
         : launch_backward<MmaType::Float16, 128>(gr, q, k, v, out, lse, g, dq, dk, dv);
}

}  // namespace attention_tc

// The backward of causal_forward_tensor_core.
void causal_backward_tensor_core(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse, const detail::CausalAttentionParams& pr, Tensor& dq, Tensor& dk,
                                 Tensor& dv) {
  const int64_t D = q.size(2) / pr.heads;
  EMBER_CHECK(detail::cuda_causal_tensor_core(q.dtype(), D) && g.dtype() == q.dtype(), ValueError,
              "causal_attention backward (cuda tensor cores): takes bfloat16 or float16 with head dim 64 or 128, got ",
              dtype_name(q.dtype()), " with head dim ", D, " and a ", dtype_name(g.dtype()), " gradient");
  attention_tc::backward(g, q, k, v, out, lse, make_geom(q, k, v, pr, true), dq, dk, dv);
}

}  // namespace ember::cuda
