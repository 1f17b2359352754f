/// \file
/// Matrix products: matmul (PyTorch's full semantics), mm, bmm and linear,
/// plus the one GEMM kernel table they all go through.
///
/// Every product in Ember, batched or not, is handed to a backend as one
/// GemmDesc: sizes, a transpose flag and leading dimension per operand, and a
/// batch described by per-operand strides (0 where an operand is broadcast).
/// So transposed operands are read in place (BLAS's transpose flags) and
/// broadcast batch dims are never materialised. The CPU kernel calls
/// OpenBLAS pinned to one thread and splits the work over Ember's own pool;
/// a CUDA backend registers cuBLAS into the same table.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/shape.h>
#include <ember/core/tensor.h>

namespace ember {

/// torch.matmul:
/// \code
///   1-D @ 1-D  -> 0-dim dot product;
///   2-D @ 2-D  -> matrix product;
///   1-D @ N-D  -> a 1 is prepended to a's shape for the product, then removed;
///   N-D @ 1-D  -> a 1 is appended to b's shape for the product, then removed;
///   N-D @ N-D  -> batched over the leading dims, which broadcast:
///                 (2, 1, 3, 4) @ (5, 4, 6) -> (2, 5, 3, 6).
/// \endcode
/// Any floating dtype; both operands of one dtype and device. bfloat16 runs
/// on Ember's bf16 GEMM on the CPU (float32 accumulation, one rounding of
/// the result); float16, and 16-bit on other devices, through float32.
/// Inside an autocast region (core/autocast.h) float32 operands are
/// multiplied as bfloat16 (docs/PRECISION.md).
Tensor matmul(const Tensor& a, const Tensor& b);
/// [m, k] @ [k, n] -> [m, n], both strictly 2-D (torch.mm).
Tensor mm(const Tensor& a, const Tensor& b);
/// [b, m, k] @ [b, k, n] -> [b, m, n], both strictly 3-D with equal batch (torch.bmm).
Tensor bmm(const Tensor& a, const Tensor& b);
/// x @ weight^T + bias (torch.nn.functional.linear): x [..., in], weight
/// [out, in], bias broadcastable to [..., out] (usually [out]) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

/// out = alpha * a @ b + beta * out, recording no graph: for ops that keep
/// GEMM results in a layout of their own (multi-head attention writes each
/// head's product into its columns of an (N, L, H * D) buffer). a [..., m, k]
/// and b [..., k, n] are read in place where BLAS can address them; their
/// batch dims broadcast to out's [..., m, n]; out may be any view whose
/// matrices are row-major (contiguous rows, any row and batch strides).
/// a, b and out share one dtype, except on the CPU, where float32 and
/// bfloat16 may be mixed (at least one of the three bfloat16): products of
/// bf16-rounded operands accumulated in float32 (ops/bgemm_avx512.h).
void matmul_into(const Tensor& a, const Tensor& b, Tensor out, double alpha = 1.0, double beta = 0.0);

/// One batched GEMM in row-major BLAS terms. For every index i of `batch`
/// (row-major order):
/// \code
///   C_i = alpha * op(A_i) @ op(B_i) + beta * C_i,   C_i: [m, n], op(A_i): [m, k], op(B_i): [k, n]
/// \endcode
/// where A_i starts at a.data_ptr() + dot(i, a_batch_strides) elements and is
/// stored row-major with leading dimension lda, as [m, k] or, when trans_a, as
/// [k, m] read transposed (likewise B). C_i starts at c.data_ptr() +
/// dot(i, c_batch_strides) with leading dimension ldc. Batch strides are 0
/// where an operand is broadcast. The tensors only carry the base pointer,
/// dtype and device: their shapes and strides are not used.
/// Guarantees to kernels: m, n, k >= 1; lda >= cols of the stored A (same for
/// B, C); a, b, c on one device, of one floating dtype, except in the CPU's
/// bfloat16 form: each of a, b, c (and bias) float32 or bfloat16 with at
/// least one bfloat16, products of bf16-rounded operands accumulated in
/// float32 (autocast's products and their gradients); C does not overlap A or B.
struct GemmDesc {
  ///@{
  int64_t m = 0, n = 0, k = 0;  ///< the product's sizes
  ///@}
  ///@{
  bool trans_a = false, trans_b = false;  ///< whether A / B are stored transposed
  ///@}
  ///@{
  int64_t lda = 1, ldb = 1, ldc = 1;  ///< leading dimensions (elements between rows)
  ///@}
  Shape batch;  ///< empty: a single product
  ///@{
  Shape a_batch_strides, b_batch_strides, c_batch_strides;  ///< per batch dim, in elements (0: broadcast)
  ///@}
  ///@{
  Tensor a, b, c;  ///< base pointer, dtype and device of each operand
  ///@}
  double alpha = 1;  ///< scales the product (attention's 1/sqrt(d) costs no pass of its own)
  double beta = 0;   ///< 0: C is overwritten (its old contents ignored); 1: accumulated into
  /// Undefined, or a contiguous [n] vector (the dtype and device of C) added
  /// to every row of every C_i, with beta = 0: linear's bias. The CPU kernel
  /// adds it as it stores each block of C (Ember's own kernel) or writes it
  /// into the block just before OpenBLAS's GEMM, while the block is in cache,
  /// never in a pass over all of C first.
  Tensor bias;
};

/// The batched GEMM: OpenBLAS on the CPU, cuBLAS on CUDA.
extern KernelTable<void(const GemmDesc& desc)> gemm_kernel;

/// What anomaly mode (core/anomaly.h) checks around a gemm_kernel call: A and
/// B (and C when accumulated into) before, C after.
///@{
inline void anomaly_inputs(const GemmDesc& d, AnomalyCheck& check) {
  check.input(d.a);
  check.input(d.b);
  if (d.bias.defined()) check.input(d.bias);
  if (d.beta != 0) check.input(d.c);
}
inline void anomaly_outputs(const GemmDesc& d, AnomalyCheck& check) { check.output(d.c); }
///@}

}  // namespace ember
