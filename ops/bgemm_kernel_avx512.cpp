// The bf16 GEMM's kernel on AVX512_BF16 (vdpbf16ps): register blocks of C
// against pair-interleaved panels of op(B), and the tasks on the pool (the
// short path's panels with all the rows, or row chunks x column groups). The
// interface and the layouts are described in ops/bgemm_avx512.h; bgemm()
// in ops/bgemm_avx512.cpp calls bgemm_kernel() here when the CPU has the
// instruction. The packing is in ops/bgemm_pack_avx512.h.
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

#include <ember/ops/bgemm_pack_avx512.h>
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

using namespace bgemm_detail;  // ceil_div, kParallelWork, Scratch; the packing (ops/bgemm_pack_avx512.h)

// ---- the kernel ------------------------------------------------------------------

constexpr int64_t kPanelN = 64;   // columns of C per packed panel of B (4 vectors)
constexpr int64_t kPanelK = 512;  // inner dim per pass (256 pairs: a 64 KB panel of B, in L2)
constexpr int64_t kChunkM = 96;   // rows of C per task: whole blocks of 6 and of 8 rows
constexpr int64_t kGroupN = 4;    // panels per task at most: its workspace stays 96 x 256 floats
constexpr int64_t kBandK = 32;    // rows of a row-major B per packing task (even: whole pairs)
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

// The lines the next packing of op(B) will read (`runs` runs of `lines`
// 64-byte lines, `stride` bytes apart), asked for a few at a time while the
// blocks of the current panel compute, so the weight comes from memory
// under the arithmetic instead of stalling the packing.
struct Fetch {
  const unsigned char* p = nullptr;  // null: nothing to fetch
  int64_t stride = 0, runs = 0, lines = 0;
  int64_t run = 0, line = 0;  // the next line to ask for
  void fetch(int64_t count) {
    for (; count > 0 && run < runs; --count) {
      _mm_prefetch(reinterpret_cast<const char*>(p + run * stride + line * 64), _MM_HINT_T0);
      if (++line == lines) line = 0, ++run;
    }
  }
};

// Rows [0, m) of a task against one packed panel: blocks of MR rows (MR * NB
// accumulators within 24 of the 32 registers; the rest hold B's vectors and
// A's broadcast), then the leftover rows in one smaller block.
template <int NB, class CT>
EMBER_TARGET_BF16 void rows(int64_t m, int64_t kq, bool odd, const uint16_t* a, int64_t ars, int64_t aqs,
                            const uint32_t* bp, Out<CT> o, Fetch next = {}) {
  constexpr int MR = NB == 4 ? 6 : 8;
  const int64_t per_block = next.p ? (next.runs * next.lines + m / MR) / (m / MR + 1) : 0;
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
    next.fetch(per_block);
    block<MR, NB, CT>(kq, odd, a + i * ars, ars, aqs, bp, o);
    advance(MR);
  }
  next.fetch(per_block);
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

// rows() for a panel of nb 16-wide vectors.
template <class CT>
EMBER_TARGET_BF16 void rows_any(int64_t nb, int64_t m, int64_t kq, bool odd, const uint16_t* a, int64_t ars,
                                int64_t aqs, const uint32_t* bp, const Out<CT>& o, const Fetch& next = {}) {
  switch (nb) {
    case 1:
      rows<1, CT>(m, kq, odd, a, ars, aqs, bp, o, next);
      break;
    case 2:
      rows<2, CT>(m, kq, odd, a, ars, aqs, bp, o, next);
      break;
    case 3:
      rows<3, CT>(m, kq, odd, a, ars, aqs, bp, o, next);
      break;
    default:
      rows<4, CT>(m, kq, odd, a, ars, aqs, bp, o, next);
      break;
  }
}

