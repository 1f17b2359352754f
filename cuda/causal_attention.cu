// CUDA kernels of ops/causal_attention.cpp: causal multi-head attention as
// FlashAttention, float32 and float64, head dims up to
// detail::kCudaCausalMaxHeadDim (wider heads take the op's composed path);
// bfloat16 and float16 (head dims 64 and 128) run on tensor cores in
// cuda/causal_attention_tc.cu (forward) and cuda/causal_attention_tc_bwd.cu.
//
// Forward: one block of kWarps warps per (batch entry, head, query tile of
// kWarps * rows queries); each warp owns `rows` queries, its lanes own the
// keys of a shared-memory tile of K and V (scores) and then four columns of
// D each (the output accumulators). Key tiles wholly above the diagonal are
// never loaded; the row max m and sum l run online as on the CPU, and only
// the row log-sum-exp m + log l is written. Scores are never stored beyond
// one tile row per query (no L x S buffer).
//
// Backward recomputes the weights from the log-sum-exp, in three launches
// and without atomics (so it is deterministic, like every other kernel
// here): Delta_i = dO_i . O_i (one thread per row); dQ (blocks over query
// tiles, lanes over keys, as the forward); dK and dV (blocks over key tiles,
// lanes over queries: the same terms transposed).
//
// Dropout: element e of the (N, H, L, S) weights is kept when word e % 4 of
// Philox counter offset + e / 4 passes dropout_threshold(p), exactly as
// cuda/dropout.cu, cpu_dropout and the CPU's fused kernel draw it; so the
// forward and backward here, the CPU kernel and the composed path all drop
// the same weights.
#include <cmath>
#include <limits>

#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/cuda/attention_geometry.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/dropout.h>
#include <ember/ops/factory.h>
#include <ember/ops/functors.h>
#include <ember/cuda/block_reduce.cuh>

