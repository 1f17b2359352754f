// The seq2seq demo's Transformer: teacher-forced logits, and greedy and beam
// decoding on the decoder's incremental cache (see transformer_model.h).
#include "transformer_model.h"

#include <cmath>

namespace seq2seq_app {

using namespace ember;

TransformerSeq2Seq::TransformerSeq2Seq(const TransformerSeq2SeqOptions& o) : opts(o) {
  const nn::TransformerOptions to{.d_model = o.d_model,
                                  .nhead = o.nhead,
                                  .num_encoder_layers = o.encoder_layers,
                                  .num_decoder_layers = o.decoder_layers,
                                  .dim_feedforward = o.dim_feedforward,
                                  .dropout = o.dropout,
                                  .batch_first = true,
                                  .norm_first = true};
  src_embed = register_module("src_embed", std::make_shared<nn::Embedding>(o.src_vocab, o.d_model, 0));
  tgt_embed = register_module("tgt_embed", std::make_shared<nn::Embedding>(o.tgt_vocab, o.d_model, 0));
  pos = register_module("pos", std::make_shared<nn::SinusoidalPositionalEncoding>(o.d_model, o.max_len, o.dropout));
  transformer = register_module("transformer", std::make_shared<nn::Transformer>(to));
  generator = register_module("generator", std::make_shared<nn::Linear>(o.d_model, o.tgt_vocab));
}

Tensor TransformerSeq2Seq::embed(nn::Embedding& table, const Tensor& tokens, int64_t offset) {
  // Not scaled by sqrt(d_model) as in Vaswani et al., whose embeddings start
  // at N(0, 1/d): ours start at N(0, 1), already the positions' scale
  // (entries in [-1, 1]); scaled, they would drown the positions, which this
  // character-level task needs exactly (scaled, it learned far slower: the
  // figures are in apps/seq2seq/README.md).
  const Tensor x = table(tokens);
  EMBER_CHECK(offset + tokens.size(1) <= pos->P.size(1), ShapeError, "TransformerSeq2Seq: positions up to ",
              offset + tokens.size(1), " exceed the positional table's ", pos->P.size(1));
  return (*pos->drop)(add(x, pos->P.narrow(1, offset, tokens.size(1)).to(x.device())));
}

Tensor TransformerSeq2Seq::padding_mask(const Tensor& src, const Tensor& lens) const {
  const Tensor positions = arange(0, static_cast<double>(src.size(1)), 1, TensorOptions(DType::Int64, src.device()));
  return ge(positions.unsqueeze(0), lens.unsqueeze(1));  // (B, S): position >= length
}

Tensor TransformerSeq2Seq::encode(const Tensor& src, const Tensor& kpm) {
  return transformer->encoder->forward(embed(*src_embed, src, 0), Tensor(), kpm);
}

Tensor TransformerSeq2Seq::logits(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) {
  const Tensor kpm = padding_mask(src, lens);
  nn::TransformerDecoderMasks m;
  m.tgt_is_causal = true;
  m.memory_key_padding_mask = kpm;
  const Tensor y = transformer->decoder->forward(embed(*tgt_embed, tgt_in, 0), encode(src, kpm), m);
  return (*generator)(y);
}

Tensor TransformerSeq2Seq::attention(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) {
  auto& last = transformer->decoder->layer(transformer->decoder->layers->size() - 1);
  last.keep_attention_weights = true;
  logits(src, lens, tgt_in);
  last.keep_attention_weights = false;
  return last.cross_attention_weights;
}

Tensor TransformerSeq2Seq::next_log_probs(const Tensor& tokens, nn::TransformerDecoderCache& cache) {
  const Tensor x = embed(*tgt_embed, tokens.unsqueeze(1), cache.steps);  // (B, 1, d) at position steps
  return log_softmax((*generator)(transformer->decoder->step(x, cache)).squeeze(1), 1);
}

std::pair<Tensor, Tensor> TransformerSeq2Seq::greedy(const Tensor& src, const Tensor& lens, int64_t bos,
                                                     int64_t steps) {
  const Tensor kpm = padding_mask(src, lens);
  nn::TransformerDecoderCache cache = transformer->decoder->init_cache(encode(src, kpm), kpm);
  auto& last = transformer->decoder->layer(transformer->decoder->layers->size() - 1);
  last.keep_attention_weights = true;
  Tensor prev = full({src.size(0)}, static_cast<double>(bos), TensorOptions(DType::Int64, src.device()));
  std::vector<Tensor> tokens, ws;
  for (int64_t t = 0; t < steps; ++t) {
    prev = argmax(next_log_probs(prev, cache), 1);  // the most likely token, fed back
    tokens.push_back(prev);
    ws.push_back(last.cross_attention_weights.squeeze(1));  // (B, S)
  }
  last.keep_attention_weights = false;
  return {stack(tokens, 1), stack(ws, 1)};
}

std::vector<std::vector<nn::Hypothesis>> TransformerSeq2Seq::beam(const Tensor& src, const Tensor& lens,
                                                                  const nn::BeamSearchOptions& o) {
  // The memory and its mask replicated beam_size times per sentence; the
  // cache follows the hypotheses through each step's parents.
  const Tensor kpm = repeat_rows(padding_mask(src, lens), o.beam_size);
  nn::TransformerDecoderCache cache =
      transformer->decoder->init_cache(repeat_rows(encode(src, padding_mask(src, lens)), o.beam_size), kpm);
  auto step = [&](const Tensor& tokens, const Tensor& parents) {
    if (cache.steps > 0) cache.reorder(parents.to(src.device()));
    return next_log_probs(tokens.to(src.device()), cache);
  };
  return nn::beam_search(src.size(0), step, o);
}

}  // namespace seq2seq_app
