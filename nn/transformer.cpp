// Transformer encoder layers, positional encodings, patch embedding
// and the Vision Transformer, composed from nn layers and ops.
#include <ember/nn/transformer.h>

#include <cmath>

#include <ember/nn/init.h>
#include <ember/ops/activation.h>
#include <ember/ops/conv.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/join.h>

namespace ember::nn {

TransformerEncoderLayer::TransformerEncoderLayer(TransformerEncoderLayerOptions o) : opts(o) {
  self_attn = register_module(
      "self_attn",
      std::make_shared<MultiheadAttention>(
          o.d_model, o.nhead, MultiheadAttentionOptions{.dropout = o.dropout, .batch_first = o.batch_first}));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
  if (o.drop_path > 0) {
    drop_path1 = register_module("drop_path1", std::make_shared<DropPath>(o.drop_path));
    drop_path2 = register_module("drop_path2", std::make_shared<DropPath>(o.drop_path));
  }
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm, bool is_causal,
                                         const Tensor& residual) {
  auto [out, weights] = residual.defined()
                            ? self_attn->forward_dropout_add(residual, *dropout1, x, x, x, kpm, keep_attention_weights,
                                                             mask, true, is_causal)
                            : self_attn->forward(x, x, x, kpm, keep_attention_weights, mask, true, is_causal);
  if (keep_attention_weights) attention_weights = weights.detach();
  return residual.defined() ? out : (*dropout1)(out);
}

Tensor detail::transformer_feed_forward(const Tensor& x, Linear& linear1, Dropout& dropout, Linear& linear2,
                                        Dropout& dropout_out, const Activation& activation, const Tensor& residual) {
  // GELU's bias add and activation as one op after the GEMM (ops/linear_gelu.h),
  // and linear2's bias, dropout and the residual add as one after its GEMM
  // (ops/linear_dropout_add.h).
  const Tensor h = activation.kind() == Activation::GELU ? linear1.forward_gelu(x) : activation(linear1(x));
  if (residual.defined()) return linear2.forward_dropout_add(dropout(h), dropout_out, residual);
  return dropout_out(linear2(dropout(h)));
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x, const Tensor& residual) {
  return detail::transformer_feed_forward(x, *linear1, *dropout, *linear2, *dropout2, opts.activation, residual);
}

Tensor detail::padding_mask_of_one(const Tensor& kpm) {
  return kpm.defined() && kpm.dim() == 1 ? kpm.unsqueeze(0) : kpm;
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& kpm, bool is_causal) {
  if (src.dim() == 2) {  // unbatched (S, E): a batch of one at the batch dim
    const int64_t b = opts.batch_first ? 0 : 1;
    return forward(src.unsqueeze(b), src_mask, detail::padding_mask_of_one(kpm), is_causal).squeeze(b);
  }
  Tensor x = src;
  // Stochastic depth drops a whole residual branch per sample (timm's
  // Block). Without stochastic depth each residual add joins its branch's last op
  // (sa_block and ff_block with the residual).
  const auto sa_residual = [&](const Tensor& h) {
    return drop_path1 ? add(x, (*drop_path1)(sa_block(h, src_mask, kpm, is_causal)))
                      : sa_block(h, src_mask, kpm, is_causal, x);
  };
  const auto ff_residual = [&](const Tensor& h) {
    return drop_path2 ? add(x, (*drop_path2)(ff_block(h))) : ff_block(h, x);
  };
  if (opts.norm_first) {
    x = sa_residual((*norm1)(x));
    x = ff_residual((*norm2)(x));
  } else {
    x = (*norm1)(sa_residual(x));
    x = (*norm2)(ff_residual(x));
  }
  return x;
}

TransformerEncoder::TransformerEncoder(TransformerEncoderLayerOptions layer, int64_t num_layers, bool final_norm) {
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(layer));
  if (final_norm)
    norm = register_module("norm", std::make_shared<LayerNorm>(Shape{layer.d_model}, layer.layer_norm_eps));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& kpm, bool is_causal) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<TransformerEncoderLayer>(i).forward(x, mask, kpm, is_causal);
  return norm ? (*norm)(x) : x;
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t d, int64_t max_len, double p) {
  // angle[i, j] = i / 10000^(2j/d) = i * exp(-(2j/d) log 10000): through
  // exp/log rather than pow, for stability.
  const Tensor pos = arange(0, static_cast<double>(max_len), 1, kFloat32).unsqueeze(1);
  const Tensor two_j = arange(0, static_cast<double>(d), 2, kFloat32);
  const Tensor angle = mul(pos, exp(mul(two_j, -std::log(10000.0) / static_cast<double>(d))));
  P = zeros({1, max_len, d});
  P.slice(2, 0, d, 2).copy_(sin(angle).unsqueeze(0));
  P.slice(2, 1, d, 2).copy_(cos(angle).narrow(1, 0, d / 2).unsqueeze(0));
  drop = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 3 && x.size(1) <= P.size(1) && x.size(2) == P.size(2), ShapeError,
              "SinusoidalPositionalEncoding: expected (N, L <= ", P.size(1), ", ", P.size(2), "), got ",
              x.shape().str());
  // The table moves to the input's device once, not at every call: a copy
  // from the host in each forward could not be captured in a CUDA graph.
  if (P.device() != x.device()) P = P.to(x.device());
  return (*drop)(add(x, P.narrow(1, 0, x.size(1))));
}

