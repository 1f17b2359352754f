// Scaled dot-product, additive and multi-head attention, composed from ops
// (matmul on transposed views, fused masked softmax, dropout), so their
// backward is the ops' backward.
#include <ember/nn/attention.h>

#include <cmath>

#include <ember/nn/init.h>
#include <ember/ops/activation.h>
#include <ember/ops/attention.h>
#include <ember/ops/dropout.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/join.h>
#include <ember/ops/matmul.h>
#include <ember/ops/reduce.h>
#include <ember/ops/softmax.h>

namespace ember::nn {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    double dropout_p, bool is_causal, Tensor* weights) {
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, ShapeError,
              "scaled_dot_product_attention: q, k, v need at least 2 dims, got ", q.shape().str(), ", ",
              k.shape().str(), ", ", v.shape().str());
  EMBER_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), ShapeError, "scaled_dot_product_attention: q ",
              q.shape().str(), ", k ", k.shape().str(), " and v ", v.shape().str(),
              " do not fit (q and k share the last dim, k and v the key count)");
  // scores = q k^T / sqrt(d): the scaling keeps the softmax out of its flat
  // regions when d is large.
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  Tensor bool_mask;
  if (mask.defined()) {
    if (mask.is_floating_point())
      scores = add(scores, mask);
    else
      bool_mask = mask;
  }
  if (is_causal) {
    const Tensor c = causal_mask(q.size(-2), k.size(-2), q.device());
    if (bool_mask.defined() && bool_mask.dtype() == DType::Int64) {
      // Valid lengths and causality together: combine into one bool mask.
      Tensor tmp = masked_softmax(zeros_like(scores), bool_mask);
      bool_mask = logical_or(eq(tmp, 0.0), c);
    } else {
      bool_mask = bool_mask.defined() ? logical_or(bool_mask, c) : c;
    }
  }
  Tensor w = bool_mask.defined() ? masked_softmax(scores, bool_mask) : softmax(scores, -1);
  if (dropout_p > 0) w = ember::dropout(w, dropout_p, true);
  if (weights) *weights = w;
  return matmul(w, v);
}

// ---- additive attention -------------------------------------------------------
AdditiveAttention::AdditiveAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens, double dropout) {
  W_k = register_module("W_k", std::make_shared<Linear>(key_size, num_hiddens, false));
  W_q = register_module("W_q", std::make_shared<Linear>(query_size, num_hiddens, false));
  w_v = register_module("w_v", std::make_shared<Linear>(num_hiddens, 1, false));
  drop = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor AdditiveAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                  const Tensor& valid_lens) {
  return forward_projected(queries, project_keys(keys), values, valid_lens);
}

Tensor AdditiveAttention::forward_projected(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                                            const Tensor& valid_lens) {
  // features[b, i, j, :] = tanh(W_q q_i + W_k k_j), by broadcasting
  // (B, Q, 1, H) + (B, 1, K, H).
  const Tensor features = tanh(add((*W_q)(queries).unsqueeze(2), projected_keys.unsqueeze(1)));
  const Tensor scores = (*w_v)(features).squeeze(-1);  // (B, Q, K)
  attention_weights = valid_lens.defined() ? masked_softmax(scores, valid_lens) : softmax(scores, -1);
  return matmul((*drop)(attention_weights), values);
}

// ---- multi-head attention -----------------------------------------------------
MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MultiheadAttentionOptions o)
    : embed_dim(e),
      num_heads(h),
      head_dim(h > 0 ? e / h : 0),
      kdim(o.kdim ? o.kdim : e),
      vdim(o.vdim ? o.vdim : e),
      dropout(o.dropout),
      batch_first(o.batch_first) {
  EMBER_CHECK(e > 0 && h > 0 && e % h == 0, ValueError, "MultiheadAttention: embed_dim ", e,
              " must be divisible by num_heads ", h);
  if (kdim == e && vdim == e) {
    Tensor w = empty({3 * e, e});
    init::xavier_uniform_(w);
    in_proj_weight = register_parameter("in_proj_weight", w);
  } else {
    Tensor wq = empty({e, e}), wk = empty({e, kdim}), wv = empty({e, vdim});
    init::xavier_uniform_(wq);
    init::xavier_uniform_(wk);
    init::xavier_uniform_(wv);
    q_proj_weight = register_parameter("q_proj_weight", wq);
    k_proj_weight = register_parameter("k_proj_weight", wk);
    v_proj_weight = register_parameter("v_proj_weight", wv);
  }
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, o.bias));
  if (o.bias) init::zeros_(out_proj->bias);
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask, bool average_attn_weights,
                                                      bool is_causal) {
  auto [out, weights] = heads(query, key, value, key_padding_mask, need_weights, attn_mask, is_causal);
  out = (*out_proj)(out);
  if (!batch_first) out = out.transpose(0, 1);
  if (need_weights && average_attn_weights) weights = mean(weights, {1});
  return {out, weights};
}

