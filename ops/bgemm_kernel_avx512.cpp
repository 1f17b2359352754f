// The bf16 GEMM's kernel on AVX512_BF16 (vdpbf16ps): op(B) packed into
// pair-interleaved column panels, A read in place or packed per task, register
// blocks of C, and the row-chunk x column-group tasks on the pool. The
// interface and the layouts are described in ops/bgemm_avx512.h; bgemm()
// in ops/bgemm_kernel_avx512.cpp calls bgemm_kernel() here when the CPU has the
// instruction. The packing stays in this file beside the blocks that read
// it: its layouts are the blocks' addressing, and the compiler inlines it
// into the tasks.
//
// Every kernel function carries EMBER_TARGET_BF16 (a function target
// attribute), so this file compiles in any x86-64 build and the kernel runs
// only where CPUID says the CPU has AVX512_BF16 (bgemm_uses_kernel()).
#include <ember/ops/bgemm_detail.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <ember/core/parallel.h>

#if EMBER_BGEMM_X86
#include <immintrin.h>

#include <ember/ops/avx512_bf16_round.h>  // round_to_bf16
#include <ember/ops/avx512_transpose.h>   // transpose16, EMBER_TARGET_AVX512
// GCC 12's AVX-512 intrinsics pass an "undefined" vector as the unused merge
// source of shifts, unpacks and extracts, which -Wmaybe-uninitialized reports
// (as in ops/avx512_transpose.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

namespace ember::cpu {

#if EMBER_BGEMM_X86

namespace {

using bgemm_detail::ceil_div;
using bgemm_detail::kParallelWork;
using bgemm_detail::Scratch;

// ---- the kernel ------------------------------------------------------------------

constexpr int64_t kPanelN = 64;   // columns of C per packed panel of B (4 vectors)
constexpr int64_t kPanelK = 512;  // inner dim per pass (256 pairs: a 64 KB panel of B, in L2)
constexpr int64_t kChunkM = 96;   // rows of C per task: whole blocks of 6 and of 8 rows
constexpr int64_t kGroupN = 4;    // panels per task at most: its workspace stays 96 x 256 floats
constexpr int64_t kBandK = 32;    // rows of a row-major B per packing task (even: whole pairs)
// Packing asks for each row's elements this far ahead of the ones it reads
// (two panels' worth of a row-major B, eight 16 x 16 tiles of a transposed
// one). Packing reads a weight that a training step has left in memory, 32
// (row-major) or 16 (transposed) rows at once; left to the hardware
// prefetchers, GPT-2's c_fc weight came in at 9-11 GB/s (docs/PERFORMANCE.md,
// "The bf16 GEMM").
constexpr int64_t kPrefetchAhead = 128;

// 16 floats -> their bf16 bits (core/half.h's rounding) in the low halves of 32-bit lanes.
EMBER_TARGET_BF16 inline __m512i round_bf16(__m512 x) { return _mm512_cvtepu16_epi32(round_to_bf16(x)); }

// 16 elements (those in `mask`, the rest zero) as bf16 bits in the low halves of 32-bit lanes.
EMBER_TARGET_BF16 inline __m512i load_bf16(const uint16_t* p, __mmask16 mask) {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
}
EMBER_TARGET_BF16 inline __m512i load_bf16(const float* p, __mmask16 mask) {
  return round_bf16(_mm512_maskz_loadu_ps(mask, p));
}

// 16 float32 values from bf16 or float32 storage.
EMBER_TARGET_BF16 inline __m512 load_f32(const uint16_t* p, __mmask16 mask) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(load_bf16(p, mask), 16));
}
EMBER_TARGET_BF16 inline __m512 load_f32(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }

EMBER_TARGET_BF16 inline void store(float* p, __mmask16 mask, __m512 x) { _mm512_mask_storeu_ps(p, mask, x); }
EMBER_TARGET_BF16 inline void store(uint16_t* p, __mmask16 mask, __m512 x) {
  _mm256_mask_storeu_epi16(p, mask, round_to_bf16(x));
}

inline __mmask16 first_lanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1);
}

