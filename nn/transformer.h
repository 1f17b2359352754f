/// \file
/// Transformer building blocks with PyTorch's names and options:
/// TransformerEncoderLayer / TransformerEncoder, sinusoidal and learned
/// positional encodings, PatchEmbedding and a VisionTransformer (Conv2d,
/// which PatchEmbedding uses, is in nn/conv.h, included here).
#pragma once

#include <array>
#include <memory>
#include <string>

#include <ember/nn/attention.h>
#include <ember/nn/conv.h>
#include <ember/nn/layers.h>
#include <ember/nn/regularize.h>

namespace ember::nn {

/// TransformerEncoderLayer's options, as torch.nn.TransformerEncoderLayer's arguments.
struct TransformerEncoderLayerOptions {
  int64_t d_model = 512;                     ///< the model width
  int64_t nhead = 8;                         ///< attention heads
  int64_t dim_feedforward = 2048;            ///< the MLP's hidden width
  double dropout = 0.1;                      ///< after attention, in the MLP and after it
  Activation activation = Activation::ReLU;  ///< ReLU, GELU ("relu", "gelu") or any Tensor(const Tensor&)
  double layer_norm_eps = 1e-5;              ///< eps of both LayerNorms
  bool batch_first = false;                  ///< (N, L, E) rather than (L, N, E)
  bool norm_first = false;                   ///< pre-norm when true
  /// Stochastic depth (timm's DropPath, not in PyTorch's layer): in training
  /// each sample's attention and MLP branches are dropped with this
  /// probability (and scaled by 1 / (1 - p) when kept); identity in eval. > 0
  /// adds the parameterless submodules drop_path1 and drop_path2.
  double drop_path = 0.0;
};

/// Submodules (and so state-dict names) as in PyTorch: self_attn, linear1,
/// dropout, linear2, norm1, norm2, dropout1, dropout2.
class TransformerEncoderLayer : public Module {
 public:
  /// A layer with PyTorch's initialisation.
  explicit TransformerEncoderLayer(TransformerEncoderLayerOptions opts);
  /// src_mask (L, S) and src_key_padding_mask (N, S): see MultiheadAttention.
  /// An unbatched src (S, E) with a key padding mask (S), as PyTorch takes
  /// it, gives an (S, E) result.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  /// forward without masks.
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  TransformerEncoderLayerOptions opts;            ///< the options given
  std::shared_ptr<MultiheadAttention> self_attn;  ///< self-attention
  ///@{
  std::shared_ptr<Linear> linear1, linear2;  ///< the MLP: d_model -> dim_feedforward -> d_model
  ///@}
  ///@{
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;  ///< in the MLP, after attention, after the MLP
  ///@}
  ///@{
  std::shared_ptr<LayerNorm> norm1, norm2;  ///< before (norm_first) or after attention and the MLP
  ///@}
  ///@{
  std::shared_ptr<DropPath> drop_path1, drop_path2;  ///< on the attention and MLP branches; null without drop_path
  ///@}
  /// For inspection (attention maps, rollout): when keep_attention_weights is
  /// set, each forward stores its self-attention weights, averaged over heads
  /// and detached, as (N, L, S) in attention_weights. Off by default: asking
  /// for the weights costs a head-mean per call.
  bool keep_attention_weights = false;
  /// The last forward's head-averaged attention weights (keep_attention_weights).
  Tensor attention_weights;

 private:
  // With a residual: add(residual, the block), its last ops fused.
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool is_causal,
                  const Tensor& residual = Tensor());
  Tensor ff_block(const Tensor& x, const Tensor& residual = Tensor());
};

namespace detail {
/// The encoder's and decoder's feed-forward block: dropout_out(linear2(
/// dropout(activation(linear1(x))))); with a residual, add(residual, that),
/// linear2, dropout_out and the add as one op (Linear::forward_dropout_add).
Tensor transformer_feed_forward(const Tensor& x, Linear& linear1, Dropout& dropout, Linear& linear2,
                                Dropout& dropout_out, const Activation& activation, const Tensor& residual = Tensor());
/// PyTorch's unbatched inputs as a batch of one: a key padding mask (S) as
/// (1, S); undefined or batched masks unchanged.
Tensor padding_mask_of_one(const Tensor& key_padding_mask);
}  // namespace detail

/// num_layers copies of a layer (layers.0, layers.1, ...) and an optional
/// final LayerNorm ("norm").
class TransformerEncoder : public Module {
 public:
  /// num_layers layers made from the same options (independent weights).
  TransformerEncoder(TransformerEncoderLayerOptions layer, int64_t num_layers, bool final_norm = false);
  /// Every layer in turn with the same masks (see TransformerEncoderLayer::forward), then norm.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false);
  /// forward without masks.
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  std::string type_name() const override { return "TransformerEncoder"; }
  std::shared_ptr<ModuleList> layers;  ///< the TransformerEncoderLayers
  std::shared_ptr<LayerNorm> norm;     ///< null without final_norm
};

