// The seq2seq model of nn/seq2seq.h: parameter names, shapes, attention
// masked by the source lengths, teacher forcing agreeing with step-by-step
// decoding, and gradients reaching every parameter.
#include <doctest/doctest.h>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {
nn::Seq2SeqOptions small(bool bidirectional) {
  nn::Seq2SeqOptions o;
  o.src_vocab = 7;
  o.tgt_vocab = 5;
  o.embed_size = 4;
  o.num_hiddens = 6;
  o.num_layers = 2;
  o.bidirectional_encoder = bidirectional;
  return o;
}
}  // namespace

TEST_CASE("Seq2Seq: names, shapes, masked attention, teacher forcing = stepwise decoding, gradients") {
  for (bool bidir : {false, true}) {
    CAPTURE(bidir);
    nn::Seq2Seq model(small(bidir));
    model.eval();
    std::vector<std::string> names;
    for (auto& [n, p] : model.named_parameters()) names.push_back(n);
    CHECK(names.front() == "encoder.embedding.weight");
    CHECK(std::find(names.begin(), names.end(), "decoder.attention.W_q.weight") != names.end());
    CHECK(std::find(names.begin(), names.end(), "decoder.rnn.weight_ih_l1") != names.end());
    CHECK(names.back() == "decoder.dense.bias");
    CHECK(model.decoder->rnn->weights(0, 0).w_ih.shape() == Shape{18, 4 + 6});  // [embedding, context]

    const Tensor src = randint(1, 7, {3, 5});
    const Tensor lens = from_vector(std::vector<int64_t>{5, 2, 3});
    const Tensor tgt_in = randint(0, 5, {3, 4});
    Tensor w;
    const Tensor logits = model.forward(src, lens, tgt_in, &w);
    CHECK(logits.shape() == Shape{3, 4, 5});
    CHECK(w.shape() == Shape{3, 4, 5});
    // No weight on padded source positions; each row sums to 1.
    CHECK(allclose(w.narrow(0, 1, 1).narrow(2, 2, 3), zeros({1, 4, 3}), 0, 0));
    CHECK(allclose(sum(w, {2}), ones({3, 4}), 1e-5, 1e-5));

    // Feeding the teacher-forced inputs one step at a time gives the same logits.
    auto [enc_out, enc_state] = model.encoder->forward(src, lens);
    CHECK(enc_out.shape() == Shape{3, 5, 6});
    CHECK(enc_state.shape() == Shape{2, 3, 6});
    nn::DecoderState st = model.decoder->init_state(enc_out, enc_state, lens);
    for (int64_t t = 0; t < 4; ++t) {
      const Tensor step = model.decoder->step(tgt_in.select(1, t).contiguous(), st);
      CHECK(allclose(step, logits.select(1, t), 1e-5, 1e-5));
    }
    // Garbage in padded source positions changes nothing.
    Tensor src2 = src.clone();
    src2.narrow(0, 1, 1).narrow(1, 2, 3).fill_(6.0);
    CHECK(allclose(model.forward(src2, lens, tgt_in), logits, 1e-6, 1e-6));

    auto [tokens, gw] = model.greedy_decode(src, lens, 1, 6);
    CHECK(tokens.shape() == Shape{3, 6});
    CHECK(tokens.dtype() == DType::Int64);
    CHECK(gw.shape() == Shape{3, 6, 5});

    model.train();
    model.zero_grad();
    cross_entropy(model.forward(src, lens, tgt_in).reshape({-1, 5}), randint(0, 5, {12})).backward();
    for (auto& entry : model.named_parameters()) {
      const std::string& n = entry.first;
      CHECK_MESSAGE(entry.second.grad().defined(), n);
    }
  }
  CHECK(test::contains(test::error_of<ValueError>([] {
                         nn::Seq2SeqOptions o = small(true);
                         o.num_hiddens = 5;
                         nn::Seq2Seq m(o);
                       }),
                       "even num_hiddens"));
}
