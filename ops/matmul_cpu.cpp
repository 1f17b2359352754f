// The GEMM kernel table's CPU kernel (OpenBLAS and Ember's AVX-512 kernels,
// split over Ember's thread pool); the products' planning and the ops:
// ops/matmul.cpp.
//
// The kernel only walks the batch of a GemmDesc (ops/matmul.h) and splits
// the work across the pool; float32 products go to Ember's AVX-512 kernel,
// ops/sgemm_avx512.h, instead of OpenBLAS where OpenBLAS runs its Haswell
// kernel on an AVX-512 CPU (docs/PERFORMANCE.md, "ops/matmul_cpu.cpp"); bfloat16
// products go to ops/bgemm_avx512.h. OpenBLAS is pinned to one thread at
// library start, so Ember's pool is the only set of threads (see
// core/parallel.h); single-threaded cblas calls from several threads at
// once are safe in OpenBLAS's pthread build.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <numeric>

#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/parallel.h>
#include <ember/ops/bgemm_avx512.h>
#include <ember/ops/gemv_avx512.h>
#include <ember/ops/matmul.h>
#include <ember/ops/sgemm_avx512.h>

namespace ember {

// The table is defined here, beside its CPU kernel, so that the ops naming
// it pull this object file out of the static library.
decltype(gemm_kernel) gemm_kernel("matmul");

namespace {

// OpenBLAS must never start threads of its own: they would compete with
// Ember's pool for the same cores. Runs at static init of the library.
struct BlasSingleThread {
  BlasSingleThread() { openblas_set_num_threads(1); }
} g_blas_single_thread;

// ---- CPU kernel ---------------------------------------------------------------

// Products below this many multiply-adds run inline on the caller: about
// where waking the pool starts to pay off (docs/PERFORMANCE.md, "ops/matmul_cpu.cpp").
constexpr int64_t kParallelWork = int64_t(1) << 19;
// A split block has at least this many rows (or columns), rounded to
// kBlockAlign so blocks start on whole SIMD registers / cache lines of C.
constexpr int64_t kMinBlock = 32;
constexpr int64_t kBlockAlign = 16;
// A tall product is cut into row blocks whose part of C holds at most this
// many elements (1 MB of floats, one core's L2), even on one thread: OpenBLAS
// zeroes (beta = 0) or reads C before its kernel adds into it, and over a C
// larger than L2 (12800 x 192 in the demo transformer) that pass goes to
// memory (measured: docs/PERFORMANCE.md, "ops/matmul_cpu.cpp").
constexpr int64_t kBlockElems = int64_t(1) << 18;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How one product is cut into tasks: every batch entry into mb x nb blocks of
// rows x cols; parallel_for runs grain tasks per chunk at least.
struct Split {
  int64_t mb = 1, nb = 1, rows = 0, cols = 0, grain = 1;
};

// Ember's float32 kernel blocks for the cache itself, so a product is cut
// only for the threads: into equal row blocks, or column blocks where the
// output is wider than tall (a batch of tokens against a wide weight). Each
// task packs the part of op(B) it uses, so column blocks pack op(B) once in
// all where row blocks would pack all of it once per thread: GPT-2's 50257
// x 768 embedding, transposed, is 154 MB. Column blocks are whole panels of
// 64 columns.
Split plan_split_sgemm(int64_t nbatch, int64_t m, int64_t n, int64_t k, int threads) {
  Split s;
  s.rows = m;
  s.cols = n;
  const int64_t per_product = m * n * k;
  if (threads > 1 && nbatch < threads && nbatch * per_product >= kParallelWork) {
    const int64_t want = threads / std::gcd<int64_t>(nbatch, threads);
    if (n > m && n >= want * 64) {
      s.cols = ceil_div(ceil_div(n, want), 64) * 64;
      s.nb = ceil_div(n, s.cols);
    } else {
      const int64_t blocks = std::max<int64_t>(1, std::min(want, m / kMinBlock));
      s.rows = ceil_div(ceil_div(m, blocks), kBlockAlign) * kBlockAlign;
      s.mb = ceil_div(m, s.rows);
    }
  }
  const int64_t per_task = std::max<int64_t>(1, per_product / (s.mb * s.nb));
  s.grain = std::max<int64_t>(1, kParallelWork / per_task);
  return s;
}

Split plan_split(int64_t nbatch, int64_t m, int64_t n, int64_t k, int threads) {
  Split s;
  s.rows = m;
  s.cols = n;
  const int64_t per_product = m * n * k;
  // Blocks wanted for the threads: enough that batch * blocks is a multiple
  // of the thread count, so every thread gets the same number of equal blocks.
  int64_t want = 1;
  if (threads > 1 && nbatch < threads && nbatch * per_product >= kParallelWork)
    want = threads / std::gcd<int64_t>(nbatch, threads);
  // Blocks wanted for the cache: C in row blocks of at most kBlockElems, in a
  // multiple of the threads' count.
  const int64_t cache_blocks = m * n > kBlockElems && m / kMinBlock > 1 ? ceil_div(m * n, kBlockElems) : 1;
  if (cache_blocks > 1) want = ceil_div(cache_blocks, want) * want;
  if (want > 1) {
    auto cut = [&](int64_t extent, int64_t& count, int64_t& size) {
      const int64_t blocks = std::max<int64_t>(1, std::min(want, extent / kMinBlock));
      size = ceil_div(ceil_div(extent, blocks), kBlockAlign) * kBlockAlign;
      count = ceil_div(extent, size);
    };
    // Row blocks keep each task's writes to C contiguous; column blocks are
    // for the few-rows case (a short batch of tokens against a wide weight).
    if (m >= n || m >= want * kMinBlock)
      cut(m, s.mb, s.rows);
    else
      cut(n, s.nb, s.cols);
  }
  const int64_t per_task = std::max<int64_t>(1, per_product / (s.mb * s.nb));
  s.grain = std::max<int64_t>(1, kParallelWork / per_task);
  return s;
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
               double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

// Element offsets of batch entry t's A, B and C (its index unravelled over
// d.batch, row-major).
struct BatchOffsets {
  int64_t a = 0, b = 0, c = 0;
};
BatchOffsets batch_offsets(const GemmDesc& d, int64_t t) {
  BatchOffsets o;
  for (int i = static_cast<int>(d.batch.size()) - 1; i >= 0; --i) {
    const int64_t idx = t % d.batch[i];
    t /= d.batch[i];
    o.a += idx * d.a_batch_strides[i];
    o.b += idx * d.b_batch_strides[i];
    o.c += idx * d.c_batch_strides[i];
  }
  return o;
}

cpu::GemmElem gemm_elem(const Tensor& t) {
  return t.dtype() == DType::BFloat16 ? cpu::GemmElem::kBFloat16 : cpu::GemmElem::kFloat32;
}

// The bfloat16 form: any of A, B, C bfloat16 (the others float32). Each
// product goes to Ember's bf16 GEMM (ops/bgemm_avx512.h: AVX512_BF16 where
// the CPU has it, else its float32 fallback), which rounds a float32 operand
// to bfloat16 as it packs it, accumulates in float32 and rounds a bfloat16 C
// once. A single product is split over the pool by bgemm itself; a batch is
// split by entries here, and bgemm runs each inline on its thread.
void cpu_gemm_bf16(const GemmDesc& d) {
  const int64_t nbatch = d.batch.numel();
  const auto* A = static_cast<const char*>(d.a.data_ptr());
  const auto* B = static_cast<const char*>(d.b.data_ptr());
  auto* C = static_cast<char*>(d.c.data_ptr());
  const int64_t ea = d.a.element_size(), eb = d.b.element_size(), ec = d.c.element_size();
  auto one = [&](int64_t t) {
    const BatchOffsets o = batch_offsets(d, t);
    cpu::BgemmArgs g;
    g.trans_a = d.trans_a;
    g.trans_b = d.trans_b;
    g.m = d.m;
    g.n = d.n;
    g.k = d.k;
    g.alpha = static_cast<float>(d.alpha);
    g.beta = static_cast<float>(d.beta);
    g.a = A + o.a * ea;
    g.lda = d.lda;
    g.a_type = gemm_elem(d.a);
    g.b = B + o.b * eb;
    g.ldb = d.ldb;
    g.b_type = gemm_elem(d.b);
    g.c = C + o.c * ec;
    g.ldc = d.ldc;
    g.c_type = gemm_elem(d.c);
    if (d.bias.defined()) {
      g.bias = d.bias.data_ptr();
      g.bias_type = gemm_elem(d.bias);
    }
    cpu::bgemm(g);
  };
  if (nbatch == 1) return one(0);
  const int64_t grain = std::max<int64_t>(1, kParallelWork / std::max<int64_t>(1, d.m * d.n * d.k));
  parallel_for(0, nbatch, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) one(t);
  });
}

void cpu_gemm(const GemmDesc& d) {
  // One row (decoding a token at batch 1): a matrix-vector product that reads
  // B once, streaming, instead of packing it (ops/gemv_avx512.h).
  if (cpu::gemv_gemm(d)) return;
  if (d.a.dtype() == DType::BFloat16 || d.b.dtype() == DType::BFloat16 || d.c.dtype() == DType::BFloat16)
    return cpu_gemm_bf16(d);
  for (int64_t v : {d.m, d.n, d.k, d.lda, d.ldb, d.ldc})
    EMBER_CHECK(v <= INT_MAX, ValueError, "matmul: size ", v,
                " exceeds the 32-bit range of the BLAS interface (m=", d.m, ", n=", d.n, ", k=", d.k, ")");
  const int64_t nbatch = d.batch.numel();
  const bool ember_sgemm = d.c.dtype() == DType::Float32 && cpu::sgemm_avx512_fits(d.m, d.n, d.k);
  const Split s = ember_sgemm ? plan_split_sgemm(nbatch, d.m, d.n, d.k, num_threads())
                              : plan_split(nbatch, d.m, d.n, d.k, num_threads());
  const int64_t blocks = s.mb * s.nb;
  dispatch_floating(d.c.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    const T* A = static_cast<const T*>(d.a.data_ptr());
    const T* B = static_cast<const T*>(d.b.data_ptr());
    T* C = static_cast<T*>(d.c.data_ptr());
    const T alpha = static_cast<T>(d.alpha);
    // OpenBLAS: a bias is written into the block first and the product
    // accumulated onto it (beta 1); Ember's kernel adds it as it stores C.
    const T* bias = d.bias.defined() ? static_cast<const T*>(d.bias.data_ptr()) : nullptr;
    const T beta = bias ? T(1) : static_cast<T>(d.beta);
    parallel_for(0, nbatch * blocks, s.grain, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const BatchOffsets o = batch_offsets(d, t / blocks);
        const int64_t oa = o.a, ob = o.b, oc = o.c;
        // Block: rows [m0, m1) of A and C, columns [n0, n1) of B and C.
        const int64_t blk = t % blocks;
        const int64_t m0 = (blk / s.nb) * s.rows, m1 = std::min(d.m, m0 + s.rows);
        const int64_t n0 = (blk % s.nb) * s.cols, n1 = std::min(d.n, n0 + s.cols);
        const T* a = A + oa + (d.trans_a ? m0 : m0 * d.lda);
        const T* b = B + ob + (d.trans_b ? n0 * d.ldb : n0);
        T* c = C + oc + m0 * d.ldc + n0;
        if constexpr (std::is_same_v<T, float>) {
          if (cpu::sgemm_avx512_fits(m1 - m0, n1 - n0, d.k)) {  // adds the bias as it writes C
            cpu::sgemm_avx512(d.trans_a, d.trans_b, m1 - m0, n1 - n0, d.k, alpha, a, d.lda, b, d.ldb,
                              static_cast<T>(d.beta), c, d.ldc, bias ? bias + n0 : nullptr);
            continue;
          }
        }
        if (bias)
          for (int64_t r = 0; r < m1 - m0; ++r) std::copy(bias + n0, bias + n1, c + r * d.ldc);
        blas_gemm(d.trans_a, d.trans_b, static_cast<int>(m1 - m0), static_cast<int>(n1 - n0), static_cast<int>(d.k),
                  alpha, a, static_cast<int>(d.lda), b, static_cast<int>(d.ldb), beta, c, static_cast<int>(d.ldc));
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_kernel, CPU, cpu_gemm);

}  // namespace ember
