// Transformer decoder layers, the decoder with its incremental-decoding
// cache, and the encoder-decoder Transformer, composed from
// MultiheadAttention, Linear, LayerNorm and Dropout (so their backward is the
// ops' backward).
#include <ember/nn/transformer_decoder.h>

#include <cmath>

#include <ember/nn/init.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>
#include <ember/ops/softmax.h>

namespace ember::nn {

Tensor generate_square_subsequent_mask(int64_t sz, Device device) {
  EMBER_CHECK(sz >= 0, ValueError, "generate_square_subsequent_mask: size must be >= 0, got ", sz);
  return masked_fill(zeros({sz, sz}, TensorOptions(kFloat32, device)), causal_mask(sz, sz, device), -INFINITY);
}

void TransformerDecoderCache::reorder(const Tensor& index) {
  for (auto& l : layers)
    for (Tensor* t : {&l.self_k, &l.self_v, &l.memory_k, &l.memory_v})
      if (t->defined()) *t = index_select(*t, 0, index);
  if (memory_mask.defined()) memory_mask = index_select(memory_mask, 0, index);
}

TransformerDecoderLayer::TransformerDecoderLayer(TransformerDecoderLayerOptions o) : opts(o) {
  const MultiheadAttentionOptions mo{o.dropout, true, 0, 0, o.batch_first};
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(o.d_model, o.nhead, mo));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(o.d_model, o.nhead, mo));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(o.dropout));
}

template <class SelfAttention, class CrossAttention>
Tensor TransformerDecoderLayer::blocks(const Tensor& tgt, SelfAttention&& sa, CrossAttention&& ca) {
  // add(residual, feed-forward(x)), the add joined to linear2's op.
  auto ff = [&](const Tensor& x, const Tensor& residual) {
    return detail::transformer_feed_forward(x, *linear1, *dropout, *linear2, *dropout3, opts.activation, residual);
  };
  // sa(h, residual) and ca(h, residual): add(residual, dropout(attention(h))).
  Tensor x = tgt;
  if (opts.norm_first) {
    x = sa((*norm1)(x), x);
    x = ca((*norm2)(x), x);
    x = ff((*norm3)(x), x);
  } else {
    x = (*norm1)(sa(x, x));
    x = (*norm2)(ca(x, x));
    x = (*norm3)(ff(x, x));
  }
  return x;
}

namespace {
// Unbatched decoder inputs as a batch of one: the key padding masks (T) and
// (S) as (1, T) and (1, S); the attention masks are the same either way.
TransformerDecoderMasks masks_of_one(const TransformerDecoderMasks& m) {
  TransformerDecoderMasks one = m;
  one.tgt_key_padding_mask = detail::padding_mask_of_one(m.tgt_key_padding_mask);
  one.memory_key_padding_mask = detail::padding_mask_of_one(m.memory_key_padding_mask);
  return one;
}
}  // namespace

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& m) {
  if (tgt.dim() == 2) {  // unbatched (T, E) with (S, E): a batch of one at the batch dim
    EMBER_CHECK(memory.dim() == 2, ShapeError, "TransformerDecoderLayer: an unbatched tgt ", tgt.shape().str(),
                " needs an unbatched memory (S, E), got ", memory.shape().str());
    const int64_t b = opts.batch_first ? 0 : 1;
    return forward(tgt.unsqueeze(b), memory.unsqueeze(b), masks_of_one(m)).squeeze(b);
  }
  // Each attention's output projection, dropout and residual add as one op (MultiheadAttention::forward_dropout_add).
  auto sa = [&](const Tensor& x, const Tensor& residual) {
    return self_attn
        ->forward_dropout_add(residual, *dropout1, x, x, x, m.tgt_key_padding_mask, false, m.tgt_mask, true,
                              m.tgt_is_causal)
        .first;
  };
  auto ca = [&](const Tensor& x, const Tensor& residual) {
    auto [out, w] = multihead_attn->forward_dropout_add(
        residual, *dropout2, x, memory, memory, m.memory_key_padding_mask, keep_attention_weights, m.memory_mask);
    if (keep_attention_weights) cross_attention_weights = w.detach();
    return out;
  };
  return blocks(tgt, sa, ca);
}