namespace ember::cuda {

// cuda/causal_attention_tc.cu and _tc_bwd.cu: bfloat16 and float16 on tensor cores.
void causal_forward_tensor_core(const Tensor& q, const Tensor& k, const Tensor& v,
                                const detail::CausalAttentionParams& pr, Tensor& out, Tensor& lse);
void causal_backward_tensor_core(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                 const Tensor& lse, const detail::CausalAttentionParams& pr, Tensor& dq, Tensor& dk,
                                 Tensor& dv);

namespace {

using detail::CausalAttentionParams;

constexpr int kWarps = 4;    // warps per block: 128 threads
constexpr int kMaxRows = 4;  // rows (queries, or keys in dK/dV) one warp owns
constexpr int kMaxCols = static_cast<int>(detail::kCudaCausalMaxHeadDim / 32);  // D columns per lane
constexpr size_t kSharedBudget = 48 * 1024;  // dynamic shared memory without an opt-in

// Everything a kernel needs besides pointers. Strides are in elements; a
// head's columns start at h * D of a row.
template <class T>
struct Geom {
  int64_t N, H, L, S, D;
  int64_t qs0, qs1, ks0, ks1, vs0, vs1;
  T scale;             // 1 / sqrt(D)
  bool dropout;        // p > 0
  RandomSpec spec;     // the Philox stream of the draws
  uint32_t threshold;  // dropout_threshold(p)
  T keep_scale;        // 1 / (1 - p)
  int rows;            // rows per warp (<= kMaxRows); a block owns kWarps * rows
  int bt;              // keys (forward, dQ) or queries (dK/dV) per shared tile, <= 32
};

// The dropout multiplier of weight (task t, query i, key j): 0 or 1/(1-p).
template <class T>
__device__ __forceinline__ T drop_factor(const Geom<T>& g, int64_t t, int64_t i, int64_t j) {
  const int64_t e = (t * g.L + i) * g.S + j;
  const Philox4x32 r = Philox4x32::generate(philox_seed(g.spec), philox_offset(g.spec) + static_cast<uint64_t>(e / 4));
  return (r.v[e % 4] >> 8) >= g.threshold ? g.keep_scale : T(0);
}

template <class T>
__device__ __forceinline__ T dot(const T* a, const T* b, int64_t D) {
  T s = 0;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

template <class T>
__device__ __forceinline__ T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// Copies rows [r0, r0 + n) of a (row stride rs, head offset col) into
// shared dst (row stride ld), the whole block cooperating; rows past n are
// left as they are (no lane reads them).
template <class T>
__device__ __forceinline__ void load_rows(T* dst, int64_t ld, const T* src, int64_t rs, int64_t r0, int64_t n,
                                          int64_t D) {
  for (int64_t idx = threadIdx.x; idx < n * D; idx += blockDim.x) {
    const int64_t r = idx / D, d = idx % D;
    dst[r * ld + d] = src[(r0 + r) * rs + d];
  }
}

// Forward. Per query row i (a warp), over the key tiles it sees:
//   s_j = q_i . k_j scale (lane j);  m' = max(m, max_j s_j);  p_j = exp(s_j - m');
//   l = l exp(m - m') + sum_j p_j;  acc = acc exp(m - m') + sum_j (p_j f_ij) v_j;
// then O_i = acc / l and lse_i = m + log l. l takes p before dropout (softmax
// normalises the undropped weights), acc after, as on the CPU.
// Shared: K and V tiles (bt x (D + 1), padded so lanes reading rows j at
// one column hit different banks), the block's Q rows, one row of p per query.
template <class T>
__global__ void forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                               T* __restrict__ out, T* __restrict__ lse, Geom<T> g) {
  EMBER_DYNAMIC_SHARED(T, smem);
  const int64_t D = g.D, ld = D + 1, E = g.H * D, br = kWarps * g.rows;
  T* ks = smem;
  T* vs = ks + g.bt * ld;
  T* qs = vs + g.bt * ld;
  T* ps = qs + br * D;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tiles = (g.L + br - 1) / br;
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, i0 = (b % tiles) * br;
    const int64_t nq = g.L - i0 < br ? g.L - i0 : br;
    const T* qh = q + n * g.qs0 + h * D;
    const T* kh = k + n * g.ks0 + h * D;
    const T* vh = v + n * g.vs0 + h * D;
    __syncthreads();  // the previous task's readers are done with qs
    load_rows(qs, D, qh, g.qs1, i0, nq, D);
    T m[kMaxRows], l[kMaxRows], acc[kMaxRows][kMaxCols];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      m[r] = neg_inf<T>();
      l[r] = 0;
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) acc[r][c] = 0;
    }
    const int64_t jend = i0 + nq + g.S - g.L;  // keys the block's last query sees
    for (int64_t j0 = 0; j0 < jend; j0 += g.bt) {
      const int64_t bc = jend - j0 < g.bt ? jend - j0 : g.bt;
      __syncthreads();  // the previous tile's readers are done with ks, vs
      load_rows(ks, ld, kh, g.ks1, j0, bc, D);
      load_rows(vs, ld, vh, g.vs1, j0, bc, D);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        const int64_t rr = r * kWarps + warp, i = i0 + rr;
        if (r >= g.rows || rr >= nq) continue;  // the same for the whole warp
        int64_t nv = i + g.S - g.L - j0 + 1;    // keys of this tile query i sees
        nv = nv < bc ? nv : bc;
        if (nv <= 0) continue;
        T s = neg_inf<T>();
        if (lane < nv) s = dot(qs + rr * D, ks + lane * ld, D) * g.scale;
        T mx = warp_reduce(s, MaxOp{});
        mx = m[r] > mx ? m[r] : mx;
        T p = lane < nv ? fn::hd::exp(s - mx) : T(0);
        const T corr = m[r] == neg_inf<T>() ? T(0) : fn::hd::exp(m[r] - mx);
        l[r] = l[r] * corr + warp_reduce(p, SumOp{});
        m[r] = mx;
        if (g.dropout && lane < nv) p *= drop_factor(g, t, i, j0 + lane);
        ps[rr * 32 + lane] = p;
        __syncwarp();  // the warp's p row is written
#pragma unroll
        for (int c = 0; c < kMaxCols; ++c) {
          const int64_t d = lane + 32 * c;
          if (d >= D) break;
          T a = acc[r][c] * corr;
          for (int64_t j = 0; j < nv; ++j) a += ps[rr * 32 + j] * vs[j * ld + d];
          acc[r][c] = a;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      const int64_t rr = r * kWarps + warp, i = i0 + rr;
      if (r >= g.rows || rr >= nq) continue;
      const T inv = T(1) / l[r];
      T* orow = out + n * g.L * E + i * E + h * D;
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c)
        if (lane + 32 * c < D) orow[lane + 32 * c] = acc[r][c] * inv;
      if (lane == 0) lse[t * g.L + i] = m[r] + fn::hd::log(l[r]);
    }
  }
}