// Where C's block at row r0 and column n0 (nw columns, nb vectors) goes,
// without a workspace.
template <class CT>
Out<CT> out_at(const BgemmArgs& g, int64_t r0, int64_t n0, int64_t nw, int64_t nb) {
  Out<CT> o;
  o.c = static_cast<CT*>(g.c) + r0 * g.ldc + n0;
  o.ldc = g.ldc;
  o.alpha = g.alpha;
  o.beta = g.beta;
  o.bias_bf16 = g.bias_type == GemmElem::kBFloat16;
  o.bias = g.bias ? static_cast<const unsigned char*>(g.bias) + (o.bias_bf16 ? 2 : 4) * n0 : nullptr;
  o.w_in = o.w_out = nullptr;
  o.ldw = 0;
  o.last = first_lanes(nw - (nb - 1) * 16);
  return o;
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
      Out<CT> o = out_at<CT>(g, r0, n0, nw, nb);
      o.w_in = pass > 0 ? w + (jp - jp0) * kPanelN : nullptr;
      o.w_out = pass + 1 < passes ? w + (jp - jp0) * kPanelN : nullptr;
      o.ldw = ldw;
      const uint32_t* bp = pb.panel(jp) + (k0 / 2) * nb * 16;
      // A packed copy has whole pairs (the last one zero-padded); A read in
      // place gives its odd last element alone.
      const bool odd = !pack_a && kw % 2 != 0;
      const int64_t kq = pack_a ? (kw + 1) / 2 : kw / 2;
      rows_any<CT>(nb, mrows, kq, odd, a, ars, aqs, bp, o);
    }
  }
}
// The short path: products of at most kShortM rows (a batch of tokens
// against a weight, whose packing is a large part of the call: each packed
// element of op(B) serves only m rows). A is made readable once for the
// call (read in place, or a copy shared by the tasks); a task then takes
// whole panels with all the rows, packs each pass of a panel just before
// its blocks run over it (64 KB at most, from L1 and L2), and asks for the
// next pass's lines of op(B) while they do. Packing everything first, as
// taller products do, read a weight left in memory by a training step
// with no arithmetic to hide its misses, and wrote the packed copy out to
// be read back. Tasks in a chunk of the pool's run take consecutive
// panels, so the lines asked for are the ones the same thread packs next.
constexpr int64_t kShortM = 512;
thread_local Scratch t_bpanel, t_ashared;

template <class CT>
EMBER_TARGET_BF16 void run_panels(const BgemmArgs& g, const uint16_t* a, int64_t ars, int64_t aqs, bool whole_pairs,
                                  int64_t jp0, int64_t jp1) {
  const int64_t passes = std::max<int64_t>(1, ceil_div(g.k, kPanelK)), bsz = g.b_type == GemmElem::kFloat32 ? 4 : 2;
  auto* bp = static_cast<uint32_t*>(t_bpanel.get(sizeof(uint32_t) * (kPanelK / 2) * kPanelN));
  auto* w = passes > 1 ? static_cast<float*>(t_work.get(sizeof(float) * g.m * kPanelN)) : nullptr;
  // What packing panel jp's pass reads: rows of B along the inner dim (a
  // transposed B) or across it.
  auto source = [&](int64_t jp, int64_t pass) {
    const int64_t n0 = jp * kPanelN, nw = std::min(kPanelN, g.n - n0);
    const int64_t k0 = pass * kPanelK, kw = std::min(kPanelK, g.k - k0);
    Fetch f;
    f.p = static_cast<const unsigned char*>(g.b) + bsz * (g.trans_b ? n0 * g.ldb + k0 : k0 * g.ldb + n0);
    f.stride = bsz * g.ldb;
    f.runs = g.trans_b ? nw : kw;
    f.lines = ceil_div(bsz * (g.trans_b ? kw : nw), 64);
    return f;
  };
  for (int64_t jp = jp0; jp < jp1; ++jp) {
    const int64_t n0 = jp * kPanelN, nw = std::min(kPanelN, g.n - n0), nb = (nw + 15) / 16;
    for (int64_t pass = 0; pass < passes; ++pass) {
      const int64_t k0 = pass * kPanelK, kw = std::min(kPanelK, g.k - k0);
      pack(source(jp, pass).p, g.b_type, !g.trans_b, g.ldb, kw, nw, nb * 16, bp, nb * 16);
      const Fetch next = pass + 1 < passes ? source(jp, pass + 1) : jp + 1 < jp1 ? source(jp + 1, 0) : Fetch{};
      Out<CT> o = out_at<CT>(g, 0, n0, nw, nb);
      o.w_in = pass > 0 ? w : nullptr;
      o.w_out = pass + 1 < passes ? w : nullptr;
      o.ldw = kPanelN;
      // A's pairs from k0 on; a copy has whole pairs (the last one
      // zero-padded), A read in place gives its odd last element alone.
      const bool odd = !whole_pairs && kw % 2 != 0;
      rows_any<CT>(nb, g.m, whole_pairs ? (kw + 1) / 2 : kw / 2, odd, a + (k0 / 2) * aqs, ars, aqs, bp, o, next);
    }
  }
}

