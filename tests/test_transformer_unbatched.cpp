// nn::Transformer and its encoder and decoder layers as PyTorch 1.13 takes
// them: unbatched 2-D inputs ((S, E) instead of (S, N, E) or (N, S, E)), equal
// to the batched result for a batch of one, and `activation` as any callable
// (the tanh GELU) beside the ReLU / GELU choices.
#include <doctest/doctest.h>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

// a and b the same values (and shape).
void check_same(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  REQUIRE(a.shape() == b.shape());
  CHECK(allclose(a, b, 0, tol));
}

}  // namespace

TEST_CASE("transformer layers: an unbatched (S, E) input is a batch of one") {
  manual_seed(3);
  for (bool batch_first : {false, true}) {
    CAPTURE(batch_first);
    const int64_t b = batch_first ? 0 : 1;
    nn::TransformerEncoderLayer enc({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .batch_first = batch_first});
    enc.eval();
    const Tensor src = randn({5, 8});
    const Tensor kpm = tensor({0.0, 0.0, 0.0, 1.0, 1.0}).to(kBool);  // the last two positions padded
    const Tensor mask = zeros({5, 5});
    const Tensor y = enc.forward(src, mask, kpm);
    CHECK(y.shape() == Shape({5, 8}));
    check_same(y, enc.forward(src.unsqueeze(b), mask, kpm.unsqueeze(0)).squeeze(b));
    check_same(enc.forward(src), enc.forward(src.unsqueeze(b)).squeeze(b));

    nn::TransformerEncoder stack({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .batch_first = batch_first}, 2);
    stack.eval();
    check_same(stack.forward(src, Tensor(), kpm),
               stack.forward(src.unsqueeze(b), Tensor(), kpm.unsqueeze(0)).squeeze(b));

    nn::TransformerDecoderLayer dec({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .batch_first = batch_first});
    dec.eval();
    const Tensor tgt = randn({4, 8});
    nn::TransformerDecoderMasks masks;
    masks.memory_key_padding_mask = kpm;
    masks.tgt_is_causal = true;
    const Tensor z = dec.forward(tgt, src, masks);
    CHECK(z.shape() == Shape({4, 8}));
    nn::TransformerDecoderMasks batched = masks;
    batched.memory_key_padding_mask = kpm.unsqueeze(0);
    check_same(z, dec.forward(tgt.unsqueeze(b), src.unsqueeze(b), batched).squeeze(b));
    CHECK_THROWS_AS(dec.forward(tgt, src.unsqueeze(b)), ShapeError);  // both unbatched, or neither
  }
}

TEST_CASE("nn::Transformer: unbatched src (S, E) and tgt (T, E), as PyTorch 1.13") {
  manual_seed(4);
  nn::Transformer model({.d_model = 8,
                         .nhead = 2,
                         .num_encoder_layers = 2,
                         .num_decoder_layers = 2,
                         .dim_feedforward = 16,
                         .dropout = 0.0});
  const Tensor src = randn({6, 8}), tgt = randn({3, 8});
  const Tensor kpm = tensor({0.0, 0.0, 0.0, 0.0, 1.0, 1.0}).to(kBool);
  nn::TransformerDecoderMasks masks;
  masks.memory_key_padding_mask = kpm;
  masks.tgt_is_causal = true;
  const Tensor y = model.forward(src, tgt, Tensor(), kpm, masks);
  CHECK(y.shape() == Shape({3, 8}));
  nn::TransformerDecoderMasks batched = masks;
  batched.memory_key_padding_mask = kpm.unsqueeze(0);
  check_same(y, model.forward(src.unsqueeze(1), tgt.unsqueeze(1), Tensor(), kpm.unsqueeze(0), batched).squeeze(1));
  // Gradients flow through the unbatched path.
  Tensor s = src.clone().requires_grad_();
  model.forward(s, tgt).sum().backward();
  CHECK(s.grad().shape() == Shape({6, 8}));
  // One unbatched and one batched input is an error naming both shapes.
  CHECK(test::contains(test::error_of<ShapeError>([&] { (void)model.forward(src, tgt.unsqueeze(1)); }), "unbatched"));
}

TEST_CASE("transformer layers: activation takes any callable, e.g. the tanh GELU") {
  manual_seed(5);
  const Tensor x = randn({2, 5, 8});
  const nn::TransformerEncoderLayerOptions base{
      .d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0, .batch_first = true};
  // A callable computing the exact GELU gives the built-in GELU's result.
  nn::TransformerEncoderLayerOptions exact = base, same = base, tanh = base;
  exact.activation = nn::Activation::GELU;
  int calls = 0;
  same.activation = [&calls](const Tensor& t) {
    ++calls;
    return gelu(t);
  };
  tanh.activation = [](const Tensor& t) { return gelu(t, GeluApproximation::Tanh); };
  CHECK(same.activation.kind() == nn::Activation::Custom);
  CHECK(std::string(same.activation.name()) == "custom");
  CHECK_FALSE(same.activation == exact.activation);
  manual_seed(6);
  nn::TransformerEncoderLayer a(exact);
  manual_seed(6);
  nn::TransformerEncoderLayer b(same);
  manual_seed(6);
  nn::TransformerEncoderLayer c(tanh);
  check_same(a.forward(x), b.forward(x), 0);
  CHECK(calls == 1);
  // The tanh form: the feed-forward block by hand, linear2(gelu_tanh(linear1(h))).
  const Tensor h = randn({2, 5, 8});
  const Tensor want = (*c.linear2)(gelu((*c.linear1)(h), GeluApproximation::Tanh));
  check_same(
      nn::detail::transformer_feed_forward(h, *c.linear1, *c.dropout, *c.linear2, *c.dropout2, c.opts.activation), want,
      0);
  CHECK_FALSE(allclose(a.forward(x), c.forward(x), 0, 1e-7));  // the two GELUs differ
  // Through nn::Transformer's options too.
  nn::Transformer t({.d_model = 8,
                     .nhead = 2,
                     .num_encoder_layers = 1,
                     .num_decoder_layers = 1,
                     .dim_feedforward = 16,
                     .activation = [](const Tensor& v) { return gelu(v, GeluApproximation::Tanh); }});
  CHECK(t.opts.activation.kind() == nn::Activation::Custom);
  CHECK(t.forward(randn({4, 1, 8}), randn({3, 1, 8})).shape() == Shape({3, 1, 8}));
}