// Delta_i = rowsum(dO_i * O_i): softmax's backward needs sum_j dW_ij W_ij,
// which equals dO_i . O_i because O_i = sum_j (W_ij f_ij) v_j. One thread per
// (task, query) row.
template <class T>
__global__ void delta_kernel(const T* __restrict__ gr, int64_t gs0, int64_t gs1, const T* __restrict__ out,
                             T* __restrict__ delta, int64_t N, int64_t H, int64_t L, int64_t D) {
  const int64_t E = H * D;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < N * H * L;
       row += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = row / L, i = row % L, n = t / H, h = t % H;
    delta[row] = dot(gr + n * gs0 + i * gs1 + h * D, out + n * L * E + i * E + h * D, D);
  }
}

// Pointers and strides of the backward's tensors (dq, dk, dv null when not wanted).
template <class T>
struct Grads {
  const T *g, *lse, *delta;
  int64_t gs0, gs1;
  T *dq, *dk, *dv;
  int64_t dqs0, dqs1, dks0, dks1, dvs0, dvs1;
};

// dQ, per query row i (a warp), lanes over the keys j of a tile:
//   term 1: P_ij  = exp(q_i . k_j scale - lse_i)    (the forward's weight, recomputed)
//   term 2: dP_ij = dO_i . v_j                      (dP = dO V^T, the gradient of P * f)
//   term 3: dS_ij = P_ij (dP_ij f_ij - Delta_i)     (dS = P * (dP - D): back through
//           dropout, then softmax, with D_i = Delta_i from delta_kernel)
//   term 4: dQ_i  = scale sum_j dS_ij k_j           (dQ = dS K scale)
// Shared: K and V tiles as the forward, the block's Q and dO rows, one dS row per query.
template <class T>
__global__ void dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, Grads<T> gd,
                          Geom<T> g) {
  EMBER_DYNAMIC_SHARED(T, smem);
  const int64_t D = g.D, ld = D + 1, br = kWarps * g.rows;
  T* ks = smem;
  T* vs = ks + g.bt * ld;
  T* qs = vs + g.bt * ld;
  T* gs = qs + br * D;
  T* dss = gs + br * D;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tiles = (g.L + br - 1) / br;
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, i0 = (b % tiles) * br;
    const int64_t nq = g.L - i0 < br ? g.L - i0 : br;
    const T* kh = k + n * g.ks0 + h * D;
    const T* vh = v + n * g.vs0 + h * D;
    __syncthreads();  // the previous task's readers are done with qs, gs
    load_rows(qs, D, q + n * g.qs0 + h * D, g.qs1, i0, nq, D);
    load_rows(gs, D, gd.g + n * gd.gs0 + h * D, gd.gs1, i0, nq, D);
    T acc[kMaxRows][kMaxCols];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) acc[r][c] = 0;
    const int64_t jend = i0 + nq + g.S - g.L;
    for (int64_t j0 = 0; j0 < jend; j0 += g.bt) {
      const int64_t bc = jend - j0 < g.bt ? jend - j0 : g.bt;
      __syncthreads();
      load_rows(ks, ld, kh, g.ks1, j0, bc, D);
      load_rows(vs, ld, vh, g.vs1, j0, bc, D);
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        const int64_t rr = r * kWarps + warp, i = i0 + rr;
        if (r >= g.rows || rr >= nq) continue;
        int64_t nv = i + g.S - g.L - j0 + 1;
        nv = nv < bc ? nv : bc;
        if (nv <= 0) continue;
        T ds = 0;
        if (lane < nv) {
          const T p = fn::hd::exp(dot(qs + rr * D, ks + lane * ld, D) * g.scale - gd.lse[t * g.L + i]);  // term 1
          T dp = dot(gs + rr * D, vs + lane * ld, D);                                                    // term 2
          if (g.dropout) dp *= drop_factor(g, t, i, j0 + lane);
          ds = p * (dp - gd.delta[t * g.L + i]);  // term 3
        }
        dss[rr * 32 + lane] = ds;
        __syncwarp();
#pragma unroll
        for (int c = 0; c < kMaxCols; ++c) {
          const int64_t d = lane + 32 * c;
          if (d >= D) break;
          T a = acc[r][c];
          for (int64_t j = 0; j < nv; ++j) a += dss[rr * 32 + j] * ks[j * ld + d];  // term 4
          acc[r][c] = a;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      const int64_t rr = r * kWarps + warp, i = i0 + rr;
      if (r >= g.rows || rr >= nq) continue;
      T* drow = gd.dq + n * gd.dqs0 + i * gd.dqs1 + h * D;
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c)
        if (lane + 32 * c < D) drow[lane + 32 * c] = acc[r][c] * g.scale;
    }
  }
}

