// Causal attention's AVX-512 decoding path (ops/decode_attention_avx512.h):
// the key ranges per thread and their merge, and one query row's loops.
#include <ember/core/half.h>
#include <ember/core/parallel.h>
#include <ember/ops/decode_attention_avx512.h>
#include <ember/ops/fast_math.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#ifdef __AVX512F__
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics pass an "undefined" vector as the unused merge
// source of shifts, widenings and shuffles, which -Wmaybe-uninitialized
// reports (as in ops/avx512_transpose.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

namespace ember::cpu {

#ifdef __AVX512F__
namespace {

constexpr int64_t kMaxHeads = 64;

// One query row of heads [0, nh) (relative to the pointers) against keys
// [0, nv): the unnormalised attention of each head, so that several key
// ranges can be merged (out / sum is the softmax-weighted sum of V).
struct DecodeHeads {
  const float* q = nullptr;  // nh * D query values, unscaled
  const void* k = nullptr;   // key j, head h: element j * ks + h * D
  const void* v = nullptr;   // value j, head h: element j * vs + h * D
  int64_t ks = 0, vs = 0;
  bool bf16 = false;
  int64_t nh = 0, D = 0, nv = 0;
  float scale = 1.0f;
  float* scores = nullptr;  // scratch of scores_size(nv) floats per head
  float* out = nullptr;     // nh * D: sum_j exp(s_j - max) V_j per head, s = scale q K^T
  float* max = nullptr;     // nh row maxima of s
  float* sum = nullptr;     // nh sums of exp(s_j - max)
};

// Scratch floats per head for nv keys (nv rounded up to 16).
int64_t scores_size(int64_t nv) { return (nv + 15) / 16 * 16; }

// 16 floats from float32 or bfloat16 memory (a bfloat16 is the top half of
// its float32, so a 16-bit shift converts it exactly).
template <bool BF>
inline __m512 load16(const void* p, int64_t i) {
  if constexpr (BF) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  }
}

// Halves the partial sums of two vectors into one: lanes 0-7 hold a's, 8-15 b's.
inline __m512 fold512(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

// The 16 horizontal sums of v[0..15], in key order: out[j] = sum of v[j]'s lanes.
//  1. fold512 pairs (v0, v1) ...: 8 vectors, two keys each (8 partials apiece);
//  2. 128-bit lanes (0, 2) + (1, 3) of two such: 4 vectors, four keys each,
//     each key's 4 partials in one 128-bit lane;
//  3. within 128-bit lanes, the 4 x 4 transpose-add of four such vectors:
//     one vector whose element 4 l + m is key 4 m + l;
//  4. one permute back to key order.
inline __m512 reduce16(const __m512* v) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) t[i] = fold512(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; ++i)
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  const __m512 x = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
  const __m512 y = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
  const __m512 z = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y))),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y))));
  // z[4 l + m] = key 4 m + l, so key j sits at 4 (j % 4) + j / 4.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, z);
}

// Scores of keys [0, nv) for every head, 16 keys at a time. The keys go in
// address order (each key's row once, all heads of it, then the next row),
// which the hardware prefetchers follow; each (key, head) dot product stays a
// vector of partial sums in `part` (L1) until its block of 16 is reduced.
template <int ND, bool BF>
void scores(const DecodeHeads& a, int64_t stride) {
  const __m512 scale = _mm512_set1_ps(a.scale);
  alignas(64) float part[kMaxHeads * 16 * 16];
  for (int64_t j0 = 0; j0 < a.nv; j0 += 16) {
    const int cnt = static_cast<int>(a.nv - j0 < 16 ? a.nv - j0 : 16);
    for (int jj = 0; jj < 16; ++jj) {
      for (int64_t h = 0; h < a.nh; ++h) {
        __m512 acc = _mm512_setzero_ps();
        if (jj < cnt) {
          const int64_t base = (j0 + jj) * a.ks + h * a.D;
          for (int c = 0; c < ND; ++c)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(a.q + h * a.D + 16 * c), load16<BF>(a.k, base + 16 * c), acc);
        }
        _mm512_store_ps(part + (h * 16 + jj) * 16, acc);
      }
    }
    for (int64_t h = 0; h < a.nh; ++h) {
      __m512 v[16];
      for (int jj = 0; jj < 16; ++jj) v[jj] = _mm512_load_ps(part + (h * 16 + jj) * 16);
      _mm512_storeu_ps(a.scores + h * stride + j0, _mm512_mul_ps(reduce16(v), scale));
    }
  }
}

// out_h = sum_j w_hj V_jh, key by key in address order; out (nh D floats)
// stays in L1 across the keys.
template <int ND, bool BF>
void weighted_values(const DecodeHeads& a, int64_t stride) {
  for (int64_t e = 0; e < a.nh * a.D; ++e) a.out[e] = 0.0f;
  for (int64_t j = 0; j < a.nv; ++j) {
    for (int64_t h = 0; h < a.nh; ++h) {
      const __m512 w = _mm512_set1_ps(a.scores[h * stride + j]);
      float* o = a.out + h * a.D;
      const int64_t base = j * a.vs + h * a.D;
      for (int c = 0; c < ND; ++c)
        _mm512_storeu_ps(o + 16 * c, _mm512_fmadd_ps(w, load16<BF>(a.v, base + 16 * c), _mm512_loadu_ps(o + 16 * c)));
    }
  }
}