std::pair<Tensor, Tensor> MultiheadAttention::forward_dropout_add(const Tensor& residual, const Dropout& out_dropout,
                                                                  const Tensor& query, const Tensor& key,
                                                                  const Tensor& value, const Tensor& key_padding_mask,
                                                                  bool need_weights, const Tensor& attn_mask,
                                                                  bool average_attn_weights, bool is_causal) {
  if (!batch_first) {
    // The output is a transposed view here, and dropout draws its mask in
    // the view's order: the three ops, so the draws stay theirs.
    auto [out, weights] =
        forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal);
    return {add(residual, ember::dropout(out, out_dropout.p, out_dropout.is_training())), weights};
  }
  auto [out, weights] = heads(query, key, value, key_padding_mask, need_weights, attn_mask, is_causal);
  out = out_proj->forward_dropout_add(out, out_dropout, residual);
  if (need_weights && average_attn_weights) weights = mean(weights, {1});
  return {out, weights};
}

std::pair<Tensor, Tensor> MultiheadAttention::heads(const Tensor& query, const Tensor& key, const Tensor& value,
                                                    const Tensor& key_padding_mask, bool need_weights,
                                                    const Tensor& attn_mask, bool is_causal) {
  EMBER_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, ShapeError,
              "MultiheadAttention: expected 3-D query, key and value, got ", query.shape().str(), ", ",
              key.shape().str(), ", ", value.shape().str());
  // Work batch first: (N, L, E).
  const Tensor q_in = batch_first ? query : query.transpose(0, 1);
  const Tensor k_in = batch_first ? key : key.transpose(0, 1);
  const Tensor v_in = batch_first ? value : value.transpose(0, 1);
  const int64_t N = q_in.size(0), L = q_in.size(1), S = k_in.size(1), E = embed_dim, H = num_heads;
  EMBER_CHECK(q_in.size(2) == E && k_in.size(2) == kdim && v_in.size(2) == vdim && v_in.size(1) == S &&
                  k_in.size(0) == N && v_in.size(0) == N,
              ShapeError, "MultiheadAttention: query ", query.shape().str(), ", key ", key.shape().str(), " and value ",
              value.shape().str(), " do not fit embed_dim ", E, ", kdim ", kdim, ", vdim ", vdim,
              batch_first ? " (batch_first)" : " (sequence first)");
  const Tensor wq = proj_weight(0), wk = proj_weight(1), wv = proj_weight(2);
  const Tensor bq = proj_bias(0), bk = proj_bias(1), bv = proj_bias(2);
  const bool self_attention = in_proj_weight.defined() && query.is_same(key) && key.is_same(value);
  // Combine the masks into one broadcastable to (N, H, L, S).
  Tensor mask;
  if (attn_mask.defined()) {
    EMBER_CHECK(
        (attn_mask.dim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S) ||
            (attn_mask.dim() == 3 && attn_mask.size(0) == N * H && attn_mask.size(1) == L && attn_mask.size(2) == S),
        ShapeError, "MultiheadAttention: attn_mask of shape ", attn_mask.shape().str(), " should be [", L, ", ", S,
        "] or [", N * H, ", ", L, ", ", S, "]");
    mask = attn_mask.dim() == 3 ? attn_mask.reshape({N, H, L, S}) : attn_mask;
  }
  if (key_padding_mask.defined()) {
    EMBER_CHECK((key_padding_mask.shape() == Shape({N, S})), ShapeError,
                "MultiheadAttention: key_padding_mask of shape ", key_padding_mask.shape().str(), " should be [", N,
                ", ", S, "]");
    Tensor kpm = key_padding_mask.reshape({N, 1, 1, S});
    if (!mask.defined()) {
      mask = kpm.is_floating_point() ? kpm : kpm.to(DType::Bool);
    } else if (mask.is_floating_point()) {
      mask = kpm.is_floating_point() ? add(mask, kpm) : masked_fill(mask.expand({N, H, L, S}), kpm, -INFINITY);
    } else {
      // bool attn_mask with a float padding mask: turn the bool one additive.
      mask = kpm.is_floating_point()
                 ? add(masked_fill(zeros(mask.shape(), TensorOptions(kpm.dtype(), kpm.device())), mask, -INFINITY), kpm)
                 : logical_or(mask, kpm);
    }
  }
  const double p = is_training() ? dropout : 0.0;
  Tensor weights;
  Tensor out;
  if (is_causal) {
    const Tensor c = causal_mask(L, S, query.device());
    mask = !mask.defined() ? c
           : !mask.is_floating_point()
               ? logical_or(mask, c)
               : add(mask, masked_fill(zeros({L, S}, TensorOptions(mask.dtype(), mask.device())), c, -INFINITY));
  }
  if (self_attention && !need_weights && (!mask.defined() || mask.dtype() == DType::Bool) && p < 1.0 &&
      N * L * S * E > 0) {
    // Self-attention projects once with the packed (3E, E) weight: one GEMM
    // of width 3E, and one (N, L, 3E) gradient the backward GEMMs write into
    // (ops/attention.h).
    out = multi_head_self_attention(linear(q_in, in_proj_weight, in_proj_bias), H, mask, p);
  } else if (self_attention) {
    const Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    out = attend(qkv.narrow(2, 0, E), qkv.narrow(2, E, E), qkv.narrow(2, 2 * E, E), mask,
                 need_weights ? &weights : nullptr);
  } else {
    out = attend(linear(q_in, wq, bq), linear(k_in, wk, bk), linear(v_in, wv, bv), mask,
                 need_weights ? &weights : nullptr);
  }
  return {out, need_weights ? weights : Tensor()};
}

