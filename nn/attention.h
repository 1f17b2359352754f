/// \file
/// Attention, as in the reference notes and torch.nn:
///  - scaled_dot_product_attention with valid-length, boolean, additive or
///    causal masks and dropout on the weights;
///  - AdditiveAttention (Bahdanau): score = w_v^T tanh(W_q q + W_k k);
///  - MultiheadAttention with PyTorch's parameters (in_proj_weight,
///    in_proj_bias, out_proj.weight/bias; q/k/v_proj_weight when kdim or
///    vdim differ) and forward semantics.
/// Boolean masks mean "masked out" where true, as in nn.MultiheadAttention's
/// attn_mask and key_padding_mask (note: the reverse of
/// F.scaled_dot_product_attention's bool mask). A query whose keys are all
/// masked gets all-zero weights (PyTorch gives NaN).
#pragma once

#include <utility>

#include <ember/nn/layers.h>

namespace ember::nn {

/// q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv) -> (..., Lq, Dv).
/// mask: undefined; int64 valid lengths (see masked_softmax); bool (true =
/// masked) broadcastable to (..., Lq, Lk); or floating, added to the scores.
/// If weights is non-null it receives the attention weights (after dropout).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                                    double dropout_p = 0.0, bool is_causal = false, Tensor* weights = nullptr);

/// Bahdanau's additive scoring: scores[b, i, j] = w_v^T tanh(W_q q_i + W_k k_j),
/// then masked softmax over keys (valid lengths) and a weighted sum of values.
class AdditiveAttention : public Module {
 public:
  /// W_k: key_size -> num_hiddens, W_q: query_size -> num_hiddens, w_v:
  /// num_hiddens -> 1, all without bias; dropout on the weights.
  AdditiveAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens, double dropout = 0.0);
  /// queries (B, Q, query_size), keys (B, K, key_size), values (B, K, Dv).
  Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values, const Tensor& valid_lens = Tensor());
  /// The keys projected by W_k, (B, K, num_hiddens), for forward_projected.
  Tensor project_keys(const Tensor& keys) { return (*W_k)(keys); }
  /// forward with the keys already projected (project_keys): a decoder
  /// attending to the same keys at every step projects them once instead of
  /// once per step.
  Tensor forward_projected(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                           const Tensor& valid_lens = Tensor());
  using Module::forward;
  std::string type_name() const override { return "AdditiveAttention"; }
  ///@{
  std::shared_ptr<Linear> W_k, W_q, w_v;  ///< the key, query and score projections
  ///@}
  std::shared_ptr<Dropout> drop;  ///< dropout on the attention weights
  Tensor attention_weights;       ///< from the last forward
};

/// MultiheadAttention's options, as torch.nn.MultiheadAttention's arguments.
struct MultiheadAttentionOptions {
  double dropout = 0.0;      ///< dropout on the attention weights
  bool bias = true;          ///< biases in the input and output projections
  int64_t kdim = 0;          ///< 0: embed_dim
  int64_t vdim = 0;          ///< 0: embed_dim
  bool batch_first = false;  ///< (N, L, E) rather than (L, N, E)
};

/// torch.nn.MultiheadAttention: num_heads scaled dot-product attentions over
/// slices of embed_dim, with PyTorch's parameter names (in_proj_weight, or
/// q/k/v_proj_weight when kdim or vdim differ from embed_dim; in_proj_bias;
/// out_proj), so weights carry over by name.
class MultiheadAttention : public Module {
 public:
  /// embed_dim must be divisible by num_heads.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions opts = {});
  /// Returns (output, weights). Shapes (batch_first): query (N, L, E), key and
  /// value (N, S, kdim/vdim), output (N, L, E); otherwise sequence first.
  /// key_padding_mask (N, S) bool, true = ignore that key. attn_mask (L, S)
  /// or (N * num_heads, L, S), bool (true = masked) or floating (added).
  /// weights: (N, L, S) averaged over heads, (N, H, L, S) per head, or
  /// undefined when need_weights is false.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                    bool is_causal = false);
  /// add(residual, out_dropout(forward(...).first)) with out_proj's bias,
  /// the dropout and the add as one op after its GEMM
  /// (ops/linear_dropout_add.h), the same values as the three ops: the end
  /// of a transformer layer's attention branch; sequence first (not
  /// batch_first), the three ops as they are. residual has the output's
  /// shape. Returns (that sum, weights).
  std::pair<Tensor, Tensor> forward_dropout_add(const Tensor& residual, const Dropout& out_dropout, const Tensor& query,
                                                const Tensor& key, const Tensor& value,
                                                const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                                const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                                bool is_causal = false);
  /// Incremental decoding (nn::TransformerDecoder's cache): the key and
  /// value projections of batch-first key (N, S, kdim) and value (N, S,
  /// vdim), each (N, S, E), to keep and reuse at later steps.
  std::pair<Tensor, Tensor> project_kv(const Tensor& key, const Tensor& value);
  /// Attention of batch-first query (N, L, E) over keys and values already
  /// projected (project_kv, (N, S, E)), through the output projection:
  /// forward's result (batch first) for the same inputs. mask: bool (true =
  /// masked) or floating (added), broadcastable to (N, num_heads, L, S), or
  /// undefined. When weights is non-null it receives the weights, (N, L, S)
  /// averaged over heads or (N, H, L, S).
  Tensor forward_projected(const Tensor& query, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                           Tensor* weights = nullptr, bool average_attn_weights = true);
  /// Self-attention: forward(x, x, x) without weights.
  Tensor forward(const Tensor& x) override { return forward(x, x, x, Tensor(), false).first; }
  std::string type_name() const override { return "MultiheadAttention"; }

  ///@{
  int64_t embed_dim, num_heads, head_dim, kdim, vdim;  ///< sizes (head_dim = embed_dim / num_heads)
  ///@}
  double dropout;    ///< dropout on the attention weights
  bool batch_first;  ///< (N, L, E) inputs and outputs
  /// The input projections: in_proj_weight (3E, E) when kdim = vdim = E,
  /// otherwise q/k/v_proj_weight; in_proj_bias (3E) when bias.
  ///@{
  Tensor in_proj_weight, in_proj_bias, q_proj_weight, k_proj_weight, v_proj_weight;
  ///@}
  std::shared_ptr<Linear> out_proj;  ///< E -> E

 private:
  /// The q (i = 0), k (1) or v (2) input projection's weight and bias (undefined without bias).
  Tensor proj_weight(int i) const;
  Tensor proj_bias(int i) const;
  /// forward before out_proj: the heads' output batch first (N, L, E), and
  /// the weights per head (N, H, L, S) when need_weights.
  std::pair<Tensor, Tensor> heads(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& key_padding_mask, bool need_weights, const Tensor& attn_mask,
                                  bool is_causal);
  /// Attention of projected q (N, L, E) over projected k, v (N, S, E) with a
  /// mask broadcastable to (N, H, L, S): (N, L, E) before out_proj; weights
  /// (N, H, L, S) into *weights when non-null.
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, Tensor* weights);
};

}  // namespace ember::nn
