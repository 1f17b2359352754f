/// \file
/// linear_dropout_add: residual + dropout(x @ weight^T + bias, p) as one op,
/// the end of a transformer's residual branch (GPT's attention and MLP
/// projections, the transformer layers' feed-forward). On the CPU it is
/// exactly linear, dropout and add (the GEMM adds the bias as it stores
/// each block of C, already free); where the backend has the fused kernels
/// (CUDA) the bias moves out of the GEMM into one elementwise pass,
///   out = residual + keep * (y + b) / (1 - p),
/// with keep drawn as dropout draws it (the same Philox counters of the same
/// generator), and backward one pass that writes dpre = dout * keep / (1 - p)
/// and sums it down the columns into db; the residual's gradient is dout.
/// That is the GEMM and one kernel forward instead of a bias copy, the GEMM,
/// a dropout pass and an add, and one pass backward instead of a dropout
/// backward and a column sum.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/ops/random_kernels.h>

namespace ember {

/// add(residual, dropout(linear(x, weight, bias), p, training, gen)):
/// x [..., in], weight [out, in], bias [out] or undefined, residual of the
/// result's shape (other shapes broadcast as add's). Not training, or p = 0:
/// residual + linear(x, weight, bias), nothing drawn. Autocast as linear's
/// (GEMM-shaped: the region's 16-bit dtype); the dropout runs in that
/// dtype, and the residual is not cast: the result has the dtype add gives
/// (a float32 residual and a bfloat16 product make a float32 sum).
Tensor linear_dropout_add(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual, double p,
                          bool training = true, Generator* gen = nullptr);

namespace detail {

/// y [rows, n] contiguous holds x W^T (dtype T); writes out [rows, n] (y's
/// storage may be out's) = residual + dropout(y + bias), residual and out
/// contiguous [rows, n] of one dtype: T, or float32 when T is 16-bit. bias
/// [n] or undefined. keep [rows, n] bool, or undefined for no dropout (then
/// spec and p are unused): element e keeps when Philox counter spec.offset +
/// e / 4, word e % 4, passes dropout_threshold(p), as the dropout kernels
/// decide. Each step rounds as the composed ops do: y + b to T, the dropped
/// value to T, the sum to out's dtype.
extern KernelTable<void(const Tensor& y, const Tensor& bias, const Tensor& residual, Tensor& out, Tensor& keep,
                        const RandomSpec& spec, double p)>
    bias_dropout_add_kernel;
/// dpre [rows, n] (dtype T) = T(dout) * keep / (1 - p) (dout [rows, n] of
/// T, or float32 when T is 16-bit; keep undefined: no dropout), and, when
/// dbias is defined, dbias [n] = the column sums of dpre, in one pass over
/// the rows (deterministic: the order depends on the shape alone). dpre
/// may be undefined when keep is and dout has dtype T: then only the sums
/// are taken, of dout.
extern KernelTable<void(const Tensor& dout, const Tensor& keep, double p, Tensor& dpre, Tensor& dbias)>
    dropout_bias_backward_kernel;

}  // namespace detail

}  // namespace ember