Tensor MultiheadAttention::proj_weight(int i) const {
  return in_proj_weight.defined() ? in_proj_weight.narrow(0, i * embed_dim, embed_dim)
                                  : (i == 0   ? q_proj_weight
                                     : i == 1 ? k_proj_weight
                                              : v_proj_weight);
}

Tensor MultiheadAttention::proj_bias(int i) const {
  return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * embed_dim, embed_dim) : Tensor();
}

Tensor MultiheadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  Tensor* weights) {
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1), E = embed_dim, H = num_heads, D = head_dim;
  const double p = is_training() ? dropout : 0.0;
  if (!weights && (!mask.defined() || mask.dtype() == DType::Bool) && p < 1.0 && N * L * S * E > 0) {
    // The usual case (no weights asked for, no additive mask): attention as
    // one op on the projections as they are, heads read and written in
    // place, its output already (N, L, E).
    return multi_head_attention(q, k, v, H, mask, p);
  }
  // Composed from ops: the attention weights come out as a tensor, or the
  // mask is additive. Split heads (N, L, E) -> (N, H, L, D), attend, merge.
  const Tensor qh = q.reshape({N, L, H, D}).permute({0, 2, 1, 3});
  const Tensor kh = k.reshape({N, S, H, D}).permute({0, 2, 1, 3});
  const Tensor vh = v.reshape({N, S, H, D}).permute({0, 2, 1, 3});
  return scaled_dot_product_attention(qh, kh, vh, mask, p, false, weights).permute({0, 2, 1, 3}).reshape({N, L, E});
}

std::pair<Tensor, Tensor> MultiheadAttention::project_kv(const Tensor& key, const Tensor& value) {
  EMBER_CHECK(key.dim() == 3 && value.dim() == 3 && key.size(2) == kdim && value.size(2) == vdim &&
                  key.size(0) == value.size(0) && key.size(1) == value.size(1),
              ShapeError, "MultiheadAttention::project_kv: key ", key.shape().str(), " and value ", value.shape().str(),
              " should be batch-first (N, S, ", kdim, ") and (N, S, ", vdim, ")");
  const int64_t E = embed_dim;
  if (in_proj_weight.defined() && key.is_same(value)) {
    // One GEMM of width 2E for both (the packed weight's k and v rows).
    const Tensor kv = linear(key, in_proj_weight.narrow(0, E, 2 * E),
                             in_proj_bias.defined() ? in_proj_bias.narrow(0, E, 2 * E) : Tensor());
    return {kv.narrow(2, 0, E), kv.narrow(2, E, E)};
  }
  return {linear(key, proj_weight(1), proj_bias(1)), linear(value, proj_weight(2), proj_bias(2))};
}

Tensor MultiheadAttention::forward_projected(const Tensor& query, const Tensor& k, const Tensor& v, const Tensor& mask,
                                             Tensor* weights, bool average_attn_weights) {
  EMBER_CHECK(query.dim() == 3 && query.size(2) == embed_dim && k.dim() == 3 && k.shape() == v.shape() &&
                  k.size(0) == query.size(0) && k.size(2) == embed_dim,
              ShapeError, "MultiheadAttention::forward_projected: query ", query.shape().str(), ", projected key ",
              k.shape().str(), " and value ", v.shape().str(), " should be batch-first (N, L, ", embed_dim,
              ") and (N, S, ", embed_dim, ")");
  const Tensor out = (*out_proj)(attend(linear(query, proj_weight(0), proj_bias(0)), k, v, mask, weights));
  if (weights && average_attn_weights) *weights = mean(*weights, {1});
  return out;
}

}  // namespace ember::nn
