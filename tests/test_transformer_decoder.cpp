// The Transformer decoder and encoder-decoder (nn/transformer_decoder.h):
// outputs and every gradient against PyTorch 1.13 fixtures
// (tools/make_transformer_decoder_fixture.py, loaded by PyTorch's names),
// causality (a later target token must not change an earlier output),
// incremental decoding against recomputing the prefix, names and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

// The fixture's sizes and masks (tools/make_transformer_decoder_fixture.py).
constexpr int64_t kN = 2, kS = 5, kT = 4, kE = 8, kH = 2, kFF = 16;
Tensor src_kpm() {
  return from_vector(std::vector<bool>{false, false, false, false, false, false, false, false, true, true}, {kN, kS});
}
Tensor tgt_kpm() {
  return from_vector(std::vector<bool>{false, false, false, true, false, false, false, false}, {kN, kT});
}

struct Fixture {
  std::string path;
  StateDict dict;
  explicit Fixture(const std::string& name)
      : path(std::string(EMBER_FIXTURE_DIR) + "/" + name + ".safetensors"), dict(load_safetensors(path)) {}
  Tensor get(const std::string& n) const {
    for (auto& [k, t] : dict)
      if (k == n) return t;
    FAIL("fixture " << path << " lacks " << n);
    return Tensor();
  }
};

// Loads the fixture's state dict by name into m, then compares the output,
// the inputs' gradients and every parameter's gradient for loss = sum(y * w).
template <class Run>
void check_against_fixture(nn::Module& m, const Fixture& f, const std::vector<std::string>& inputs, Run run) {
  const nn::LoadResult r = nn::load(m, f.path, /*strict=*/false);
  CHECK(r.missing_keys.empty());  // every parameter came from PyTorch's names
  m.eval();
  std::vector<Tensor> x;
  for (const auto& n : inputs) x.push_back(f.get("input." + n).requires_grad_());
  const Tensor y = run(x);
  REQUIRE(y.shape() == f.get("output").shape());
  CHECK(allclose(y, f.get("output"), 1e-5, 1e-5));
  sum(mul(y, f.get("output_weight"))).backward();
  for (size_t i = 0; i < inputs.size(); ++i)
    CHECK_MESSAGE(allclose(x[i].grad(), f.get("grad.input." + inputs[i]), 1e-4, 1e-5), inputs[i]);
  // float32 in another summation order than PyTorch's: atol 1e-5 on
  // gradients of scale ~1.
  for (auto& entry : m.named_parameters()) {
    auto& n = entry.first;
    auto& p = entry.second;
    REQUIRE_MESSAGE(p.grad().defined(), n);
    CHECK_MESSAGE(allclose(p.grad(), f.get("grad." + n), 1e-4, 1e-5), n);
  }
}

nn::TransformerDecoderLayerOptions layer_opts(bool pre_gelu) {
  return {kE, kH, kFF, 0.1, pre_gelu ? "gelu" : "relu", 1e-5, /*batch_first=*/pre_gelu, /*norm_first=*/pre_gelu};
}

nn::TransformerOptions model_opts(bool pre_gelu) {
  nn::TransformerOptions o;
  o.d_model = kE;
  o.nhead = kH;
  o.num_encoder_layers = 2;
  o.num_decoder_layers = 2;
  o.dim_feedforward = kFF;
  o.activation = pre_gelu ? "gelu" : "relu";
  o.batch_first = pre_gelu;
  o.norm_first = pre_gelu;
  return o;
}

// The post-norm fixtures pass PyTorch's float mask, the pre-norm ones the
// causal flag: both must mask the same positions.
nn::TransformerDecoderMasks fixture_masks(bool pre_gelu) {
  nn::TransformerDecoderMasks m;
  if (pre_gelu)
    m.tgt_is_causal = true;
  else
    m.tgt_mask = nn::generate_square_subsequent_mask(kT);
  m.tgt_key_padding_mask = tgt_kpm();
  m.memory_key_padding_mask = src_kpm();
  return m;
}

}  // namespace

TEST_CASE("TransformerDecoderLayer matches PyTorch: outputs and every gradient, with padding masks") {
  for (bool pre_gelu : {false, true}) {
    CAPTURE(pre_gelu);
    nn::TransformerDecoderLayer layer(layer_opts(pre_gelu));
    const Fixture f(pre_gelu ? "decoder_layer_pre_gelu" : "decoder_layer_post_relu");
    check_against_fixture(layer, f, {"tgt", "memory"}, [&](const std::vector<Tensor>& x) {
      return layer.forward(x[0], x[1], fixture_masks(pre_gelu));
    });
  }
}