EMBER_TARGET_BF16 void short_path(const BgemmArgs& g, int64_t panels, bool parallel) {
  const uint16_t* a;
  int64_t ars, aqs;
  bool whole_pairs = true;
  const int64_t groups = ceil_div(g.m, 16), grain = parallel ? 1 : std::max<int64_t>(groups, panels);
  if (!g.trans_a && g.a_type == GemmElem::kBFloat16) {
    a = static_cast<const uint16_t*>(g.a);
    ars = g.lda;
    aqs = 2;
    whole_pairs = false;
  } else if (!g.trans_a) {  // float32 rows rounded to bf16, each padded to whole pairs
    const int64_t kp = (g.k + 1) / 2 * 2;
    auto* ap = static_cast<uint16_t*>(t_ashared.get(sizeof(uint16_t) * std::max<int64_t>(1, g.m * kp)));
    parallel_for(0, groups, grain, [&](int64_t lo, int64_t hi) {
      pack_rows(static_cast<const float*>(g.a) + lo * 16 * g.lda, g.lda, g.k, std::min(g.m, hi * 16) - lo * 16,
                ap + lo * 16 * kp);
    });
    a = ap;
    ars = kp;
    aqs = 2;
  } else {  // a transposed A's pairs interleaved, [pairs][mpad] words
    const int64_t mpad = groups * 16, esz = g.a_type == GemmElem::kFloat32 ? 4 : 2;
    auto* ap = static_cast<uint32_t*>(t_ashared.get(sizeof(uint32_t) * std::max<int64_t>(1, (g.k + 1) / 2 * mpad)));
    parallel_for(0, groups, grain, [&](int64_t lo, int64_t hi) {
      pack(static_cast<const unsigned char*>(g.a) + esz * lo * 16, g.a_type, true, g.lda, g.k,
           std::min(g.m, hi * 16) - lo * 16, (hi - lo) * 16, ap + lo * 16, mpad);
    });
    a = reinterpret_cast<const uint16_t*>(ap);
    ars = 2;
    aqs = 2 * mpad;
  }
  parallel_for(0, panels, grain, [&](int64_t lo, int64_t hi) {
    if (g.c_type == GemmElem::kFloat32)
      run_panels<float>(g, a, ars, aqs, whole_pairs, lo, hi);
    else
      run_panels<uint16_t>(g, a, ars, aqs, whole_pairs, lo, hi);
    t_work.trim();
  });
  t_ashared.trim();
}

}  // namespace

namespace bgemm_detail {

void bgemm_kernel(const BgemmArgs& g) {
  const int64_t panels = ceil_div(g.n, kPanelN), pairs = (g.k + 1) / 2;
  const int threads = num_threads();
  const bool parallel = threads > 1 && !in_parallel_region() && g.m * g.n * g.k >= kParallelWork;
  // Short products that have panels enough to share among the threads.
  if (g.m <= kShortM && (!parallel || panels >= 4 * int64_t(threads))) return short_path(g, panels, parallel);
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
  // not divide among the threads (3 row chunks against 3 groups of 4 panels
  // left one thread 5 tasks and the other 4), and smaller tasks when there
  // are fewer than the threads.
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