LearnedPositionalEncoding::LearnedPositionalEncoding(int64_t d, int64_t max_len) {
  Tensor w = empty({1, max_len, d});
  init::normal_(w, 0.0, 0.02);
  weight = register_parameter("weight", w);
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 3 && x.size(1) <= weight.size(1) && x.size(2) == weight.size(2), ShapeError,
              "LearnedPositionalEncoding: expected (N, L <= ", weight.size(1), ", ", weight.size(2), "), got ",
              x.shape().str());
  return add(x, weight.narrow(1, 0, x.size(1)));
}

PatchEmbedding::PatchEmbedding(std::array<int64_t, 2> img, std::array<int64_t, 2> patch, int64_t in_ch, int64_t e)
    : img_size(img) {
  EMBER_CHECK(patch[0] > 0 && patch[1] > 0 && img[0] % patch[0] == 0 && img[1] % patch[1] == 0, ValueError,
              "PatchEmbedding: image ", img[0], "x", img[1], " is not divisible into ", patch[0], "x", patch[1],
              " patches");
  num_patches = (img[0] / patch[0]) * (img[1] / patch[1]);
  proj = register_module("proj", std::make_shared<Conv2d>(in_ch, e, patch, patch));
}

Tensor PatchEmbedding::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() == 4 && x.size(2) == img_size[0] && x.size(3) == img_size[1], ShapeError,
              "PatchEmbedding: expected images (N, C, ", img_size[0], ", ", img_size[1], "), got ", x.shape().str());
  return (*proj)(x).flatten(2).transpose(1, 2);  // (N, E, h, w) -> (N, h*w, E)
}

VisionTransformer::VisionTransformer(VisionTransformerOptions o) : opts(o) {
  EMBER_CHECK(o.stem_channels >= 0, ValueError, "VisionTransformer: stem_channels must be >= 0, got ", o.stem_channels);
  if (o.stem_channels > 0)
    stem =
        register_module("stem", std::make_shared<Conv2d>(o.in_channels, o.stem_channels, std::array<int64_t, 2>{3, 3},
                                                         std::array<int64_t, 2>{1, 1}, std::array<int64_t, 2>{1, 1}));
  patch_embed = register_module(
      "patch_embed", std::make_shared<PatchEmbedding>(
                         o.img_size, o.patch_size, o.stem_channels > 0 ? o.stem_channels : o.in_channels, o.embed_dim));
  EMBER_CHECK(o.drop_path_rate >= 0 && o.drop_path_rate < 1, ValueError,
              "VisionTransformer: drop_path_rate must be in [0, 1), got ", o.drop_path_rate);
  Tensor cls = empty({1, 1, o.embed_dim}), pos = empty({1, patch_embed->num_patches + prefix_tokens(), o.embed_dim});
  init::trunc_normal_(cls, 0.0, 0.02);
  init::trunc_normal_(pos, 0.0, 0.02);
  cls_token = register_parameter("cls_token", cls);
  if (o.distillation) {
    Tensor dist = empty({1, 1, o.embed_dim});
    init::trunc_normal_(dist, 0.0, 0.02);
    dist_token = register_parameter("dist_token", dist);
  }
  pos_embed = register_parameter("pos_embed", pos);
  pos_drop = register_module("pos_drop", std::make_shared<Dropout>(o.dropout));
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  TransformerEncoderLayerOptions lo{o.embed_dim, o.num_heads, o.mlp_dim, o.dropout, "gelu", 1e-6, true, true};
  for (int64_t i = 0; i < o.depth; ++i) {
    // timm: torch.linspace(0, drop_path_rate, depth)[i].
    lo.drop_path = o.depth > 1 ? o.drop_path_rate * static_cast<double>(i) / static_cast<double>(o.depth - 1) : 0.0;
    blocks->push_back(std::make_shared<TransformerEncoderLayer>(lo));
  }
  norm = register_module("norm", std::make_shared<LayerNorm>(Shape{o.embed_dim}, 1e-6));
  head = register_module("head", std::make_shared<Linear>(o.embed_dim, o.num_classes));
  if (o.distillation) head_dist = register_module("head_dist", std::make_shared<Linear>(o.embed_dim, o.num_classes));
}

Tensor VisionTransformer::forward_features(const Tensor& images) {
  Tensor x = patch_embed->forward(stem ? gelu(stem->forward(images)) : images);  // (N, P, E)
  const int64_t N = x.size(0);
  if (opts.distillation)
    x = cat({cls_token.expand({N, 1, opts.embed_dim}), dist_token.expand({N, 1, opts.embed_dim}), x}, 1);
  else
    x = cat({cls_token.expand({N, 1, opts.embed_dim}), x}, 1);
  x = (*pos_drop)(add(x, pos_embed));
  for (size_t i = 0; i < blocks->size(); ++i) x = blocks->at<TransformerEncoderLayer>(i).forward(x);
  return (*norm)(x);
}

ViTHeads VisionTransformer::forward_heads(const Tensor& images) {
  EMBER_CHECK(opts.distillation, ValueError,
              "VisionTransformer::forward_heads: the model has no distillation token (options.distillation)");
  const Tensor x = forward_features(images);
  return {(*head)(x.select(1, 0)), (*head_dist)(x.select(1, 1))};
}

Tensor VisionTransformer::forward(const Tensor& images) {
  if (!opts.distillation) return (*head)(forward_features(images).select(1, 0));
  const ViTHeads h = forward_heads(images);
  return mul(add(h.cls, h.dist), 0.5);  // DeiT's inference: (x + x_dist) / 2
}

}  // namespace ember::nn