// dK and dV, per key row j (a warp), lanes over the queries i of a tile
// (only queries i >= j - (S - L) see key j; earlier query tiles are skipped):
//   terms 1-3: P_ij, dP_ij, dS_ij as in dq_kernel;
//   term 4: dV_j = sum_i (P_ij f_ij) dO_i           (dV = P^T dO, P with dropout applied)
//   term 5: dK_j = scale sum_i dS_ij q_i            (dK = dS^T Q scale)
// Shared: Q and dO tiles (bt x (D + 1)), their lse and Delta, the block's K
// and V rows, one row of P f and of dS per key.
template <class T>
__global__ void dkdv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, Grads<T> gd,
                            Geom<T> g) {
  EMBER_DYNAMIC_SHARED(T, smem);
  const int64_t D = g.D, ld = D + 1, br = kWarps * g.rows;
  T* qs = smem;
  T* gs = qs + g.bt * ld;
  T* ks = gs + g.bt * ld;
  T* vs = ks + br * D;
  T* pfs = vs + br * D;
  T* dss = pfs + br * 32;
  T* lses = dss + br * 32;
  T* deltas = lses + 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tiles = (g.S + br - 1) / br;
  for (int64_t b = blockIdx.x; b < g.N * g.H * tiles; b += gridDim.x) {
    const int64_t t = b / tiles, n = t / g.H, h = t % g.H, j0 = (b % tiles) * br;
    const int64_t nk = g.S - j0 < br ? g.S - j0 : br;
    const T* qh = q + n * g.qs0 + h * D;
    const T* gh = gd.g + n * gd.gs0 + h * D;
    __syncthreads();  // the previous task's readers are done with ks, vs
    load_rows(ks, D, k + n * g.ks0 + h * D, g.ks1, j0, nk, D);
    load_rows(vs, D, v + n * g.vs0 + h * D, g.vs1, j0, nk, D);
    T dk[kMaxRows][kMaxCols], dv[kMaxRows][kMaxCols];
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r)
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) dk[r][c] = dv[r][c] = 0;
    // The first query that sees key j0: i + S - L >= j0.
    const int64_t istart = j0 - (g.S - g.L) > 0 ? j0 - (g.S - g.L) : 0;
    for (int64_t i0 = istart; i0 < g.L; i0 += g.bt) {
      const int64_t bq = g.L - i0 < g.bt ? g.L - i0 : g.bt;
      __syncthreads();
      load_rows(qs, ld, qh, g.qs1, i0, bq, D);
      load_rows(gs, ld, gh, gd.gs1, i0, bq, D);
      if (threadIdx.x < bq) {
        lses[threadIdx.x] = gd.lse[t * g.L + i0 + threadIdx.x];
        deltas[threadIdx.x] = gd.delta[t * g.L + i0 + threadIdx.x];
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        const int64_t rr = r * kWarps + warp, j = j0 + rr;
        if (r >= g.rows || rr >= nk) continue;
        // Lanes [first, bq) of the tile are queries that see key j.
        const int64_t first = j - (g.S - g.L) - i0 > 0 ? j - (g.S - g.L) - i0 : 0;
        if (first >= bq) continue;
        T pf = 0, ds = 0;
        if (lane >= first && lane < bq) {
          const int64_t i = i0 + lane;
          const T p = fn::hd::exp(dot(qs + lane * ld, ks + rr * D, D) * g.scale - lses[lane]);  // term 1
          const T f = g.dropout ? drop_factor(g, t, i, j) : T(1);
          const T dp = dot(gs + lane * ld, vs + rr * D, D);  // term 2
          pf = p * f;
          ds = p * (dp * f - deltas[lane]);  // term 3
        }
        pfs[rr * 32 + lane] = pf;
        dss[rr * 32 + lane] = ds;
        __syncwarp();
#pragma unroll
        for (int c = 0; c < kMaxCols; ++c) {
          const int64_t d = lane + 32 * c;
          if (d >= D) break;
          T a = dv[r][c], e = dk[r][c];
          for (int64_t i = first; i < bq; ++i) {
            a += pfs[rr * 32 + i] * gs[i * ld + d];  // term 4
            e += dss[rr * 32 + i] * qs[i * ld + d];  // term 5
          }
          dv[r][c] = a;
          dk[r][c] = e;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      const int64_t rr = r * kWarps + warp, j = j0 + rr;
      if (r >= g.rows || rr >= nk) continue;
#pragma unroll
      for (int c = 0; c < kMaxCols; ++c) {
        const int64_t d = lane + 32 * c;
        if (d >= D) break;
        if (gd.dk) gd.dk[n * gd.dks0 + j * gd.dks1 + h * D + d] = dk[r][c] * g.scale;
        if (gd.dv) gd.dv[n * gd.dvs0 + j * gd.dvs1 + h * D + d] = dv[r][c];
      }
    }
  }
}