// Pair-interleaved packing. Both write dst[q * dld + i] (32-bit words) for
// pairs q < ceil(kw / 2) and i < ipad (a multiple of 16): the low half is
// element (2q, i), the high half (2q + 1, i); elements past kw or iw are zero.
//
// pack_kmajor: element (p, i) = src[p * ld + i] (two rows of the inner dim
// are interleaved: a row-major B, a transposed A).
template <class T>
EMBER_TARGET_BF16 void pack_kmajor(const T* src, int64_t ld, int64_t kw, int64_t iw, int64_t ipad, uint32_t* dst,
                                   int64_t dld) {
  for (int64_t q = 0; 2 * q < kw; ++q) {
    const T* r0 = src + 2 * q * ld;
    const bool has1 = 2 * q + 1 < kw;
    uint32_t* o = dst + q * dld;
    for (int64_t i = 0; i < ipad; i += 16) {
      const __mmask16 mask = first_lanes(iw - i);
      _mm_prefetch(reinterpret_cast<const char*>(r0 + i + kPrefetchAhead), _MM_HINT_T0);
      if (has1) _mm_prefetch(reinterpret_cast<const char*>(r0 + ld + i + kPrefetchAhead), _MM_HINT_T0);
      const __m512i lo = load_bf16(r0 + i, mask);
      const __m512i hi = has1 ? load_bf16(r0 + ld + i, mask) : _mm512_setzero_si512();
      _mm512_store_si512(o + i, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// pack_kminor: element (p, i) = src[i * ld + p] (the inner dim is contiguous:
// a transposed B, a row-major float32 A). 16 rows i at a time are loaded and
// transposed in registers.
EMBER_TARGET_BF16 void pack_kminor(const uint16_t* src, int64_t ld, int64_t kw, int64_t iw, int64_t ipad, uint32_t* dst,
                                   int64_t dld) {
  for (int64_t i0 = 0; i0 < ipad; i0 += 16) {
    const int64_t rows = std::min<int64_t>(16, iw - i0);
    for (int64_t p0 = 0; p0 < kw; p0 += 32) {
      // 32 bf16 along p are 16 words: a 16 x 16 transpose of words gives
      // word column w = pair p0 / 2 + w across the 16 rows.
      const int64_t pw = std::min<int64_t>(32, kw - p0);
      const __mmask32 pm = pw >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << pw) - 1);
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j)
        r[j] = j < rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(pm, src + (i0 + j) * ld + p0))
                        : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t w = 0; w < (pw + 1) / 2; ++w)
        _mm512_store_si512(dst + (p0 / 2 + w) * dld + i0, _mm512_castps_si512(r[w]));
    }
  }
}
EMBER_TARGET_BF16 void pack_kminor(const float* src, int64_t ld, int64_t kw, int64_t iw, int64_t ipad, uint32_t* dst,
                                   int64_t dld) {
  for (int64_t i0 = 0; i0 < ipad; i0 += 16) {
    const int64_t rows = std::min<int64_t>(16, iw - i0);
    for (int64_t p0 = 0; p0 < kw; p0 += 32) {
      // 32 floats along p of each row, rounded first: 16 words, one per
      // pair, so one 16 x 16 transpose of words serves 32 elements (as for
      // a bf16 source above) where transposing the floats took two.
      const int64_t pw = std::min<int64_t>(32, kw - p0);
      const __mmask16 m0 = first_lanes(pw), m1 = first_lanes(pw - 16);
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j) {
        if (j >= rows) {
          r[j] = _mm512_setzero_ps();
          continue;
        }
        const float* s = src + (i0 + j) * ld + p0;
        _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetchAhead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(s + kPrefetchAhead + 16), _MM_HINT_T0);
        const __m256i lo = round_to_bf16(_mm512_maskz_loadu_ps(m0, s));
        const __m256i hi = round_to_bf16(_mm512_maskz_loadu_ps(m1, s + 16));
        r[j] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      }
      transpose16(r);
      for (int64_t w = 0; w < (pw + 1) / 2; ++w)
        _mm512_store_si512(dst + (p0 / 2 + w) * dld + i0, _mm512_castps_si512(r[w]));
    }
  }
}

