// The attention_regression models that train: each maps (N, L) x-values to
// (N, L) predictions, one token per x, and can show its attention weights.
#pragma once

#include <string>

#include <ember/ember.h>

namespace ar {

using namespace ember;

// Attention weights (L, L) of a model on one sequence x (1, L), averaged over
// heads; for the heatmap.
struct AttentionModel : nn::Module {
  virtual Tensor attention(const Tensor& x) = 0;
};

// `single-head`: Linear(1,64) to queries, keys and values, scaled dot-product
// attention, Linear(64,1) out (the notes' SimpleTransformer).
struct SingleHead : AttentionModel {
  std::shared_ptr<nn::Linear> wq, wk, wv, out;
  SingleHead() {
    wq = register_module("w_queries", std::make_shared<nn::Linear>(1, 64));
    wk = register_module("w_keys", std::make_shared<nn::Linear>(1, 64));
    wv = register_module("w_values", std::make_shared<nn::Linear>(1, 64));
    out = register_module("w_out", std::make_shared<nn::Linear>(64, 1));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor t = x.unsqueeze(-1);
    return (*out)(nn::scaled_dot_product_attention((*wq)(t), (*wk)(t), (*wv)(t))).squeeze(-1);
  }
  Tensor attention(const Tensor& x) override {
    NoGradGuard ng;
    const Tensor t = x.unsqueeze(-1);
    Tensor w;
    nn::scaled_dot_product_attention((*wq)(t), (*wk)(t), (*wv)(t), Tensor(), 0.0, false, &w);
    return w.squeeze(0);
  }
};

// `transformer`: Linear(1,64) embedding plus learned positions, one pre-norm
// block (LayerNorm, 4-head attention, residual; LayerNorm, Linear(64,256),
// GELU, Linear(256,64), residual), Linear(64,1) per token; dropout 0.1.
struct TokenTransformer : AttentionModel {
  static constexpr int64_t kTokens = 50;
  std::shared_ptr<nn::Linear> embed, out;
  std::shared_ptr<nn::LearnedPositionalEncoding> pos;
  std::shared_ptr<nn::TransformerEncoderLayer> block;
  TokenTransformer() {
    embed = register_module("embed", std::make_shared<nn::Linear>(1, 64));
    pos = register_module("pos", std::make_shared<nn::LearnedPositionalEncoding>(64, kTokens));
    block = register_module("block", std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerEncoderLayerOptions{
                                         64, 4, 256, 0.1, "gelu", 1e-5, true, true}));
    out = register_module("out", std::make_shared<nn::Linear>(64, 1));
    // The notes drop out attention weights and the MLP, not the attention
    // block's output (PyTorch's layer also has dropout1 there).
    block->dropout1->p = 0.0;
    // Xavier-uniform weights and zero biases for every Linear, as in the
    // recipe; LayerNorms keep their ones and zeros.
    for (auto& [name, p] : named_parameters()) {
      if (name.find("norm") != std::string::npos) continue;
      if (name == "pos.weight") {
        nn::init::normal_(p, 0.0, 1.0);  // nn.Embedding's N(0, 1), as in the notes
      } else if (name == "block.self_attn.in_proj_weight") {
        // The notes project q, k and v with three Linear(64, 64): Xavier per block.
        for (int i = 0; i < 3; ++i) {
          Tensor block = p.narrow(0, i * 64, 64);
          nn::init::xavier_uniform_(block);
        }
      } else if (p.dim() >= 2) {
        nn::init::xavier_uniform_(p);
      } else {
        nn::init::zeros_(p);
      }
    }
  }
  Tensor forward(const Tensor& x) override {
    return (*out)(block->forward((*pos)((*embed)(x.unsqueeze(-1))))).squeeze(-1);
  }
  Tensor attention(const Tensor& x) override {
    NoGradGuard ng;
    const Tensor h = (*block->norm1)((*pos)((*embed)(x.unsqueeze(-1))));
    return block->self_attn->forward(h, h, h, Tensor(), true).second.squeeze(0);
  }
};

// `encoder`: the notes' BuiltInTransformer: Linear(1,64) embedding, sinusoidal
// positions, TransformerEncoder (3 pre-norm layers, 8 heads, feed-forward
// 256, GELU, dropout 0.1), Linear(64,1) per token.
struct EncoderRegressor : AttentionModel {
  std::shared_ptr<nn::Linear> embed, out;
  std::shared_ptr<nn::SinusoidalPositionalEncoding> pos;
  std::shared_ptr<nn::TransformerEncoder> encoder;
  EncoderRegressor() {
    embed = register_module("embed", std::make_shared<nn::Linear>(1, 64));
    pos = register_module("pos_encoder", std::make_shared<nn::SinusoidalPositionalEncoding>(64, 1000));
    encoder = register_module(
        "transformer_encoder",
        std::make_shared<nn::TransformerEncoder>(nn::TransformerEncoderLayerOptions{.d_model = 64,
                                                                                    .nhead = 8,
                                                                                    .dim_feedforward = 256,
                                                                                    .dropout = 0.1,
                                                                                    .activation = nn::Activation::GELU,
                                                                                    .layer_norm_eps = 1e-5,
                                                                                    .batch_first = true,
                                                                                    .norm_first = true},
                                                 3));
    out = register_module("output_layer", std::make_shared<nn::Linear>(64, 1));
  }
  Tensor forward(const Tensor& x) override {
    return (*out)(encoder->forward((*pos)((*embed)(x.unsqueeze(-1))))).squeeze(-1);
  }
  // The first layer's self-attention.
  Tensor attention(const Tensor& x) override {
    NoGradGuard ng;
    auto& first = encoder->layers->at<nn::TransformerEncoderLayer>(0);
    const Tensor h = (*first.norm1)((*pos)((*embed)(x.unsqueeze(-1))));
    return first.self_attn->forward(h, h, h, Tensor(), true).second.squeeze(0);
  }
};

}  // namespace ar
