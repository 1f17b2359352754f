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
/// Devices without a fused kernel (CUDA today) run the composed path
/// (multi_head_attention with the mask), which every backend has.
#pragma once

#include <ember/core/random.h>
#include <ember/core/tensor.h>

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

}  // namespace ember
