/// \file
/// Causal multi-head attention as one op: query i sees keys 0 .. i + (S - L)
/// (the last query sees every key; bottom-right aligned, as FlashAttention 2
/// and a KV cache need; for L = S it is the usual "no future tokens" mask,
/// ops/softmax.h's causal_mask). The same math as ops/attention.h's
/// multi_head_attention with that mask, and the same dropout draws:
/// \code
///   S = Q K^T / sqrt(D), S_ij = -inf for j > i + (S - L);  W = softmax(S);
///   Wd = dropout(W, p);  O = Wd V.
/// \endcode
/// On the CPU (float32 and float64) one fused kernel runs the FlashAttention
/// algorithm: per (batch entry, head), blocks of 64 queries against blocks of
/// 64 keys, with a running row max m and running sum l (when a later block
/// raises the max from m to m', what was summed so far is rescaled by
/// exp(m - m')); blocks wholly above the diagonal are never computed; only
/// each row's log-sum-exp m + log l is kept for backward (memory linear in
/// the context, never L x S); backward recomputes each block's weights from
/// it and redraws the same dropout mask from the same Philox counters.
/// On CUDA (cuda/causal_attention.cu, float32 and float64, head dims up to
/// detail::kCudaCausalMaxHeadDim) the same algorithm runs one block per
/// (batch entry, head, query tile), with the same dropout draws; bfloat16
/// and float16 with head dim 64 or 128 run forward and backward on tensor
/// cores (cuda/causal_attention_tc.cu and _tc_bwd.cu, FlashAttention 2's
/// tiling; float32 accumulation and log-sum-exp). Other devices
/// and dtypes, and other heads on CUDA, run the composed path
/// (multi_head_attention with the mask), which every backend has.
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/random.h>
#include <ember/core/tensor.h>
#include <ember/ops/random_kernels.h>

namespace ember {

/// q (N, L, E), k and v (N, S, E) with S >= L, E = num_heads * D: any views
/// whose last dim is contiguous. dropout_p in [0, 1) drops attention
/// weights (default_generator() when gen is null; the same draws as
/// multi_head_attention's on the (N, H, L, S) weights). Returns (N, L, E).
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads, double dropout_p = 0.0,
                        Generator* gen = nullptr);

/// Causal self-attention on a packed projection qkv (N, T, 3E) = [q | k | v]
/// (GPT's c_attn output); its gradient is one (N, T, 3E) tensor.
Tensor causal_self_attention(const Tensor& qkv, int64_t num_heads, double dropout_p = 0.0, Generator* gen = nullptr);

/// The mask multi_head_attention takes for the same result: bool (L, S),
/// true where key j > query i + (S - L).
Tensor causal_attention_mask(int64_t L, int64_t S, Device device = kCPU);

namespace detail {
/// What the fused kernels take besides tensors: heads, the 1/sqrt(D) scale,
/// the dropout probability and the Philox stream of its draws (element e of
/// the (N, H, L, S) weights takes word e % 4 of counter spec.offset + e / 4).
struct CausalAttentionParams {
  int64_t heads;
  double scale, p;
  RandomSpec spec;
};
/// The fused kernels; a backend registers both to take the op over from the
/// composed path. q, k, v: (N, T, E) with unit last stride; out (N, L, E)
/// and lse (N, H, L) contiguous, of q's dtype (float32 or float64; for
/// bfloat16 and float16 on CUDA out has q's dtype and lse is float32); g and
/// out unit last stride; dq, dk, dv: views with unit last stride, or
/// undefined when that gradient is not wanted.
///@{
extern KernelTable<void(const Tensor& q, const Tensor& k, const Tensor& v, const CausalAttentionParams& pr, Tensor& out,
                        Tensor& lse)>
    causal_forward_kernel;
extern KernelTable<void(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const CausalAttentionParams& pr, Tensor& dq, Tensor& dk, Tensor& dv)>
    causal_backward_kernel;
///@}
/// The widest head the CUDA kernels take: a warp's lanes hold a row's D
/// accumulators four columns each, 4 x 32 = 128. Wider heads on CUDA take
/// the composed path (its GEMMs have no such limit).
inline constexpr int64_t kCudaCausalMaxHeadDim = 128;
/// Whether the CUDA tensor-core kernels take dtype dt at head dim D:
/// bfloat16 or float16, D = 64 or 128 (a warp's mma fragments cover D in
/// steps of 16, and D / 8 float32 output blocks stay in registers).
inline bool cuda_causal_tensor_core(DType dt, int64_t D) {
  return (dt == DType::BFloat16 || dt == DType::Float16) && (D == 64 || D == 128);
}
}  // namespace detail

}  // namespace ember
