/// \file
/// Ember's bfloat16 GEMM: C = alpha * op(A) @ op(B) + beta * C (+ bias), with
/// A and B in bfloat16 (or float32, rounded to bfloat16 as they are packed:
/// autocast's float32 master weights) and float32 accumulation, on CPUs with
/// AVX512_BF16 (AMD Zen 4 and 5, Intel Cooper Lake and later). Written against raw pointers: a
/// bfloat16 is its 16 bits in a uint16_t (the upper half of a float32).
///
/// What it takes (every combination):
///  - A: bfloat16 or float32, row-major or transposed (trans_a), any lda;
///  - B: bfloat16 or float32, row-major or transposed (trans_b), any ldb;
///  - C: float32 or bfloat16 (each sum rounded once, at the store, to nearest
///    even, NaN to 0x7FC0 as PyTorch's c10::BFloat16), any ldc;
///  - bias (one value per column, linear's): none, float32 or bfloat16;
///  - any m, n, k (k odd included, k = 0 gives beta C + bias); beta = 0
///    never reads C.
/// A float32 operand is rounded to bfloat16 (nearest even) before it is
/// multiplied, on both paths: the product is the one of the bf16-rounded
/// operands, accumulated in float32. One difference between the paths:
/// vdpbf16ps is defined with DAZ and FTZ (Intel SDM), so on the kernel path
/// a subnormal bf16 operand (below 1.2e-38 in magnitude) counts as zero and
/// a subnormal partial sum is flushed to zero, as in oneDNN's bf16 GEMMs on
/// these CPUs; the fallback keeps them. Beta, the bias and the rounding of C
/// are ordinary float32 arithmetic on both.
///
/// How (the kernel, ops/bgemm_kernel_avx512.cpp; its packing in
/// ops/bgemm_pack_avx512.h): `vdpbf16ps` multiplies pairs of bf16 along k
/// and adds both products into one float32 lane. op(B) is packed into column
/// panels of 64 (4 vectors) whose k pairs are interleaved: word (q, j) holds
/// B(2q, j) in its low half and B(2q+1, j) in its high half, a missing
/// B(k, j) for odd k and missing columns zero. A's pairs are broadcast as
/// 32-bit words: straight from a row-major bf16 A (an odd k's last element
/// read alone: its neighbour is not its partner), else from a packed copy: a
/// row-major float32 A's rows rounded to bf16 in their order, a transposed
/// A's pairs interleaved. Blocks of 6 x 64 (8 x 16..48 for narrower panels)
/// of C accumulate in registers; inner dims beyond 512 go pass by pass
/// through a float32 workspace, so a bf16 C is still rounded once. Products
/// of at most 512 rows (a batch of tokens against a weight; on the pool,
/// with at least 4 column panels per thread) copy A once, and
/// each task packs its panels' passes of op(B) just before using them,
/// asking for the next pass's lines while the blocks compute; taller ones
/// pack all of op(B) first, then run row chunks x column groups (A packed
/// per task). Tasks run on Ember's pool (parallel_for; inline when nested).
///
/// Which path: the kernel when the CPU has AVX512_BF16 (CPUID, checked once)
/// and it is not switched off; otherwise the fallback, which converts the
/// operands to float32 (rounding float32 ones through bf16 first) and calls
/// the float32 GEMM (ops/sgemm_avx512.h or OpenBLAS), then applies beta, the
/// bias and the rounding of C the same way. The kernel is compiled with
/// function target attributes, so an x86-64 build without -march=native has
/// it too; a non-x86 build has only the fallback. EMBER_NO_AVX512_BF16=1 in
/// the environment, or bgemm_force_fallback(true), selects the fallback.
#pragma once

#include <cstdint>

namespace ember::cpu {

/// Element type of one of the bf16 GEMM's arrays.
enum class GemmElem : uint8_t {
  kFloat32,   ///< float
  kBFloat16,  ///< uint16_t holding bfloat16 bits
};

/// One bf16 GEMM: C[m x n] (row stride ldc) = alpha * op(A)[m x k] @ op(B)[k x n] + beta * C (+ bias[j] in
/// every row), with op(A)(r, p) = trans_a ? a[p * lda + r] : a[r * lda + p] and op(B)(p, j) likewise.
struct BgemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0;
  GemmElem a_type = GemmElem::kBFloat16;
  const void* b = nullptr;
  int64_t ldb = 0;
  GemmElem b_type = GemmElem::kBFloat16;
  void* c = nullptr;
  int64_t ldc = 0;
  GemmElem c_type = GemmElem::kFloat32;
  const void* bias = nullptr;  ///< n values, or null
  GemmElem bias_type = GemmElem::kFloat32;
};

/// Runs one product (on the pool when it is large). Throws ValueError naming "bgemm" for negative sizes, a
/// leading dimension smaller than its rows, or a null array that the product reads or writes.
void bgemm(const BgemmArgs& args);

/// Whether this CPU (and OS) can run the AVX512_BF16 kernel: CPUID, read once.
bool bgemm_cpu_has_avx512_bf16();
/// Whether bgemm runs the kernel now: the CPU has it, and neither EMBER_NO_AVX512_BF16 (read at start) nor
/// bgemm_force_fallback(true) switched it off.
bool bgemm_uses_kernel();
/// Forces the float32 fallback (true) or lets the CPU and EMBER_NO_AVX512_BF16 decide again (false); for tests
/// and benchmarks.
void bgemm_force_fallback(bool on);

/// Register-only vdpbf16ps loop: the core's bf16 peak in GFLOP/s over about `seconds` (2 flops per bf16
/// pair product, 64 per instruction), on the calling thread; 0 without AVX512_BF16. For the bench's machine line.
double bf16_peak_gflops(double seconds);
/// The same with vfmadd231ps (32 flops per instruction): the float32 peak, measured the same way; 0 where the
/// bf16 one is 0.
double fp32_peak_gflops(double seconds);

/// float32 -> bfloat16 bits, round to nearest even (NaN -> 0x7FC0, as PyTorch), and back (exact). The
/// kernel's rounding, for its tests and fallback.
///@{
uint16_t bf16_from_float(float x);
float bf16_to_float(uint16_t h);
///@}

}  // namespace ember::cpu