// Packs op(X)'s inner-dim rows [0, kw) and outer indices [0, iw) (X already
// offset to the block's corner) for the kernel: kmajor when X's inner dim is
// its slow one.
EMBER_TARGET_BF16 void pack(const void* x, GemmElem t, bool kmajor, int64_t ld, int64_t kw, int64_t iw, int64_t ipad,
                            uint32_t* dst, int64_t dld) {
  if (t == GemmElem::kBFloat16) {
    const auto* s = static_cast<const uint16_t*>(x);
    kmajor ? pack_kmajor(s, ld, kw, iw, ipad, dst, dld) : pack_kminor(s, ld, kw, iw, ipad, dst, dld);
  } else {
    const auto* s = static_cast<const float*>(x);
    kmajor ? pack_kmajor(s, ld, kw, iw, ipad, dst, dld) : pack_kminor(s, ld, kw, iw, ipad, dst, dld);
  }
}

// Rows [0, rows) of a row-major float32 A, inner-dim elements [0, kw),
// rounded to bf16 into dst as rows of (kw + 1) / 2 * 2 elements (a lone last
// element's partner zero): the kernel reads a pair of A as one 32-bit word
// anywhere, so a row-major copy needs no transpose.
EMBER_TARGET_BF16 void pack_rows(const float* src, int64_t ld, int64_t kw, int64_t rows, uint16_t* dst) {
  const int64_t kp = (kw + 1) / 2 * 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * kp;
    for (int64_t p = 0; p < kp; p += 16) {
      const __mmask16 in = first_lanes(kw - p), out = first_lanes(kp - p);
      _mm256_mask_storeu_epi16(d + p, out, round_to_bf16(_mm512_maskz_loadu_ps(in, s + p)));
    }
  }
}

// Where one block's sums go. Without w_out: C = alpha * sums + beta * C +
// bias (c, bias at the block's first row and column); with it: the raw sums
// into the float32 workspace (an inner-dim pass that is not the last). With
// w_in, the sums start from a previous pass's workspace.
template <class CT>
struct Out {
  CT* c;
  int64_t ldc;
  float alpha, beta;
  const void* bias;
  bool bias_bf16;
  const float* w_in;
  float* w_out;
  int64_t ldw;
  __mmask16 last;  // the columns of the final 16-wide block that exist
};

// MR rows by NB 16-wide column blocks of C: pairs q < kq of A (word (r, q)
// at a + r * ars + q * aqs, in bf16 elements) against the packed panel bp
// ([pairs][NB * 16] words), then, when odd, A's element 2 kq alone against
// the next pair of the panel (whose high halves are zero). The loops over rows and vectors are unrolled by
// pragma: GCC 12 unrolls them anyway, but only after its scalar replacement
// of the accumulator array has given up, which keeps the 24 accumulators on
// the stack around the loop (a store and a load of each, per block;
// docs/PERFORMANCE.md, "ops/bgemm_kernel_avx512.cpp"). A previous pass's sums are added after the loop.
template <int MR, int NB, class CT>
EMBER_TARGET_BF16 void block(int64_t kq, bool odd, const uint16_t* a, int64_t ars, int64_t aqs, const uint32_t* bp,
                             const Out<CT>& o) {
  __m512 acc[MR][NB];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t q = 0; q < kq; ++q) {
    __m512bh bv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) bv[j] = (__m512bh)_mm512_load_si512(bp + q * NB * 16 + j * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      uint32_t w;
      std::memcpy(&w, a + r * ars + q * aqs, 4);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(w));
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  if (odd) {  // A's lone last element (read alone: its neighbour may be the next row, or NaN padding)
    __m512bh bv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) bv[j] = (__m512bh)_mm512_load_si512(bp + kq * NB * 16 + j * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(a[r * ars + kq * aqs]);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  if (o.w_in) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_add_ps(acc[r][j], _mm512_loadu_ps(o.w_in + r * o.ldw + j * 16));
  }
  if (o.w_out) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) _mm512_storeu_ps(o.w_out + r * o.ldw + j * 16, acc[r][j]);
    return;
  }
  const __m512 al = _mm512_set1_ps(o.alpha), be = _mm512_set1_ps(o.beta);
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const __mmask16 mask = j == NB - 1 ? o.last : static_cast<__mmask16>(0xFFFF);
    __m512 bias = _mm512_setzero_ps();
    if (o.bias)
      bias = o.bias_bf16 ? load_f32(static_cast<const uint16_t*>(o.bias) + j * 16, mask)
                         : load_f32(static_cast<const float*>(o.bias) + j * 16, mask);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      CT* cp = o.c + r * o.ldc + j * 16;
      __m512 x = _mm512_mul_ps(al, acc[r][j]);
      // beta = 0 never reads C (it may hold NaN from an empty()).
      if (o.beta != 0.0f) x = _mm512_fmadd_ps(be, load_f32(cp, mask), x);
      if (o.bias) x = _mm512_add_ps(x, bias);
      store(cp, mask, x);
    }
  }
}

