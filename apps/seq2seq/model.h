// The seq2seq demo's models behind one interface, so training and
// evaluation in main.cpp are the same for both: --model gru (nn::Seq2Seq,
// Bahdanau attention) and --model transformer (transformer_model.h). Each
// gives teacher-forced logits, greedy decoding with its attention weights,
// and beam search (nn/beam_search.h) through a step callback; decode()
// picks greedy or beam by beam_size.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <ember/ember.h>

namespace seq2seq_app {

using ember::Tensor;

class DatesModel {
 public:
  virtual ~DatesModel() = default;
  /// The trained module (parameters, state dict, train/eval, device).
  virtual ember::nn::Module& module() = 0;
  /// Teacher-forced logits (B, T, V) for src (B, S), its lengths (B) and decoder inputs tgt_in (B, T).
  virtual Tensor logits(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) = 0;
  /// Greedy decoding of steps tokens from bos: tokens (B, steps) and the
  /// attention weights drawn in the heatmaps (B, steps, S).
  virtual std::pair<Tensor, Tensor> greedy(const Tensor& src, const Tensor& lens, int64_t bos, int64_t steps) = 0;
  /// Teacher-forced attention weights (B, T, S) for tgt_in: the heatmaps of
  /// a beam search's output.
  virtual Tensor attention(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) = 0;
  /// Beam search, batched over the sentences.
  virtual std::vector<std::vector<ember::nn::Hypothesis>> beam(const Tensor& src, const Tensor& lens,
                                                               const ember::nn::BeamSearchOptions& o) = 0;

  /// Greedy (beam_size 1) or beam decoding: tokens (B, steps), each row the
  /// best hypothesis padded with eos, and the attention weights (B, steps,
  /// S) of that output. Run it under NoGradGuard.
  std::pair<Tensor, Tensor> decode(const Tensor& src, const Tensor& lens, int64_t bos, int64_t steps);

  int64_t beam_size = 1;  ///< 1: greedy
  double alpha = 0.6;     ///< GNMT length-penalty exponent of the beam search
  int64_t eos = 2;        ///< the target vocabulary's end of sequence
};

/// The sizes both models take from the command line.
struct ModelSizes {
  int64_t src_vocab = 0, tgt_vocab = 0, embed = 32, hidden = 64;
};

/// "gru": nn::Seq2Seq with embed, a bidirectional encoder and decoder state
/// hidden; "transformer": TransformerSeq2Seq of width hidden.
std::unique_ptr<DatesModel> make_model(const std::string& kind, const ModelSizes& sizes);

/// Rows b * k of t for b in [0, B), each k times: a batch's state for a beam of k.
Tensor repeat_rows(const Tensor& t, int64_t k, int64_t dim = 0);

}  // namespace seq2seq_app
