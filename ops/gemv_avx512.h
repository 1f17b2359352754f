/// \file
/// Ember's matrix-vector product for the GEMMs of one row: y = alpha x op(B)
/// + beta y (+ bias), x one row of k, op(B) k x n, y one row of n. That is
/// decoding at batch 1: every Linear of a language model multiplies one
/// token's activations by its whole weight, so the product reads each weight
/// once and does two flops with it, and its speed is the memory bandwidth.
/// The GEMM kernels (ops/sgemm_avx512.h, ops/bgemm_avx512.h) pack B per call
/// and block for reuse that one row never has; this kernel streams B once.
///
/// What it takes: x, B and y each float32 or bfloat16, the bias (none,
/// float32 or bfloat16) too. All float32 is the float32 product; with any of
/// x, B, y in bfloat16 it is the bf16 GEMM's product (ops/bgemm_avx512.h): a
/// float32 x or B rounded to bfloat16 (nearest even) before it is
/// multiplied, float32 accumulation, a bfloat16 y rounded once at the store. B row-major (B(p, j) = b[p ldb + j])
/// or transposed (b[j ldb + p]: a Linear's (out, in) weight), any ldb; x
/// strided (incx); any n, k (k = 0 gives beta y + bias); beta = 0 never reads y.
///
/// How: x is copied to a float32 row (rounded through bfloat16 for a bf16 B);
/// the outputs are cut into blocks of 128 spread over Ember's pool. Transposed
/// B: each output is the dot product of one contiguous row of B with x, row
/// after row (one sequential stream) in four AVX-512 accumulators. Row-major B: each row p of B
/// adds x[p] times its block of columns into up to eight vectors of y. A
/// bfloat16 element becomes a float32 by a 16-bit shift (exact), so bf16
/// products equal the bf16 GEMM's up to the order of the float32 sums, and
/// the kernel needs AVX-512F alone. Without AVX-512 (no __AVX512F__ in the
/// build) gemv runs the same loops in plain C++ (gemv_force_fallback(true)
/// selects them on any CPU, for the tests), and the GEMM kernel's hook,
/// gemv_gemm, leaves products to the GEMM kernels, OpenBLAS's among them.
#pragma once

#include <cstdint>

#include <ember/ops/bgemm_avx512.h>  // GemmElem

namespace ember {
struct GemmDesc;  // ops/matmul.h
}

namespace ember::cpu {

/// One product y[n] = alpha * x[k] op(B)[k x n] + beta * y + bias, with x[p] = x[p * incx] and
/// op(B)(p, j) = trans_b ? b[j * ldb + p] : b[p * ldb + j].
struct GemvArgs {
  bool trans_b = false;
  int64_t n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* x = nullptr;
  int64_t incx = 1;
  GemmElem x_type = GemmElem::kFloat32;
  const void* b = nullptr;
  int64_t ldb = 0;
  GemmElem b_type = GemmElem::kFloat32;
  void* y = nullptr;
  GemmElem y_type = GemmElem::kFloat32;
  const void* bias = nullptr;  ///< n values, or null
  GemmElem bias_type = GemmElem::kFloat32;
};

/// Runs one product on the pool (inline when it is small or nested). Throws ValueError naming "gemv" for
/// negative sizes, ldb smaller than a stored row of op(B) needs, incx < 1, or a null array it reads or writes.
void gemv(const GemvArgs& args);

/// The CPU GEMM kernel's hook (ops/matmul_cpu.cpp): runs desc here and returns true when it is one product
/// (no batch) of one row, float32 and bfloat16 operands, and the AVX-512 loops are on; false leaves it to
/// the GEMM kernels.
bool gemv_gemm(const GemmDesc& desc);

/// Forces the portable loops (true) or lets the build decide again (false); for tests.
void gemv_force_fallback(bool on);
/// Whether gemv runs its AVX-512 loops now.
bool gemv_uses_avx512();

}  // namespace ember::cpu