// Rows [0, m) of a task against one packed panel: blocks of MR rows (MR * NB
// accumulators within 24 of the 32 registers; the rest hold B's vectors and
// A's broadcast), then the leftover rows in one smaller block.
template <int NB, class CT>
EMBER_TARGET_BF16 void rows(int64_t m, int64_t kq, bool odd, const uint16_t* a, int64_t ars, int64_t aqs,
                            const uint32_t* bp, Out<CT> o) {
  constexpr int MR = NB == 4 ? 6 : 8;
  int64_t i = 0;
  auto advance = [&](int64_t r) {
    o.c += r * o.ldc;
    if (o.w_in) o.w_in += r * o.ldw;
    if (o.w_out) o.w_out += r * o.ldw;
  };
  for (; i + MR <= m; i += MR) {
    // Rows of a row-major A far apart start with a miss each: ask for the
    // next block's rows now (as ops/sgemm_avx512.h does).
    if (aqs == 2)
      for (int64_t r = i + MR; r < std::min(m, i + 2 * MR); ++r)
        for (int64_t p = 0; p < std::min<int64_t>(2 * kq, 128); p += 32)
          _mm_prefetch(reinterpret_cast<const char*>(a + r * ars + p), _MM_HINT_T0);
    block<MR, NB, CT>(kq, odd, a + i * ars, ars, aqs, bp, o);
    advance(MR);
  }
  const uint16_t* ai = a + i * ars;
  switch (m - i) {
    case 7:
      block<7, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    case 6:
      block<6, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    case 5:
      block<5, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    case 4:
      block<4, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    case 3:
      block<3, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    case 2:
      block<2, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    case 1:
      block<1, NB, CT>(kq, odd, ai, ars, aqs, bp, o);
      break;
    default:
      break;
  }
}

// op(B) packed for the whole call: column panel jp is a [ceil(k / 2)][np]
// array of words (np = its width rounded up to 16) at jp * ceil(k / 2) * 64.
struct PackedB {
  const uint32_t* words;
  int64_t pairs;  // ceil(k / 2)
  const uint32_t* panel(int64_t jp) const { return words + jp * pairs * kPanelN; }
};

thread_local Scratch t_bpack, t_apack, t_work;