/// x + P[:L] then dropout, with P[i, 2j] = sin(i / 10000^(2j/d)) and
/// P[i, 2j+1] = cos(i / 10000^(2j/d)); x is (N, L, d). P is a constant, not
/// part of the state dict (as in the notes).
class SinusoidalPositionalEncoding : public Module {
 public:
  /// Encodings for up to max_len positions of width d_model.
  SinusoidalPositionalEncoding(int64_t d_model, int64_t max_len = 1000, double dropout = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SinusoidalPositionalEncoding"; }
  Tensor P;                       ///< (1, max_len, d_model)
  std::shared_ptr<Dropout> drop;  ///< applied after the addition
};

/// x + a learned (1, max_len, d) table (parameter "weight", N(0, 0.02)).
class LearnedPositionalEncoding : public Module {
 public:
  /// A table for up to max_len positions of width d_model.
  LearnedPositionalEncoding(int64_t d_model, int64_t max_len);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LearnedPositionalEncoding"; }
  Tensor weight;  ///< (1, max_len, d_model)
};

/// (N, C, H, W) -> (N, num_patches, embed_dim) through a strided Conv2d
/// ("proj"); image and patch need not be square.
class PatchEmbedding : public Module {
 public:
  /// img_size must be a multiple of patch_size in both dims.
  PatchEmbedding(std::array<int64_t, 2> img_size, std::array<int64_t, 2> patch_size, int64_t in_channels,
                 int64_t embed_dim);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "PatchEmbedding"; }
  std::shared_ptr<Conv2d> proj;     ///< kernel = stride = patch_size, in_channels -> embed_dim
  int64_t num_patches;              ///< (H / ph) (W / pw)
  std::array<int64_t, 2> img_size;  ///< the expected (H, W)
};

/// The ViT's sizes; the defaults are the Fashion-MNIST demo's.
struct VisionTransformerOptions {
  std::array<int64_t, 2> img_size = {28, 28};  ///< (H, W)
  std::array<int64_t, 2> patch_size = {7, 7};  ///< (ph, pw)
  int64_t in_channels = 1;                     ///< image channels
  int64_t num_classes = 10;                    ///< outputs of the head
  int64_t embed_dim = 64;                      ///< token width
  int64_t depth = 4;                           ///< encoder blocks
  int64_t num_heads = 4;                       ///< attention heads per block
  int64_t mlp_dim = 128;                       ///< hidden width of each block's MLP
  double dropout = 0.1;                        ///< in the blocks and after the position embedding
  /// > 0: the "hybrid" variant: a 3x3 convolution (stride 1, padding 1) to
  /// stem_channels feature maps and a GELU before the patch embedding, which
  /// then splits those maps into patches (parameters stem.*). 0: none, and the
  /// state dict is the plain ViT's.
  int64_t stem_channels = 0;
  /// Stochastic depth over the blocks as timm: block i of depth drops its
  /// branches with probability drop_path_rate * i / (depth - 1), from 0 at
  /// the first block to drop_path_rate at the last. 0: off.
  double drop_path_rate = 0.0;
  /// DeiT's distillation token: a second learned token ("dist_token") after
  /// [CLS], with its own position-embedding slot and its own head
  /// ("head_dist"), trained towards a teacher (nn::distillation_loss).
  bool distillation = false;
};

/// The two heads of a VisionTransformer with a distillation token: logits of
/// the [CLS] head (trained on the labels) and of the distillation head
/// (trained on the teacher).
struct ViTHeads {
  Tensor cls;   ///< head([CLS]), (N, num_classes)
  Tensor dist;  ///< head_dist(dist token), (N, num_classes)
};

/// Patch embedding, a learned [CLS] token and position embedding, pre-norm
/// encoder blocks (GELU MLP), a final LayerNorm and a linear head on [CLS].
/// Names: patch_embed.proj.*, cls_token, pos_embed, blocks.i.*, norm.*, head.*;
/// with distillation also dist_token and head_dist.* (DeiT's names; the
/// tokens are [CLS], dist, then the patches).
class VisionTransformer : public Module {
 public:
  /// cls_token, dist_token and pos_embed drawn from trunc_normal(0, 0.02); the layers keep their default
  /// initialisation.
  explicit VisionTransformer(VisionTransformerOptions opts);
  /// (N, C, H, W) -> (N, num_classes). With distillation, in training and in
  /// eval alike, the average of the two heads (DeiT's inference output);
  /// train a distilled model through forward_heads.
  Tensor forward(const Tensor& images) override;
  /// Both heads' logits (distillation only; ValueError otherwise).
  ViTHeads forward_heads(const Tensor& images);
  /// The final norm's output for every token, (N, prefix_tokens() + num_patches, E).
  Tensor forward_features(const Tensor& images);
  /// Tokens before the patches: 1 ([CLS]), 2 with the distillation token.
  int64_t prefix_tokens() const { return opts.distillation ? 2 : 1; }
  std::string type_name() const override { return "VisionTransformer"; }
  VisionTransformerOptions opts;                ///< the options given
  std::shared_ptr<Conv2d> stem;                 ///< null unless opts.stem_channels > 0
  std::shared_ptr<PatchEmbedding> patch_embed;  ///< images to tokens
  ///@{
  Tensor cls_token, pos_embed;  ///< (1, 1, E) and (1, prefix_tokens() + num_patches, E)
  ///@}
  Tensor dist_token;                   ///< (1, 1, E); undefined without distillation
  std::shared_ptr<Dropout> pos_drop;   ///< after adding pos_embed
  std::shared_ptr<ModuleList> blocks;  ///< depth pre-norm TransformerEncoderLayers
  std::shared_ptr<LayerNorm> norm;     ///< the final norm
  std::shared_ptr<Linear> head;        ///< E -> num_classes, on [CLS]
  std::shared_ptr<Linear> head_dist;   ///< E -> num_classes, on the distillation token; null without
};

}  // namespace ember::nn