Tensor TransformerDecoderLayer::step(const Tensor& tgt, TransformerDecoderLayerCache& cache,
                                     const Tensor& memory_mask) {
  const Tensor x = opts.batch_first ? tgt : tgt.transpose(0, 1);  // (N, 1, E)
  EMBER_CHECK(tgt.dim() == 3 && x.size(1) == 1 && x.size(2) == opts.d_model && cache.memory_k.defined() &&
                  cache.memory_k.size(0) == x.size(0),
              ShapeError, "TransformerDecoderLayer::step: expected one position ",
              opts.batch_first ? "(N, 1, " : "(1, N, ", opts.d_model, ") for a cache of ",
              cache.memory_k.defined() ? cache.memory_k.size(0) : 0, " batch entries, got ", tgt.shape().str());
  // Self-attention: this position's key and value join the cache, and its
  // query attends over them all (no mask: the cache holds no later positions).
  auto sa = [&](const Tensor& h, const Tensor& residual) {
    auto [k, v] = self_attn->project_kv(h, h);
    cache.self_k = cache.self_k.defined() ? cat({cache.self_k, k}, 1) : k;
    cache.self_v = cache.self_v.defined() ? cat({cache.self_v, v}, 1) : v;
    return add(residual, (*dropout1)(self_attn->forward_projected(h, cache.self_k, cache.self_v)));
  };
  auto ca = [&](const Tensor& h, const Tensor& residual) {
    Tensor w;
    const Tensor out = multihead_attn->forward_projected(h, cache.memory_k, cache.memory_v, memory_mask,
                                                         keep_attention_weights ? &w : nullptr);
    if (keep_attention_weights) cross_attention_weights = w.detach();
    return add(residual, (*dropout2)(out));
  };
  const Tensor y = blocks(x, sa, ca);
  return opts.batch_first ? y : y.transpose(0, 1);
}

TransformerDecoder::TransformerDecoder(TransformerDecoderLayerOptions layer, int64_t num_layers, bool final_norm)
    : batch_first(layer.batch_first) {
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerDecoderLayer>(layer));
  if (final_norm)
    norm = register_module("norm", std::make_shared<LayerNorm>(Shape{layer.d_model}, layer.layer_norm_eps));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks) {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i) x = layer(i).forward(x, memory, masks);
  return norm ? (*norm)(x) : x;
}

TransformerDecoderCache TransformerDecoder::init_cache(const Tensor& memory, const Tensor& memory_key_padding_mask) {
  EMBER_CHECK(memory.dim() == 3, ShapeError, "TransformerDecoder::init_cache: expected 3-D memory, got ",
              memory.shape().str());
  const Tensor mem = batch_first ? memory : memory.transpose(0, 1);
  TransformerDecoderCache cache;
  for (size_t i = 0; i < layers->size(); ++i) {
    auto [k, v] = layer(i).multihead_attn->project_kv(mem, mem);
    cache.layers.push_back({Tensor(), Tensor(), k, v});
  }
  if (memory_key_padding_mask.defined()) {
    const int64_t N = mem.size(0), S = mem.size(1);
    EMBER_CHECK(memory_key_padding_mask.shape() == Shape({N, S}), ShapeError,
                "TransformerDecoder::init_cache: memory_key_padding_mask of shape ",
                memory_key_padding_mask.shape().str(), " should be [", N, ", ", S, "]");
    const Tensor m = memory_key_padding_mask.reshape({N, 1, 1, S});
    cache.memory_mask = m.is_floating_point() ? m : m.to(DType::Bool);
  }
  return cache;
}

Tensor TransformerDecoder::step(const Tensor& tgt, TransformerDecoderCache& cache) {
  EMBER_CHECK(cache.layers.size() == layers->size(), ValueError, "TransformerDecoder::step: a cache of ",
              cache.layers.size(), " layers for a decoder of ", layers->size(), " (make it with init_cache)");
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i) x = layer(i).step(x, cache.layers[i], cache.memory_mask);
  ++cache.steps;
  return norm ? (*norm)(x) : x;
}

Transformer::Transformer(TransformerOptions o) : opts(o) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(o.layer(), o.num_encoder_layers, true));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(o.layer(), o.num_decoder_layers, true));
  // PyTorch's _reset_parameters: every matrix from xavier_uniform (the
  // Linear weights too, which would otherwise keep kaiming_uniform).
  for (auto& [name, p] : named_parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask,
                            const Tensor& src_key_padding_mask, const TransformerDecoderMasks& masks) {
  const int b = opts.batch_first ? 0 : 1;
  if (src.dim() == 2 && tgt.dim() == 2)  // unbatched (S, E) and (T, E): a batch of one
    return forward(src.unsqueeze(b), tgt.unsqueeze(b), src_mask, detail::padding_mask_of_one(src_key_padding_mask),
                   masks_of_one(masks))
        .squeeze(b);
  EMBER_CHECK(src.dim() == 3 && tgt.dim() == 3 && src.size(b) == tgt.size(b) && src.size(2) == opts.d_model &&
                  tgt.size(2) == opts.d_model,
              ShapeError, "Transformer: src ", src.shape().str(), " and tgt ", tgt.shape().str(),
              " should share the batch size (dim ", b, ") and have d_model = ", opts.d_model,
              " features (or both be unbatched, (S, E) and (T, E))");
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask);
  return decoder->forward(tgt, memory, masks);
}

}  // namespace ember::nn
