/// \file
/// Sequence to sequence with Bahdanau attention, after the reference notes
/// (Seq2SeqEncoder, Seq2SeqAttentionDecoder):
/// \code
///   encoder: embedding -> GRU over the source; its outputs are the keys and
///            values of the attention, its final state the decoder's first state;
///   decoder step t: query = the decoder's top-layer state s_{t-1};
///            context c_t = sum_j softmax_j(w_v^T tanh(W_q s_{t-1} + W_k h_j)) h_j
///            over the valid source positions only; GRU input = [embed(y_{t-1}), c_t];
///            logits = dense(s_t).
/// \endcode
/// Training uses teacher forcing (the true previous token as input);
/// inference decodes greedily (the argmax token is fed back). The attention
/// weights of every step come back for plotting (source x output heatmaps).
///
/// Parameter names follow the notes' PyTorch modules: encoder.embedding,
/// encoder.rnn.weight_ih_l0, decoder.attention.W_q.weight, decoder.rnn...,
/// decoder.dense.
#pragma once

#include <memory>
#include <string>

#include <ember/nn/attention.h>
#include <ember/nn/layers.h>
#include <ember/nn/rnn.h>

namespace ember::nn {

/// The sizes of the encoder-decoder.
struct Seq2SeqOptions {
  ///@{
  int64_t src_vocab = 0, tgt_vocab = 0;  ///< token counts of the two vocabularies
  ///@}
  int64_t embed_size = 32;   ///< width of both embeddings
  int64_t num_hiddens = 64;  ///< decoder state size; also the encoder output size
  int64_t num_layers = 1;    ///< GRU layers in the encoder and the decoder
  double dropout = 0.0;      ///< between GRU layers
  /// A bidirectional encoder runs num_hiddens / 2 per direction, so its
  /// outputs and (concatenated) final states still have num_hiddens features.
  bool bidirectional_encoder = false;
};

/// Embedding, then a GRU (optionally bidirectional) over the source.
class Seq2SeqEncoder : public Module {
 public:
  /// From the options' src_vocab, embed_size, num_hiddens, num_layers, dropout and bidirectional_encoder.
  explicit Seq2SeqEncoder(const Seq2SeqOptions& o);
  /// src (B, S) int64 tokens, lengths (B) int64 or undefined. Returns the
  /// outputs (B, S, num_hiddens) (zero at padded steps) and the final state
  /// (num_layers, B, num_hiddens).
  std::pair<Tensor, Tensor> forward(const Tensor& src, const Tensor& lengths);
  using Module::forward;
  std::string type_name() const override { return "Seq2SeqEncoder"; }
  std::shared_ptr<Embedding> embedding;  ///< src_vocab -> embed_size
  std::shared_ptr<GRU> rnn;              ///< the encoder GRU
  bool bidirectional;                    ///< whether rnn runs both ways
};

/// What the decoder carries from step to step.
struct DecoderState {
  Tensor enc_outputs;     ///< keys and values (B, S, H)
  Tensor projected_keys;  ///< W_k enc_outputs, computed once
  Tensor valid_lens;      ///< (B) int64 or undefined
  Tensor hidden;          ///< (num_layers, B, H)
};

/// Bahdanau's decoder: at each step the previous top-layer state attends
/// over the encoder outputs (masked by the source lengths), and the GRU reads
/// [embedding of the previous token, context]; a Linear gives the logits.
class Seq2SeqAttentionDecoder : public Module {
 public:
  /// From the options' tgt_vocab, embed_size, num_hiddens, num_layers and dropout.
  explicit Seq2SeqAttentionDecoder(const Seq2SeqOptions& o);
  /// The state for a batch from the encoder's outputs and final state; the
  /// keys are projected here, once.
  DecoderState init_state(const Tensor& enc_outputs, const Tensor& enc_state, const Tensor& valid_lens);
  /// Teacher forcing: tgt_in (B, T) int64 (the previous tokens). Returns the
  /// logits (B, T, tgt_vocab); the attention weights (B, T, S) go to
  /// *weights when given. Advances state.
  Tensor forward(const Tensor& tgt_in, DecoderState& state, Tensor* weights = nullptr);
  /// One step: prev (B) int64 -> logits (B, tgt_vocab); weights (B, S).
  Tensor step(const Tensor& prev, DecoderState& state, Tensor* weights = nullptr);
  using Module::forward;
  std::string type_name() const override { return "Seq2SeqAttentionDecoder"; }
  std::shared_ptr<Embedding> embedding;          ///< tgt_vocab -> embed_size
  std::shared_ptr<AdditiveAttention> attention;  ///< the state over the encoder outputs
  std::shared_ptr<GRU> rnn;                      ///< reads [embedding, context]
  std::shared_ptr<Linear> dense;                 ///< num_hiddens -> tgt_vocab

 private:
  /// The GRU state after one step from the embedded input (B, E); returns
  /// the top layer's new state (B, H).
  Tensor advance(const Tensor& embedded, DecoderState& state, Tensor* weights);
};

/// The encoder and the attention decoder together.
class Seq2Seq : public Module {
 public:
  /// An encoder and a decoder from the same options.
  explicit Seq2Seq(const Seq2SeqOptions& o);
  /// Teacher-forced logits (B, T, tgt_vocab) for src (B, S) with lengths
  /// src_lens and decoder inputs tgt_in (B, T).
  Tensor forward(const Tensor& src, const Tensor& src_lens, const Tensor& tgt_in, Tensor* weights = nullptr);
  /// Greedy decoding of steps tokens starting from bos: tokens (B, steps)
  /// int64 and the attention weights (B, steps, S). Tokens after an eos are
  /// still produced (the caller cuts at eos); run it under NoGradGuard.
  std::pair<Tensor, Tensor> greedy_decode(const Tensor& src, const Tensor& src_lens, int64_t bos, int64_t steps);
  using Module::forward;
  std::string type_name() const override { return "Seq2Seq"; }
  Seq2SeqOptions opts;                               ///< the options given
  std::shared_ptr<Seq2SeqEncoder> encoder;           ///< the source side
  std::shared_ptr<Seq2SeqAttentionDecoder> decoder;  ///< the target side
};

}  // namespace ember::nn
