// The seq2seq demo's Transformer (--model transformer): nn::Transformer
// between two token embeddings and a linear output layer.
//
// Choices: separate source and target embeddings (the vocabularies differ:
// ~60 source characters against 14 target tokens, so there is nothing to
// share); embeddings unscaled (see embed()) plus sinusoidal positions (no
// parameters, any length; the same table for both sides), as in Vaswani et
// al.; pre-norm layers (norm_first), which train without a warm-up at the
// demo's learning rate. Source padding is masked in the encoder's
// self-attention and in the cross-attention (key padding masks from the
// lengths); the target side is causal (tgt_is_causal). Greedy and beam
// decoding run the decoder incrementally (TransformerDecoder's cache): one
// position of work per generated token.
//
// No dropout, because the task is noiseless and the test dates come from the
// training distribution: with it, six epochs reached a clearly lower test
// exact match. Learned position tables (N(0, 0.02)) learned slower than the
// sinusoids. The figures, and the run that gave them, are in
// apps/seq2seq/README.md.
#pragma once

#include "model.h"

namespace seq2seq_app {

/// The model's sizes.
struct TransformerSeq2SeqOptions {
  int64_t src_vocab = 0, tgt_vocab = 0;            ///< token counts (0 = padding in both)
  int64_t d_model = 64;                            ///< model width
  int64_t nhead = 4;                               ///< attention heads
  int64_t encoder_layers = 2, decoder_layers = 2;  ///< depths
  int64_t dim_feedforward = 256;                   ///< MLP width
  double dropout = 0.0;                            ///< in every layer (see the file's comment)
  int64_t max_len = 128;                           ///< longest sequence the positional table covers
};

/// Names: src_embed.weight, tgt_embed.weight, transformer.encoder.layers.0...,
/// transformer.decoder.norm..., generator.weight/bias.
class TransformerSeq2Seq : public ember::nn::Module, public DatesModel {
 public:
  explicit TransformerSeq2Seq(const TransformerSeq2SeqOptions& o);
  ember::nn::Module& module() override { return *this; }
  Tensor logits(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) override;
  std::pair<Tensor, Tensor> greedy(const Tensor& src, const Tensor& lens, int64_t bos, int64_t steps) override;
  /// The last decoder layer's cross-attention, averaged over the heads.
  Tensor attention(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) override;
  std::vector<std::vector<ember::nn::Hypothesis>> beam(const Tensor& src, const Tensor& lens,
                                                       const ember::nn::BeamSearchOptions& o) override;
  using ember::nn::Module::forward;
  std::string type_name() const override { return "TransformerSeq2Seq"; }

  TransformerSeq2SeqOptions opts;                                ///< the options given
  std::shared_ptr<ember::nn::Embedding> src_embed, tgt_embed;    ///< token embeddings
  std::shared_ptr<ember::nn::SinusoidalPositionalEncoding> pos;  ///< constant, not in the state dict
  std::shared_ptr<ember::nn::Transformer> transformer;           ///< batch first, pre-norm
  std::shared_ptr<ember::nn::Linear> generator;                  ///< d_model -> tgt_vocab

 private:
  /// Embedded tokens (B, T) at positions offset.. (scaled, plus positions, dropout).
  Tensor embed(ember::nn::Embedding& table, const Tensor& tokens, int64_t offset);
  /// (B, S) bool, true at the padding of each source.
  Tensor padding_mask(const Tensor& src, const Tensor& lens) const;
  /// The encoder's output for src.
  Tensor encode(const Tensor& src, const Tensor& kpm);
  /// One decoder step from the cache: tokens (B) -> log-probabilities (B, V).
  Tensor next_log_probs(const Tensor& tokens, ember::nn::TransformerDecoderCache& cache);
};

}  // namespace seq2seq_app
