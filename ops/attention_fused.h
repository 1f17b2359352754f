/// \file
/// The fused CPU attention kernel's tables (ops/attention_cpu.cpp), shared
/// by the op (ops/attention.cpp) and its kernel; internal to the library.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>
#include <ember/ops/random_kernels.h>

namespace ember::detail {

/// The fused kernel's entry points, through kernel tables so that the
/// profiler and anomaly mode see them like every other kernel. q, k, v:
/// (N, T, E) with unit last stride, float32 or bfloat16; out (N, L, E) of
/// their dtype and lse (N, H, L) float32, contiguous; g, dq, dk, dv of their
/// dtype (dq, dk, dv: views with unit last stride, or undefined); backward
/// also gets the forward's out (the CUDA kernels' Delta = dO . O; the CPU
/// kernel does not read it).
struct FusedAttentionParams {
  int64_t heads;
  double scale, p;
  RandomSpec spec;
};

extern KernelTable<void(const Tensor& q, const Tensor& k, const Tensor& v, const FusedAttentionParams& fp, Tensor& out,
                        Tensor& lse)>
    attention_forward_kernel;
extern KernelTable<void(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const FusedAttentionParams& fp, Tensor& dq, Tensor& dk, Tensor& dv)>
    attention_backward_kernel;

}  // namespace ember::detail
