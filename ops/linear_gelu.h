/// \file
/// linear_gelu: gelu(x @ weight^T + bias) as one op, the MLP's first half in
/// GPT and the transformer layers. On the CPU it is exactly linear then gelu
/// (the GEMM adds the bias as it stores each block of C, already free);
/// where the backend has the fused kernels (CUDA) the bias moves out of the
/// GEMM into the activation: forward is the GEMM plus one elementwise pass
/// (pre = y + b, out = gelu(pre)), backward one pass that writes
/// dpre = dout * gelu'(pre) and sums it down the columns into db, instead
/// of a bias copy, a GELU pass, a GELU-backward pass and a column sum.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>
#include <ember/ops/activation.h>

namespace ember {

/// gelu(linear(x, weight, bias), approximate): x [..., in], weight [out, in],
/// bias [out] or undefined. Any other bias shape, mixed dtypes or devices
/// run (and are refused) as linear and gelu would. Autocast as linear's
/// (GEMM-shaped: the region's 16-bit dtype); the GELU runs in that dtype,
/// as it does after a 16-bit linear.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   GeluApproximation approximate = GeluApproximation::None);

namespace detail {

/// pre [rows, n] contiguous holds x W^T; adds bias [n] (contiguous, or
/// undefined) in place, so that pre is the pre-activation the backward
/// needs, and writes out [rows, n] = gelu(pre). 16-bit tensors compute in
/// float32 and round pre and out once each.
extern KernelTable<void(Tensor& pre, const Tensor& bias, Tensor& out, GeluApproximation approximate)> bias_gelu_kernel;
/// dpre [rows, n] = dout * gelu'(pre) (dout, pre [rows, n] contiguous) and,
/// when dbias is defined, dbias [n] = the column sums of dpre, in one pass
/// over the rows (deterministic: the order depends on the shape alone).
extern KernelTable<void(const Tensor& dout, const Tensor& pre, Tensor& dpre, Tensor& dbias,
                        GeluApproximation approximate)>
    bias_gelu_backward_kernel;

}  // namespace detail

}  // namespace ember