// Rows [r0, r1) of C against column panels [jp0, jp1): inner-dim pass after
// pass, each panel in turn, through the workspace when there is more than one pass.
template <class CT>
EMBER_TARGET_BF16 void run_task(const BgemmArgs& g, const PackedB& pb, int64_t r0, int64_t r1, int64_t jp0,
                                int64_t jp1) {
  const int64_t mrows = r1 - r0, passes = std::max<int64_t>(1, ceil_div(g.k, kPanelK));
  // A row-major bf16 A is read in place (for an odd inner dim its last
  // element alone: the one after it, the next row or padding that may hold
  // NaN, must not be multiplied, even by B's zero); the others are packed.
  const bool pack_a = g.trans_a || g.a_type == GemmElem::kFloat32;
  const int64_t mpad = (mrows + 15) / 16 * 16;
  auto* ap = pack_a ? static_cast<uint32_t*>(t_apack.get(sizeof(uint32_t) * mpad * kPanelK / 2)) : nullptr;
  const int64_t ldw = (jp1 - jp0) * kPanelN;
  auto* w = passes > 1 ? static_cast<float*>(t_work.get(sizeof(float) * mrows * ldw)) : nullptr;
  const size_t esz = g.a_type == GemmElem::kFloat32 ? 4 : 2;
  for (int64_t pass = 0; pass < passes; ++pass) {
    const int64_t k0 = pass * kPanelK, kw = std::min(kPanelK, g.k - k0);
    const uint16_t* a;
    int64_t ars, aqs;
    if (pack_a && !g.trans_a) {
      // A row-major float32 A (autocast's float32 activations): its rows
      // rounded to bf16 in place of order, kw rounded up to whole pairs.
      pack_rows(static_cast<const float*>(g.a) + r0 * g.lda + k0, g.lda, kw, mrows, reinterpret_cast<uint16_t*>(ap));
      a = reinterpret_cast<const uint16_t*>(ap);
      ars = (kw + 1) / 2 * 2;
      aqs = 2;
    } else if (pack_a) {
      const auto* src = static_cast<const unsigned char*>(g.a) + esz * (g.trans_a ? k0 * g.lda + r0 : r0 * g.lda + k0);
      pack(src, g.a_type, g.trans_a, g.lda, kw, mrows, mpad, ap, mpad);
      a = reinterpret_cast<const uint16_t*>(ap);
      ars = 2;
      aqs = 2 * mpad;
    } else {
      a = static_cast<const uint16_t*>(g.a) + r0 * g.lda + k0;
      ars = g.lda;
      aqs = 2;
    }
    for (int64_t jp = jp0; jp < jp1; ++jp) {
      const int64_t n0 = jp * kPanelN, nw = std::min(kPanelN, g.n - n0), nb = (nw + 15) / 16;
      Out<CT> o;
      o.c = static_cast<CT*>(g.c) + r0 * g.ldc + n0;
      o.ldc = g.ldc;
      o.alpha = g.alpha;
      o.beta = g.beta;
      o.bias_bf16 = g.bias_type == GemmElem::kBFloat16;
      o.bias = g.bias ? static_cast<const unsigned char*>(g.bias) + (o.bias_bf16 ? 2 : 4) * n0 : nullptr;
      o.w_in = pass > 0 ? w + (jp - jp0) * kPanelN : nullptr;
      o.w_out = pass + 1 < passes ? w + (jp - jp0) * kPanelN : nullptr;
      o.ldw = ldw;
      o.last = first_lanes(nw - (nb - 1) * 16);
      const uint32_t* bp = pb.panel(jp) + (k0 / 2) * nb * 16;
      // A packed copy has whole pairs (the last one zero-padded); A read in
      // place gives its odd last element alone.
      const bool odd = !pack_a && kw % 2 != 0;
      const int64_t kq = pack_a ? (kw + 1) / 2 : kw / 2;
      switch (nb) {
        case 1:
          rows<1, CT>(mrows, kq, odd, a, ars, aqs, bp, o);
          break;
        case 2:
          rows<2, CT>(mrows, kq, odd, a, ars, aqs, bp, o);
          break;
        case 3:
          rows<3, CT>(mrows, kq, odd, a, ars, aqs, bp, o);
          break;
        default:
          rows<4, CT>(mrows, kq, odd, a, ars, aqs, bp, o);
          break;
      }
    }
  }
}
}  // namespace

