/// \file
/// The decoder half of the Transformer and the whole encoder-decoder, with
/// torch.nn's names, options and mask semantics:
/// TransformerDecoderLayer, TransformerDecoder, Transformer and
/// generate_square_subsequent_mask. A PyTorch nn.Transformer's state dict
/// loads by name (encoder.layers.0.self_attn.in_proj_weight,
/// decoder.layers.0.multihead_attn.out_proj.weight, encoder.norm.weight,
/// decoder.norm.bias, ...).
///
/// A decoder layer, as the notes describe it: "each target token attends to
/// present and past target tokens only" (self-attention under a causal mask),
/// then "each target token attends to all input tokens" (cross-attention over
/// the encoder's output, the memory), then the feed-forward block; each of
/// the three is wrapped as x + block(norm(x)) (norm_first) or norm(x +
/// block(x)) (post-norm, the default).
///
/// Incremental decoding (TransformerDecoder::init_cache / step): generating
/// token t needs the self-attention keys and values of positions 0..t and the
/// memory's keys and values. The cache keeps, per layer, the projected keys
/// and values of the earlier target positions (grown by one position a step)
/// and those of the memory (projected once), so a step projects and attends
/// for one query position only: O(t) work instead of the O(t^2) of running
/// the whole prefix again, with the same result (tested). The causal mask is
/// implicit: the cache holds no future positions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ember/nn/attention.h>
#include <ember/nn/layers.h>
#include <ember/nn/transformer.h>

namespace ember::nn {

/// torch.nn.TransformerDecoderLayer's arguments, which are the encoder layer's.
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

/// (sz, sz) float mask, -inf above the diagonal and 0 elsewhere, as
/// torch.nn.Transformer.generate_square_subsequent_mask: added to the
/// scores, it hides later positions. (tgt_is_causal = true, or the bool
/// causal_mask of ops/softmax.h, mask the same positions and keep attention
/// on its fused path; an additive mask takes the composed one.)
Tensor generate_square_subsequent_mask(int64_t sz, Device device = kCPU);

/// Masks for a decoder's forward, as torch's keyword arguments. Bool masks
/// are true where masked out; floating masks are added to the scores.
struct TransformerDecoderMasks {
  Tensor tgt_mask;                 ///< (T, T) or (N * nhead, T, T)
  Tensor memory_mask;              ///< (T, S) or (N * nhead, T, S)
  Tensor tgt_key_padding_mask;     ///< (N, T)
  Tensor memory_key_padding_mask;  ///< (N, S)
  /// Applies the causal mask to the self-attention (combined with tgt_mask if
  /// that is given too). PyTorch treats it as a hint that tgt_mask is causal;
  /// here it is enough on its own.
  bool tgt_is_causal = false;
};

/// One layer's incremental-decoding state: projected self-attention keys and
/// values of the positions decoded so far and the memory's, all batch first
/// (N, positions, d_model).
struct TransformerDecoderLayerCache {
  ///@{
  Tensor self_k, self_v;      ///< grown by one position per step
  Tensor memory_k, memory_v;  ///< projected once by init_cache
  ///@}
};

/// The decoder's incremental state (TransformerDecoder::init_cache).
struct TransformerDecoderCache {
  std::vector<TransformerDecoderLayerCache> layers;  ///< one per layer
  Tensor memory_mask;                                ///< memory_key_padding_mask as (N, 1, 1, S) bool, or undefined
  int64_t steps = 0;                                 ///< positions decoded so far
  /// Keeps batch entries index (int64, 1-D) in that order, e.g. the parent
  /// hypotheses of a beam search step; an entry may repeat.
  void reorder(const Tensor& index);
};

/// Submodules (and so state-dict names) as in PyTorch: self_attn,
/// multihead_attn, linear1, dropout, linear2, norm1, norm2, norm3, dropout1,
/// dropout2, dropout3.
class TransformerDecoderLayer : public Module {
 public:
  /// A layer with PyTorch's initialisation (of MultiheadAttention and Linear).
  explicit TransformerDecoderLayer(TransformerDecoderLayerOptions opts);
  /// tgt (N, T, E) (batch_first) or (T, N, E), memory (N, S, E) or (S, N, E).
  /// Unbatched, as PyTorch takes them: tgt (T, E) and memory (S, E), key
  /// padding masks (T) and (S), giving (T, E).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks = {});
  /// One position: tgt (N, 1, E) or (1, N, E), the next target position's
  /// input; attends over the cached positions and itself, and the cached
  /// memory. Appends this position's keys and values to cache.
  Tensor step(const Tensor& tgt, TransformerDecoderLayerCache& cache, const Tensor& memory_mask);
  using Module::forward;
  std::string type_name() const override { return "TransformerDecoderLayer"; }

