// The GRU model behind DatesModel, the greedy-or-beam decode() both models
// share, and the factory that picks a model by --model.
#include "model.h"

#include "transformer_model.h"

namespace seq2seq_app {

using namespace ember;

Tensor repeat_rows(const Tensor& t, int64_t k, int64_t dim) {
  std::vector<int64_t> idx;
  for (int64_t b = 0; b < t.size(dim); ++b)
    for (int64_t j = 0; j < k; ++j) idx.push_back(b);
  return index_select(t, dim, from_vector(idx).to(t.device()));
}

std::pair<Tensor, Tensor> DatesModel::decode(const Tensor& src, const Tensor& lens, int64_t bos, int64_t steps) {
  if (beam_size <= 1) return greedy(src, lens, bos, steps);
  const auto hyps = beam(src, lens, {beam_size, steps, bos, eos, alpha});
  const int64_t B = src.size(0);
  // The best hypothesis of each sentence, eos-padded to steps tokens.
  std::vector<int64_t> tok(static_cast<size_t>(B * steps), eos);
  for (int64_t b = 0; b < B; ++b) {
    // No hypothesis when every continuation had log-probability -inf: all <eos>.
    if (hyps[static_cast<size_t>(b)].empty()) continue;
    const std::vector<int64_t>& best = hyps[static_cast<size_t>(b)].front().tokens;
    std::copy(best.begin(), best.end(), tok.begin() + b * steps);
  }
  const Tensor tokens = from_vector(tok, {B, steps}).to(src.device());
  const Tensor tgt_in = cat({full({B, 1}, static_cast<double>(bos), TensorOptions(DType::Int64, src.device())),
                             tokens.narrow(1, 0, steps - 1)},
                            1);
  return {tokens, attention(src, lens, tgt_in)};
}

namespace {

// nn::Seq2Seq (a bidirectional GRU encoder, Bahdanau attention, a GRU decoder).
class GruModel : public DatesModel {
 public:
  explicit GruModel(const nn::Seq2SeqOptions& o) : net(o) {}
  nn::Module& module() override { return net; }
  Tensor logits(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) override {
    return net.forward(src, lens, tgt_in);
  }
  std::pair<Tensor, Tensor> greedy(const Tensor& src, const Tensor& lens, int64_t bos, int64_t steps) override {
    return net.greedy_decode(src, lens, bos, steps);
  }
  Tensor attention(const Tensor& src, const Tensor& lens, const Tensor& tgt_in) override {
    Tensor w;
    net.forward(src, lens, tgt_in, &w);
    return w;
  }
  std::vector<std::vector<nn::Hypothesis>> beam(const Tensor& src, const Tensor& lens,
                                                const nn::BeamSearchOptions& o) override {
    // The decoder state, replicated beam_size times per sentence, follows
    // the hypotheses through each step's parents.
    auto [enc_out, enc_state] = net.encoder->forward(src, lens);
    const int64_t K = o.beam_size;
    nn::DecoderState s = net.decoder->init_state(repeat_rows(enc_out, K), repeat_rows(enc_state, K, 1),
                                                 lens.defined() ? repeat_rows(lens, K) : Tensor());
    auto step = [&](const Tensor& tokens, const Tensor& parents) {
      const Tensor p = parents.to(src.device());
      s.enc_outputs = index_select(s.enc_outputs, 0, p);
      s.projected_keys = index_select(s.projected_keys, 0, p);
      if (s.valid_lens.defined()) s.valid_lens = index_select(s.valid_lens, 0, p);
      s.hidden = index_select(s.hidden, 1, p);
      return log_softmax(net.decoder->step(tokens.to(src.device()), s), 1);
    };
    return nn::beam_search(src.size(0), step, o);
  }
  nn::Seq2Seq net;
};

}  // namespace

std::unique_ptr<DatesModel> make_model(const std::string& kind, const ModelSizes& z) {
  if (kind == "transformer") {
    return std::make_unique<TransformerSeq2Seq>(
        TransformerSeq2SeqOptions{.src_vocab = z.src_vocab,
                                  .tgt_vocab = z.tgt_vocab,
                                  .d_model = z.hidden,
                                  .nhead = z.hidden % 4 == 0 ? 4 : 2,  // --hidden is even; 4 heads where they divide it
                                  .dim_feedforward = 4 * z.hidden});
  }
  EMBER_CHECK(kind == "gru", ValueError, "seq2seq: unknown model \"", kind, "\" (gru or transformer)");
  return std::make_unique<GruModel>(nn::Seq2SeqOptions{.src_vocab = z.src_vocab,
                                                       .tgt_vocab = z.tgt_vocab,
                                                       .embed_size = z.embed,
                                                       .num_hiddens = z.hidden,
                                                       .bidirectional_encoder = true});
}

}  // namespace seq2seq_app
