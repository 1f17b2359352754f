/// \file
/// Multi-head scaled dot-product attention as one op, forward and backward,
/// on the projections as the input GEMMs leave them.
///
/// Composed from ops (split heads, matmul, scale, softmax, dropout, matmul,
/// merge heads), attention copies q, k and v into per-head layouts and back,
/// makes a pass to scale the scores, and in backward copies the three
/// gradients into the packed projection's gradient. Here every GEMM reads and
/// writes the heads where they already are (strided views, ops/matmul.h's
/// matmul_into): head h of q is columns [h D, (h + 1) D) of each row of q,
/// the output is (N, L, H * D) with the heads side by side (what the output
/// projection reads), the 1/sqrt(D) scale rides on the GEMM's alpha, and for
/// a packed projection the backward GEMMs write dq, dk and dv into their
/// slices of one (N, L, 3E) gradient. What runs between the GEMMs is the
/// softmax and dropout kernels, so every backend with those kernels runs it.
/// On the CPU, float32 or bfloat16 attention over 32 to 64 keys without a
/// mask (at most 64 queries and head dims) runs one fused kernel instead: each head's
/// scores, softmax, dropout and product stay in a 16 KB buffer, only each
/// row's log-sum-exp is kept, and backward recomputes the weights from it
/// and redraws the same dropout mask (the FlashAttention scheme).
///
/// Per batch entry n and head h, with Q = q[n, :, h], K = k[n, :, h], V = v[n, :, h]:
/// \code
///   S = Q K^T / sqrt(D);  W = softmax(S) over the keys (masked keys get 0);
///   Wd = dropout(W, p);   O = Wd V.
/// \endcode
/// Backward, with G = dO:
/// \code
///   dV = Wd^T G;  dWd = G V^T;  dW = dropout's backward of dWd;
///   dS = W * (dW - rowsum(dW * W))  (softmax's backward);
///   dQ = dS K / sqrt(D);  dK = dS^T Q / sqrt(D).
/// \endcode
#pragma once

#include <ember/core/random.h>
#include <ember/core/tensor.h>

namespace ember {

/// q (N, L, E), k and v (N, S, E): projections with E = num_heads * D, any
/// views whose last dim is contiguous (read in place). mask: bool,
/// broadcastable to (N, num_heads, L, S), true where a key is masked out (a
/// query with every key masked gets zero weights), or undefined. dropout_p
/// in [0, 1) drops attention weights (default_generator() when gen is null;
/// the same draws as ember::dropout on the (N, H, L, S) weights). Returns
/// (N, L, E), contiguous.
Tensor multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                            const Tensor& mask = Tensor(), double dropout_p = 0.0, Generator* gen = nullptr);

/// Self-attention on a packed projection qkv (N, L, 3E) = [q | k | v] (the
/// output of MultiheadAttention's in_proj): the same result as
/// multi_head_attention on its three slices, and its gradient is one
/// (N, L, 3E) tensor that the backward GEMMs write directly.
Tensor multi_head_self_attention(const Tensor& qkv, int64_t num_heads, const Tensor& mask = Tensor(),
                                 double dropout_p = 0.0, Generator* gen = nullptr);

namespace detail {
/// The checks every attention entry point makes (defined tensors, shapes,
/// one floating dtype and device, heads dividing the width, keys present,
/// p in [0, 1), a bool mask broadcasting to (N, H, L, S)); errors name op.
void check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t num_heads,
                            const Tensor& mask, double p);
/// x detached, with a contiguous last dim (copied only when it has not).
Tensor unit_last(const Tensor& x);
}  // namespace detail

}  // namespace ember