namespace bgemm_detail {

void bgemm_kernel(const BgemmArgs& g) {
  const int64_t panels = ceil_div(g.n, kPanelN), pairs = (g.k + 1) / 2;
  const int64_t passes = std::max<int64_t>(1, ceil_div(g.k, kPanelK));
  // Pack op(B) (in parallel when large). A transposed B (the weight in the
  // forward x W^T) is read along its rows: a task packs one panel's pass, 64
  // rows of W by up to 512 contiguous elements. A row-major B (the weight in
  // dX = dY W) is read across its rows instead: a task packs a band of
  // kBandK of them into every panel in turn, so each row is read whole while
  // it is in cache. Panel by panel, each 256-byte piece of a float32 row came
  // from memory on its own: 0.68 ns an element for GPT-2's c_fc, 1.33 for
  // its 154 MB embedding (docs/PERFORMANCE.md, "The bf16 GEMM").
  auto* words = static_cast<uint32_t*>(t_bpack.get(sizeof(uint32_t) * std::max<int64_t>(1, panels * pairs * kPanelN)));
  const PackedB pb{words, pairs};
  const size_t bsz = g.b_type == GemmElem::kFloat32 ? 4 : 2;
  const bool across_rows = !g.trans_b;
  const int64_t kb = across_rows ? kBandK : kPanelK, bands = ceil_div(g.k, kb);
  // (A task is about kb x 64 elements.)
  parallel_for(0, panels * bands, std::max<int64_t>(1, (int64_t(1) << 16) / (std::min(g.k, kb) * kPanelN + 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t t = lo; t < hi; ++t) {
                   const int64_t jp = across_rows ? t % panels : t / bands;
                   const int64_t k0 = (across_rows ? t / panels : t % bands) * kb;
                   const int64_t n0 = jp * kPanelN, nw = std::min(kPanelN, g.n - n0), np = (nw + 15) / 16 * 16;
                   const int64_t kw = std::min(kb, g.k - k0);
                   const auto* src =
                       static_cast<const unsigned char*>(g.b) + bsz * (g.trans_b ? n0 * g.ldb + k0 : k0 * g.ldb + n0);
                   pack(src, g.b_type, !g.trans_b, g.ldb, kw, nw, np, const_cast<uint32_t*>(pb.panel(jp)) + k0 / 2 * np,
                        np);
                 }
               });
  // Tasks: row chunks of kChunkM x column groups of up to kGroupN panels.
  // A task packs its rows of A once per pass, so with a packed A and one
  // pass (no workspace to bound) a task starts from every panel: a weight
  // gradient dY^T X packed dY^T again for every group of 4 panels, 3 times
  // over for GPT-2's c_fc and 12 for its c_proj, about a tenth of the bf16
  // training step's CPU time. Then more, evenly cut groups while the tasks do
  // not divide among the threads (GPT-2's 256 tokens, 3 row chunks, against
  // a 768-wide output, 3 groups of 4 panels, left one thread 5 tasks and the
  // other 4), and smaller tasks when there are fewer than the threads.
  const int threads = num_threads();
  const bool parallel = threads > 1 && !in_parallel_region() && g.m * g.n * g.k >= kParallelWork;
  const bool whole_rows = passes == 1 && (g.trans_a || g.a_type == GemmElem::kFloat32);
  int64_t chunk = kChunkM, col_groups = whole_rows ? 1 : std::max<int64_t>(1, ceil_div(panels, kGroupN));
  int64_t group = ceil_div(panels, col_groups);
  auto count = [&] { return ceil_div(g.m, chunk) * ceil_div(panels, group); };
  const int64_t enough = (whole_rows ? 4 : 16) * int64_t(threads);
  while (parallel && col_groups < panels && count() % threads != 0 && count() < enough)
    group = ceil_div(panels, ++col_groups);
  if (parallel) {
    if (count() < threads) group = 1;
    while (count() < threads && chunk > 24) chunk /= 2;
  }
  const int64_t groups = ceil_div(panels, group), tasks = ceil_div(g.m, chunk) * groups;
  const int64_t per_task = std::max<int64_t>(1, chunk * group * kPanelN * g.k);
  parallel_for(0, tasks, std::max<int64_t>(1, kParallelWork / per_task), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r0 = (t / groups) * chunk, r1 = std::min(g.m, r0 + chunk);
      const int64_t jp0 = (t % groups) * group, jp1 = std::min(panels, jp0 + group);
      if (g.c_type == GemmElem::kFloat32)
        run_task<float>(g, pb, r0, r1, jp0, jp1);
      else
        run_task<uint16_t>(g, pb, r0, r1, jp0, jp1);
    }
    t_apack.trim();
    t_work.trim();
  });
  t_bpack.trim();
}

}  // namespace bgemm_detail

#else

void bgemm_detail::bgemm_kernel(const BgemmArgs&) {}

#endif

}  // namespace ember::cpu