TEST_CASE("Transformer matches PyTorch: a PyTorch state dict loads by name, then outputs and every gradient agree") {
  for (bool pre_gelu : {false, true}) {
    CAPTURE(pre_gelu);
    nn::Transformer model(model_opts(pre_gelu));
    const Fixture f(pre_gelu ? "transformer_pre_gelu" : "transformer_post_relu");
    // Every PyTorch key is one of ours and every one of ours is in the file.
    std::set<std::string> ours;
    for (auto& [n, t] : model.state_dict()) ours.insert(n);
    for (auto& entry : f.dict) {
      auto& k = entry.first;
      if (k.rfind("input.", 0) != 0 && k.rfind("grad.", 0) != 0 && k.rfind("output", 0) != 0)
        CHECK_MESSAGE(ours.count(k), k);
    }
    check_against_fixture(model, f, {"src", "tgt"}, [&](const std::vector<Tensor>& x) {
      return model.forward(x[0], x[1], Tensor(), src_kpm(), fixture_masks(pre_gelu));
    });
  }
}

TEST_CASE("Transformer: PyTorch's state-dict names and sizes") {
  nn::Transformer model(model_opts(false));
  const auto sd = model.state_dict();
  std::set<std::string> names;
  for (auto& [n, t] : sd) names.insert(n);
  for (const char* n :
       {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.1.self_attn.out_proj.weight",
        "encoder.layers.0.linear1.weight", "encoder.norm.weight", "decoder.layers.0.self_attn.in_proj_bias",
        "decoder.layers.1.multihead_attn.in_proj_weight", "decoder.layers.0.multihead_attn.out_proj.bias",
        "decoder.layers.1.norm3.weight", "decoder.norm.bias"})
    CHECK_MESSAGE(names.count(n), n);
  // PyTorch's nn.Transformer(8, 2, 2, 2, 16): 3040 parameters in 64 entries
  // (2 x 600 per encoder layer, 2 x 904 per decoder layer, two final norms).
  CHECK(model.num_parameters() == 2 * 600 + 16 + 2 * 904 + 16);
  CHECK(sd.size() == 2 * 12 + 2 + 2 * 18 + 2);
}

TEST_CASE("generate_square_subsequent_mask is PyTorch's: -inf above the diagonal, 0 elsewhere") {
  const std::vector<float> m = nn::generate_square_subsequent_mask(3).to_vector<float>();
  const float inf = INFINITY;
  CHECK(m == std::vector<float>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0});
  CHECK(nn::generate_square_subsequent_mask(0).numel() == 0);
  CHECK_THROWS_AS(nn::generate_square_subsequent_mask(-1), ValueError);
}

TEST_CASE("TransformerDecoder: a later target token never changes an earlier output (the causal mask does not leak)") {
  manual_seed(4);
  for (bool pre_gelu : {false, true}) {
    CAPTURE(pre_gelu);
    nn::TransformerDecoder dec(layer_opts(pre_gelu), 2, true);
    dec.eval();
    NoGradGuard ng;
    const Tensor tgt = randn({kN, kT, kE}), memory = randn({kN, kS, kE});
    auto seq = [&](const Tensor& t) { return pre_gelu ? t : t.transpose(0, 1).contiguous(); };
    auto bf = [&](const Tensor& t) { return pre_gelu ? t : t.transpose(0, 1); };
    // Change only the last target position.
    Tensor changed = tgt.clone();
    changed.narrow(1, kT - 1, 1).copy_(randn({kN, 1, kE}));
    for (int way = 0; way < 3; ++way) {
      CAPTURE(way);
      nn::TransformerDecoderMasks m;
      if (way == 0) m.tgt_is_causal = true;
      if (way == 1) m.tgt_mask = nn::generate_square_subsequent_mask(kT);
      if (way == 2) m.tgt_mask = causal_mask(kT, kT);
      const Tensor a = bf(dec.forward(seq(tgt), seq(memory), m)), b = bf(dec.forward(seq(changed), seq(memory), m));
      CHECK(allclose(a.narrow(1, 0, kT - 1), b.narrow(1, 0, kT - 1), 0, 0));  // earlier positions: bit for bit
      CHECK_FALSE(allclose(a.narrow(1, kT - 1, 1), b.narrow(1, kT - 1, 1), 1e-3, 1e-3));
    }
    // The check itself catches a leak: without the mask the earlier outputs move.
    const Tensor a = bf(dec.forward(seq(tgt), seq(memory))), b = bf(dec.forward(seq(changed), seq(memory)));
    CHECK_FALSE(allclose(a.narrow(1, 0, kT - 1), b.narrow(1, 0, kT - 1), 1e-3, 1e-3));
  }
}