// Tile sizes for a kernel whose shared memory holds two tiles of bt padded
// rows, `mats` blocks of kWarps * rows rows, `bufs` rows of 32 per owned row
// and `extra` values: the largest that fit the budget, preferring more rows
// per warp (K and V reused by more queries) and then wider tiles.
struct Tiles {
  int rows, bt;
  size_t smem;
};

Tiles pick_tiles(int64_t D, size_t elem, int mats, int bufs, int extra) {
  static constexpr int kChoices[][2] = {{4, 32}, {2, 32}, {4, 16}, {2, 16}, {1, 16}, {1, 8}};
  Tiles t{1, 8, 0};
  for (const auto& c : kChoices) {
    const int64_t br = kWarps * c[0];
    t = Tiles{c[0], c[1], static_cast<size_t>(2 * c[1] * (D + 1) + mats * br * D + bufs * br * 32 + extra) * elem};
    if (t.smem <= kSharedBudget) return t;
  }
  return t;  // {1, 8} fits every D <= kCudaCausalMaxHeadDim in float64 (27 KB)
}

template <class T>
Geom<T> make_geom(const Tensor& q, const Tensor& k, const Tensor& v, const CausalAttentionParams& pr) {
  const int64_t H = pr.heads;
  Geom<T> g{};
  fill_geometry<T>(g, q, k, v, pr);
  g.D = q.size(2) / H;
  EMBER_CHECK(g.D <= detail::kCudaCausalMaxHeadDim, ValueError, "causal_attention (cuda): head dim ", g.D,
              " is wider than the kernel's limit of ", detail::kCudaCausalMaxHeadDim,
              " (the op runs such heads on its composed path)");
  return g;
}

template <class T>
void forward_t(const Tensor& q, const Tensor& k, const Tensor& v, const CausalAttentionParams& pr, Tensor& out,
               Tensor& lse) {
  Geom<T> g = make_geom<T>(q, k, v, pr);
  const Tiles tl = pick_tiles(g.D, sizeof(T), 1, 1, 0);
  g.rows = tl.rows;
  g.bt = tl.bt;
  const int64_t blocks = g.N * g.H * ((g.L + kWarps * g.rows - 1) / (kWarps * g.rows));
  if (blocks == 0) return;
  EMBER_CUDA_LAUNCH(forward_kernel<T>, blocks_for(blocks, 1, 65535), kWarps * 32, tl.smem, q.device().index,
                    static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
                    static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()),
                    static_cast<T*>(lse.data_ptr()), g);
}

