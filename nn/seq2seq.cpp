// The GRU encoder, the Bahdanau-attention decoder and the model joining
// them (see seq2seq.h), composed from layers and ops only.
#include <ember/nn/seq2seq.h>

#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/join.h>
#include <ember/ops/reduce.h>

namespace ember::nn {

namespace {
void check_options(const Seq2SeqOptions& o) {
  EMBER_CHECK(o.src_vocab > 0 && o.tgt_vocab > 0, ValueError, "Seq2Seq: vocabulary sizes must be positive, got ",
              o.src_vocab, " and ", o.tgt_vocab);
  EMBER_CHECK(o.embed_size > 0 && o.num_hiddens > 0 && o.num_layers > 0, ValueError,
              "Seq2Seq: embed_size, num_hiddens and num_layers must be positive");
  EMBER_CHECK(!o.bidirectional_encoder || o.num_hiddens % 2 == 0, ValueError,
              "Seq2Seq: a bidirectional encoder needs an even num_hiddens, got ", o.num_hiddens);
}
}  // namespace

// ---- encoder ------------------------------------------------------------------
Seq2SeqEncoder::Seq2SeqEncoder(const Seq2SeqOptions& o) : bidirectional(o.bidirectional_encoder) {
  check_options(o);
  embedding = register_module("embedding", std::make_shared<Embedding>(o.src_vocab, o.embed_size));
  const RNNOptions ro{
      .num_layers = o.num_layers, .batch_first = true, .dropout = o.dropout, .bidirectional = o.bidirectional_encoder};
  rnn = register_module("rnn",
                        std::make_shared<GRU>(o.embed_size, bidirectional ? o.num_hiddens / 2 : o.num_hiddens, ro));
}

std::pair<Tensor, Tensor> Seq2SeqEncoder::forward(const Tensor& src, const Tensor& lengths) {
  EMBER_CHECK(src.dim() == 2 && src.dtype() == DType::Int64, ShapeError,
              "Seq2SeqEncoder: expected int64 tokens (batch, steps), got ", src.shape().str());
  auto [out, h] = rnn->forward((*embedding)(src), Tensor(), lengths);
  if (bidirectional) {
    // (layers * 2, B, H/2) -> (layers, B, H): each layer's forward and
    // reverse final states side by side, as its outputs are.
    const int64_t L = rnn->opts.num_layers;
    const Tensor h4 = h.reshape({L, 2, h.size(1), h.size(2)});
    h = cat({h4.select(1, 0), h4.select(1, 1)}, 2);
  }
  return {out, h};
}

// ---- decoder ------------------------------------------------------------------
Seq2SeqAttentionDecoder::Seq2SeqAttentionDecoder(const Seq2SeqOptions& o) {
  check_options(o);
  const int64_t H = o.num_hiddens;
  embedding = register_module("embedding", std::make_shared<Embedding>(o.tgt_vocab, o.embed_size));
  attention = register_module("attention", std::make_shared<AdditiveAttention>(H, H, H, 0.0));
  rnn = register_module(
      "rnn", std::make_shared<GRU>(o.embed_size + H, H, RNNOptions{.num_layers = o.num_layers, .dropout = o.dropout}));
  dense = register_module("dense", std::make_shared<Linear>(H, o.tgt_vocab));
}

DecoderState Seq2SeqAttentionDecoder::init_state(const Tensor& enc_outputs, const Tensor& enc_state,
                                                 const Tensor& valid_lens) {
  DecoderState s;
  s.enc_outputs = enc_outputs.contiguous();  // the values of every step's weighted sum
  s.projected_keys = attention->project_keys(s.enc_outputs);
  s.valid_lens = valid_lens;
  s.hidden = enc_state;
  return s;
}

Tensor Seq2SeqAttentionDecoder::advance(const Tensor& embedded, DecoderState& s, Tensor* weights) {
  // Bahdanau: the query is the previous state of the top layer.
  const Tensor query = s.hidden.select(0, s.hidden.size(0) - 1).unsqueeze(1);  // (B, 1, H)
  const Tensor context = attention->forward_projected(query, s.projected_keys, s.enc_outputs, s.valid_lens);
  if (weights) *weights = attention->attention_weights.squeeze(1);       // (B, S)
  const Tensor x = cat({embedded, context.squeeze(1)}, 1).unsqueeze(0);  // (1, B, E + H)
  auto [out, h] = rnn->forward(x, s.hidden);
  s.hidden = h;
  return out.squeeze(0);
}

Tensor Seq2SeqAttentionDecoder::forward(const Tensor& tgt_in, DecoderState& s, Tensor* weights) {
  EMBER_CHECK(tgt_in.dim() == 2 && tgt_in.dtype() == DType::Int64, ShapeError,
              "Seq2SeqAttentionDecoder: expected int64 tokens (batch, steps), got ", tgt_in.shape().str());
  // Every step's input embedding at once, taken apart with one split.
  const std::vector<Tensor> emb = split((*embedding)(tgt_in), 1, 1);
  std::vector<Tensor> outs, ws;
  for (int64_t t = 0; t < tgt_in.size(1); ++t) {
    Tensor w;
    outs.push_back(advance(emb[static_cast<size_t>(t)].squeeze(1), s, weights ? &w : nullptr));
    if (weights) ws.push_back(w);
  }
  if (weights) *weights = stack(ws, 1);
  return (*dense)(stack(outs, 1));  // one GEMM for every step's logits
}

Tensor Seq2SeqAttentionDecoder::step(const Tensor& prev, DecoderState& s, Tensor* weights) {
  return (*dense)(advance((*embedding)(prev), s, weights));
}

// ---- the model ----------------------------------------------------------------
Seq2Seq::Seq2Seq(const Seq2SeqOptions& o) : opts(o) {
  encoder = register_module("encoder", std::make_shared<Seq2SeqEncoder>(o));
  decoder = register_module("decoder", std::make_shared<Seq2SeqAttentionDecoder>(o));
}

Tensor Seq2Seq::forward(const Tensor& src, const Tensor& src_lens, const Tensor& tgt_in, Tensor* weights) {
  auto [enc_out, enc_state] = encoder->forward(src, src_lens);
  DecoderState s = decoder->init_state(enc_out, enc_state, src_lens);
  return decoder->forward(tgt_in, s, weights);
}

std::pair<Tensor, Tensor> Seq2Seq::greedy_decode(const Tensor& src, const Tensor& src_lens, int64_t bos,
                                                 int64_t steps) {
  auto [enc_out, enc_state] = encoder->forward(src, src_lens);
  DecoderState s = decoder->init_state(enc_out, enc_state, src_lens);
  Tensor prev = full({src.size(0)}, static_cast<double>(bos), TensorOptions(DType::Int64, src.device()));
  std::vector<Tensor> tokens, ws;
  for (int64_t t = 0; t < steps; ++t) {
    Tensor w;
    prev = argmax(decoder->step(prev, s, &w), 1);  // the most likely token, fed back
    tokens.push_back(prev);
    ws.push_back(w);
  }
  return {stack(tokens, 1), stack(ws, 1)};
}

}  // namespace ember::nn