  TransformerDecoderLayerOptions opts;                 ///< the options given
  std::shared_ptr<MultiheadAttention> self_attn;       ///< over the target (causal)
  std::shared_ptr<MultiheadAttention> multihead_attn;  ///< over the memory
  ///@{
  std::shared_ptr<Linear> linear1, linear2;  ///< the MLP: d_model -> dim_feedforward -> d_model
  ///@}
  ///@{
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;  ///< in the MLP, after each block
  ///@}
  ///@{
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;  ///< around self-attention, cross-attention, the MLP
  ///@}
  /// When set, forward and step keep the cross-attention weights, averaged
  /// over heads and detached, in cross_attention_weights: (N, T, S) from
  /// forward, (N, 1, S) from step. Off by default (the weights cost a
  /// composed attention instead of the fused one).
  bool keep_attention_weights = false;
  Tensor cross_attention_weights;  ///< see keep_attention_weights

 private:
  /// The three residual blocks around the given self- and cross-attention
  /// (batch-first x in, out), pre- or post-norm; forward and step differ in
  /// the attentions only.
  template <class SelfAttention, class CrossAttention>
  Tensor blocks(const Tensor& x, SelfAttention&& sa, CrossAttention&& ca);
};

/// num_layers copies of a decoder layer (layers.0, ...) and an optional
/// final LayerNorm ("norm").
class TransformerDecoder : public Module {
 public:
  /// num_layers layers made from the same options (independent weights).
  TransformerDecoder(TransformerDecoderLayerOptions layer, int64_t num_layers, bool final_norm = false);
  /// Every layer in turn with the same memory and masks, then norm.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks = {});
  /// The cache for incremental decoding against memory (N, S, E) or (S, N,
  /// E): every layer's memory keys and values, projected once. (memory_mask
  /// and tgt_key_padding_mask are not supported in this mode.)
  TransformerDecoderCache init_cache(const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor());
  /// The decoder's output for one more position: tgt (N, 1, E) or (1, N, E)
  /// is position cache.steps of the (already embedded) target. Equal to
  /// forward over the whole prefix with a causal mask, at that position.
  Tensor step(const Tensor& tgt, TransformerDecoderCache& cache);
  using Module::forward;
  std::string type_name() const override { return "TransformerDecoder"; }
  /// Layer i.
  TransformerDecoderLayer& layer(size_t i) { return layers->at<TransformerDecoderLayer>(i); }
  std::shared_ptr<ModuleList> layers;  ///< the TransformerDecoderLayers
  std::shared_ptr<LayerNorm> norm;     ///< null without final_norm
  bool batch_first;                    ///< the layers' layout
};

/// torch.nn.Transformer's arguments.
struct TransformerOptions {
  int64_t d_model = 512;                     ///< the model width
  int64_t nhead = 8;                         ///< attention heads
  int64_t num_encoder_layers = 6;            ///< encoder depth
  int64_t num_decoder_layers = 6;            ///< decoder depth
  int64_t dim_feedforward = 2048;            ///< the MLPs' hidden width
  double dropout = 0.1;                      ///< as in the layers
  Activation activation = Activation::ReLU;  ///< ReLU, GELU ("relu", "gelu") or any Tensor(const Tensor&)
  double layer_norm_eps = 1e-5;              ///< eps of every LayerNorm
  bool batch_first = false;                  ///< (N, L, E) rather than (L, N, E)
  bool norm_first = false;                   ///< pre-norm layers when true
  /// The layers' options from these.
  TransformerEncoderLayerOptions layer() const {
    return {.d_model = d_model,
            .nhead = nhead,
            .dim_feedforward = dim_feedforward,
            .dropout = dropout,
            .activation = activation,
            .layer_norm_eps = layer_norm_eps,
            .batch_first = batch_first,
            .norm_first = norm_first};
  }
};

/// torch.nn.Transformer: an encoder and a decoder, each with a final
/// LayerNorm (encoder.norm, decoder.norm), every weight matrix re-drawn from
/// xavier_uniform as PyTorch's _reset_parameters does. No embeddings and no
/// positional encoding: those are the caller's, as in PyTorch.
class Transformer : public Module {
 public:
  /// The encoder and decoder from the options.
  explicit Transformer(TransformerOptions opts = {});
  /// src (N, S, E) / (S, N, E), tgt (N, T, E) / (T, N, E) -> (N, T, E) / (T,
  /// N, E). src_mask (S, S) and src_key_padding_mask (N, S) go to the
  /// encoder; masks to the decoder (its memory_key_padding_mask is usually
  /// src_key_padding_mask). Unbatched, as PyTorch takes them: src (S, E) and
  /// tgt (T, E), key padding masks (S) and (T), giving (T, E).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const TransformerDecoderMasks& masks = {});
  using Module::forward;
  std::string type_name() const override { return "Transformer"; }
  TransformerOptions opts;                      ///< the options given
  std::shared_ptr<TransformerEncoder> encoder;  ///< the source side (with norm)
  std::shared_ptr<TransformerDecoder> decoder;  ///< the target side (with norm)
};

}  // namespace ember::nn