void cuda_causal_forward(const Tensor& q, const Tensor& k, const Tensor& v, const CausalAttentionParams& pr,
                         Tensor& out, Tensor& lse) {
  if (q.dtype() == DType::BFloat16 || q.dtype() == DType::Float16)
    causal_forward_tensor_core(q, k, v, pr, out, lse);
  else if (q.dtype() == DType::Float32)
    forward_t<float>(q, k, v, pr, out, lse);
  else
    forward_t<double>(q, k, v, pr, out, lse);
}

template <class T>
void backward_t(const Tensor& gr, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& lse, const CausalAttentionParams& pr, Tensor& dq, Tensor& dk, Tensor& dv) {
  Geom<T> g = make_geom<T>(q, k, v, pr);
  const int dev = q.device().index;
  const int64_t rows = g.N * g.H * g.L;
  Tensor delta = empty({g.N, g.H, g.L}, TensorOptions(q.dtype(), q.device()));
  if (rows > 0)
    EMBER_CUDA_LAUNCH(delta_kernel<T>, blocks_for(rows, 128, 4096), 128, 0, dev, static_cast<const T*>(gr.data_ptr()),
                      gr.stride(0), gr.stride(1), static_cast<const T*>(out.data_ptr()),
                      static_cast<T*>(delta.data_ptr()), g.N, g.H, g.L, g.D);
  Grads<T> gd{};
  fill_grads<T>(gd, gr, lse, delta, dq, dk, dv);
  const auto qp = static_cast<const T*>(q.data_ptr());
  const auto kp = static_cast<const T*>(k.data_ptr());
  const auto vp = static_cast<const T*>(v.data_ptr());
  if (gd.dq) {
    const Tiles tl = pick_tiles(g.D, sizeof(T), 2, 1, 0);
    g.rows = tl.rows;
    g.bt = tl.bt;
    const int64_t blocks = g.N * g.H * ((g.L + kWarps * g.rows - 1) / (kWarps * g.rows));
    if (blocks > 0)
      EMBER_CUDA_LAUNCH(dq_kernel<T>, blocks_for(blocks, 1, 65535), kWarps * 32, tl.smem, dev, qp, kp, vp, gd, g);
  }
  if (gd.dk || gd.dv) {
    // With L = 0 the query loop is empty and the blocks write zeros.
    const Tiles tl = pick_tiles(g.D, sizeof(T), 2, 2, 64);
    g.rows = tl.rows;
    g.bt = tl.bt;
    const int64_t blocks = g.N * g.H * ((g.S + kWarps * g.rows - 1) / (kWarps * g.rows));
    if (blocks > 0)
      EMBER_CUDA_LAUNCH(dkdv_kernel<T>, blocks_for(blocks, 1, 65535), kWarps * 32, tl.smem, dev, qp, kp, vp, gd, g);
  }
}

void cuda_causal_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const CausalAttentionParams& pr, Tensor& dq, Tensor& dk, Tensor& dv) {
  if (q.dtype() == DType::BFloat16 || q.dtype() == DType::Float16)
    causal_backward_tensor_core(g.dtype() == q.dtype() ? g : g.to(q.dtype()), q, k, v, out, lse, pr, dq, dk, dv);
  else if (q.dtype() == DType::Float32)
    backward_t<float>(g, q, k, v, out, lse, pr, dq, dk, dv);
  else
    backward_t<double>(g, q, k, v, out, lse, pr, dq, dk, dv);
}

}  // namespace

EMBER_REGISTER_KERNEL(detail::causal_forward_kernel, CUDA, cuda_causal_forward);
EMBER_REGISTER_KERNEL(detail::causal_backward_kernel, CUDA, cuda_causal_backward);

}  // namespace ember::cuda