TEST_CASE("TransformerDecoder: incremental decoding with the cache equals recomputing the whole prefix") {
  manual_seed(5);
  for (bool pre_gelu : {false, true}) {
    CAPTURE(pre_gelu);
    nn::TransformerDecoder dec(layer_opts(pre_gelu), 3, true);
    dec.eval();
    NoGradGuard ng;
    const int64_t T = 7;
    const Tensor tgt = randn({kN, T, kE}), memory = randn({kN, kS, kE});
    auto seq = [&](const Tensor& t) { return pre_gelu ? t : t.transpose(0, 1).contiguous(); };
    auto bf = [&](const Tensor& t) { return pre_gelu ? t : t.transpose(0, 1); };
    nn::TransformerDecoderMasks m;
    m.tgt_is_causal = true;
    m.memory_key_padding_mask = src_kpm();
    const Tensor full = bf(dec.forward(seq(tgt), seq(memory), m));
    nn::TransformerDecoderCache cache = dec.init_cache(seq(memory), src_kpm());
    for (int64_t t = 0; t < T; ++t) {
      CAPTURE(t);
      const Tensor y = bf(dec.step(seq(tgt.narrow(1, t, 1).contiguous()), cache));
      CHECK(cache.steps == t + 1);
      CHECK(cache.layers[0].self_k.size(1) == t + 1);  // one more position cached per step
      CHECK(allclose(y, full.narrow(1, t, 1), 1e-5, 1e-6));
      // Each prefix on its own gives the same too (nothing after t matters).
      const Tensor prefix = bf(dec.forward(seq(tgt.narrow(1, 0, t + 1).contiguous()), seq(memory), m));
      CHECK(allclose(y, prefix.narrow(1, t, 1), 1e-5, 1e-6));
    }
    // reorder keeps the chosen batch entries: entry 1 twice.
    nn::TransformerDecoderCache c2 = dec.init_cache(seq(memory), src_kpm());
    dec.step(seq(tgt.narrow(1, 0, 1).contiguous()), c2);
    c2.reorder(from_vector(std::vector<int64_t>{1, 1}));
    const Tensor both = index_select(tgt.narrow(1, 1, 1), 0, from_vector(std::vector<int64_t>{1, 1})).contiguous();
    const Tensor y1 = bf(dec.step(seq(both), c2));
    CHECK(allclose(y1.select(0, 0), full.select(0, 1).narrow(0, 1, 1), 1e-5, 1e-6));
    CHECK(allclose(y1.select(0, 1), full.select(0, 1).narrow(0, 1, 1), 1e-5, 1e-6));
  }
}

TEST_CASE("Transformer: beam search with K = 1 on the cached decoder equals greedy decoding by full recomputation") {
  manual_seed(7);
  const int64_t V = 9, bos = 1, eos = 2, steps = 8;
  nn::Transformer model(model_opts(true));  // batch first
  nn::Embedding emb(V, kE);
  nn::Linear head(kE, V);
  model.eval();
  NoGradGuard ng;
  const Tensor memory = model.encoder->forward(randn({kN, kS, kE}), Tensor(), src_kpm());
  nn::TransformerDecoderMasks m;
  m.tgt_is_causal = true;
  m.memory_key_padding_mask = src_kpm();
  // Greedy: the whole prefix through the decoder at every step.
  std::vector<int64_t> prefix(kN, bos);
  for (int64_t t = 0; t < steps; ++t) {
    const Tensor tokens = from_vector(prefix, {t + 1, kN}).transpose(0, 1).contiguous();
    const Tensor y = model.decoder->forward(emb(tokens), memory, m).select(1, t);
    const std::vector<int64_t> next = argmax(head(y), 1).to_vector<int64_t>();
    prefix.insert(prefix.end(), next.begin(), next.end());
  }
  // Beam search of width 1 through the cache.
  nn::TransformerDecoderCache cache = model.decoder->init_cache(memory, src_kpm());
  auto step = [&](const Tensor& tokens, const Tensor& parents) {
    if (cache.steps > 0) cache.reorder(parents);
    return log_softmax(head(model.decoder->step(emb(tokens.unsqueeze(1)), cache)).squeeze(1), 1);
  };
  const auto res = nn::beam_search(kN, step, {1, steps, bos, eos, 0.6});
  for (int64_t b = 0; b < kN; ++b) {
    std::vector<int64_t> greedy;
    bool ended = false;
    for (int64_t t = 1; t <= steps && !ended; ++t) {
      const int64_t tok = prefix[static_cast<size_t>(t * kN + b)];
      ended = tok == eos;
      if (!ended) greedy.push_back(tok);
    }
    CAPTURE(b);
    CHECK(res[b][0].tokens == greedy);
    CHECK(res[b][0].finished == ended);
  }
}

TEST_CASE("TransformerDecoder: bad arguments are clear errors") {
  nn::TransformerDecoder dec(layer_opts(true), 2);
  const Tensor memory = randn({kN, kS, kE});
  nn::TransformerDecoderCache cache;
  CHECK_THROWS_AS(dec.step(randn({kN, 1, kE}), cache), ValueError);  // no init_cache
  cache = dec.init_cache(memory);
  CHECK_THROWS_AS(dec.step(randn({kN, 2, kE}), cache), ShapeError);      // two positions
  CHECK_THROWS_AS(dec.step(randn({kN + 1, 1, kE}), cache), ShapeError);  // another batch
  CHECK_THROWS_AS(dec.init_cache(memory, src_kpm().narrow(1, 0, 3)), ShapeError);
  CHECK_THROWS_AS(dec.forward(randn({kN, kT, kE}), memory, {Tensor(), Tensor(), Tensor(), tgt_kpm().narrow(1, 0, 2)}),
                  ShapeError);
  nn::TransformerDecoderLayerOptions bad = layer_opts(true);
  CHECK_THROWS_AS(bad.activation = "tanh", ValueError);  // Activation names the choices
  nn::Transformer model(model_opts(true));
  CHECK_THROWS_AS(model.forward(randn({kN, kS, kE}), randn({kN + 1, kT, kE})), ShapeError);
}