template <int ND, bool BF>
void run(const DecodeHeads& a) {
  const int64_t stride = scores_size(a.nv);
  scores<ND, BF>(a, stride);
  // Softmax per head, unnormalised: w_j = exp(s_j - max); the max and the
  // sum go to the caller, which may merge several key ranges.
  for (int64_t h = 0; h < a.nh; ++h) {
    float* r = a.scores + h * stride;
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < a.nv; ++j) mx = r[j] > mx ? r[j] : mx;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < a.nv; ++j) {
      r[j] = fast::expf_nonpos(r[j] - mx);
      sum += r[j];
    }
    a.max[h] = mx;
    a.sum[h] = sum;
  }
  weighted_values<ND, BF>(a, stride);
}

template <int ND>
void run_nd(const DecodeHeads& a) {
  if (a.bf16)
    run<ND, true>(a);
  else
    run<ND, false>(a);
}

// D / 16 vectors per head row: 1 to 8.
void decode_heads(const DecodeHeads& a) {
  using Run = void (*)(const DecodeHeads&);
  static constexpr Run kRun[] = {run_nd<1>, run_nd<2>, run_nd<3>, run_nd<4>,
                                 run_nd<5>, run_nd<6>, run_nd<7>, run_nd<8>};
  kRun[a.D / 16 - 1](a);
}

// The keys of each query row are cut into P contiguous ranges, one per thread,
// and every range does all heads, so each thread streams one contiguous
// piece of the cache (a split by heads would read every row in pieces, which
// the prefetchers follow badly). Each range gives per head its max m_c, sum
// l_c and unnormalised output O_c; they merge as the online softmax does:
//   M = max_c m_c,  l = sum_c l_c e^(m_c - M),  O = sum_c e^(m_c - M) O_c / l.
template <class S>
void split_keys(const DecodeAttention& a) {
  S* out = static_cast<S*>(a.out);
  float* lse = a.lse;
  const int64_t E = a.H * a.D, L = a.L, H = a.H;
  const int64_t P = std::clamp<int64_t>(a.S / 32, 1, num_threads());
  const int64_t tasks = a.N * L * P;
  std::vector<float> part(static_cast<size_t>(tasks * (E + 2 * H)));
  parallel_for(0, tasks, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> scores, qrow;
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t c = t % P, i = t / P % L, n = t / P / L;
      const int64_t nv = i + a.S - L + 1, j0 = c * nv / P, j1 = (c + 1) * nv / P;
      float* po = part.data() + t * (E + 2 * H);
      float *pm = po + E, *pl = pm + H;
      if (j1 == j0) {
        std::fill(po, po + E, 0.0f), std::fill(pm, pm + H, -std::numeric_limits<float>::infinity());
        std::fill(pl, pl + H, 0.0f);
        continue;
      }
      const size_t need = static_cast<size_t>(H * scores_size(j1 - j0));
      if (scores.size() < need) scores.resize(need);
      if (qrow.size() < static_cast<size_t>(E)) qrow.resize(static_cast<size_t>(E));
      const S* qs = static_cast<const S*>(a.q) + n * a.qs0 + i * a.qs1;
      for (int64_t e = 0; e < E; ++e) qrow[static_cast<size_t>(e)] = static_cast<float>(qs[e]);
      DecodeHeads dh;
      dh.q = qrow.data();
      dh.k = static_cast<const S*>(a.k) + n * a.ks0 + j0 * a.ks1;
      dh.v = static_cast<const S*>(a.v) + n * a.vs0 + j0 * a.vs1;
      dh.ks = a.ks1, dh.vs = a.vs1, dh.bf16 = std::is_same_v<S, bfloat16>;
      dh.nh = H, dh.D = a.D, dh.nv = j1 - j0, dh.scale = a.scale;
      dh.scores = scores.data(), dh.out = po, dh.max = pm, dh.sum = pl;
      decode_heads(dh);
    }
  });
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t i = 0; i < L; ++i) {
      const float* p0 = part.data() + (n * L + i) * P * (E + 2 * H);
      S* os = out + n * L * E + i * E;
      for (int64_t h = 0; h < H; ++h) {
        float M = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < P; ++c) M = std::max(M, p0[c * (E + 2 * H) + E + h]);
        float l = 0, o[128] = {};  // D <= 128 (decode_attention_supported)
        for (int64_t c = 0; c < P; ++c) {
          const float* pc = p0 + c * (E + 2 * H);
          const float fc = pc[E + H + h] == 0.0f ? 0.0f : std::exp(pc[E + h] - M);
          l += pc[E + H + h] * fc;
          for (int64_t d = 0; d < a.D; ++d) o[d] += fc * pc[h * a.D + d];
        }
        const float inv = 1.0f / l;
        for (int64_t d = 0; d < a.D; ++d) os[h * a.D + d] = static_cast<S>(o[d] * inv);
        if (lse) lse[(n * H + h) * L + i] = M + std::log(l);
      }
    }
}

}  // namespace

bool decode_attention_supported(int64_t H, int64_t D, int64_t S) {
  return S >= 1 && H >= 1 && H <= kMaxHeads && D >= 16 && D <= 128 && D % 16 == 0;
}

void decode_attention(const DecodeAttention& a) {
  if (a.bf16)
    split_keys<bfloat16>(a);
  else
    split_keys<float>(a);
}

#else

bool decode_attention_supported(int64_t, int64_t, int64_t) { return false; }
void decode_attention(const DecodeAttention&) {}

#endif

}  // namespace ember::cpu
