// The models whose residual steps run as linear_dropout_add (GPTBlock's two
// branches, the transformer layers' attention and feed-forward branches,
// pre- and post-norm; sequence first too, where the attention branch stays
// composed) give, on the CPU, the values and gradients of the composed form
// bit for bit:
// each model against its own modules called one by one as before (linear,
// dropout and add, the dropout draws in the same order from the default
// generator), in training mode with dropout. On CUDA (emulated here) the
// fused steps match the CPU.
#include <doctest/doctest.h>
#include <ember/ember.h>

#include "test_util.h"

#include <functional>
#include <vector>

using namespace ember;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.cpu().contiguous().to(kFloat64).to_vector<double>() == b.cpu().contiguous().to(kFloat64).to_vector<double>();
}

// The output and every parameter's gradient of sum(f(x) * g), with the
// default generator seeded first (the dropout modules draw from it).
std::vector<Tensor> outputs(nn::Module& m, const std::function<Tensor(const Tensor&)>& f, const Tensor& x0,
                            const Tensor& g) {
  m.zero_grad();
  default_generator().manual_seed(77);
  Tensor x = x0.detach().requires_grad_(true);
  const Tensor y = f(x);
  (y * g.to(y.device())).sum().backward();
  std::vector<Tensor> out{y, x.grad()};
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p.grad());
  return out;
}

void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(same_bits(a[i], b[i]));
  }
}

}  // namespace

TEST_CASE("residual fusion: GPTBlock's output and gradients are the composed form's on the CPU") {
  nn::GPTConfig cfg;
  cfg.block_size = 8, cfg.vocab_size = 11, cfg.n_layer = 1, cfg.n_head = 2, cfg.n_embd = 16, cfg.dropout = 0.2;
  manual_seed(3);
  nn::GPTBlock block(cfg);
  block.train();
  const Tensor x = randn({2, 5, 16}), g = randn({2, 5, 16});
  const auto fused = outputs(
      block, [&](const Tensor& t) { return block.forward(t); }, x, g);
  const auto composed = outputs(
      block,
      [&](const Tensor& t) {
        const Tensor y = add(t, block.attn->forward(block.ln_1->forward(t)));
        return add(y, block.mlp->forward(block.ln_2->forward(y)));
      },
      x, g);
  check_same(fused, composed);
  // The dropout masks took effect: without them the output differs.
  block.eval();
  CHECK_FALSE(same_bits(block.forward(x), fused[0]));
}

TEST_CASE("residual fusion: the transformer layers' output and gradients are the composed form's on the CPU") {
  for (const bool norm_first : {true, false})
    for (const bool batch_first : {true, false}) {
      CAPTURE(norm_first);
      CAPTURE(batch_first);
      manual_seed(4);
      nn::TransformerEncoderLayerOptions o;
      o.d_model = 12, o.nhead = 2, o.dim_feedforward = 20, o.dropout = 0.25, o.batch_first = batch_first;
      o.norm_first = norm_first, o.activation = nn::Activation("gelu");
      nn::TransformerEncoderLayer layer(o);
      layer.train();
      const Tensor x = randn({3, 4, 12}), g = randn({3, 4, 12});
      auto& l = layer;
      const auto sa = [&](const Tensor& h) {
        return (*l.dropout1)(l.self_attn->forward(h, h, h, Tensor(), false, Tensor(), true, false).first);
      };
      const auto ff = [&](const Tensor& h) {
        return nn::detail::transformer_feed_forward(h, *l.linear1, *l.dropout, *l.linear2, *l.dropout2,
                                                    l.opts.activation);
      };
      const auto fused = outputs(
          layer, [&](const Tensor& t) { return layer.forward(t); }, x, g);
      const auto composed = outputs(
          layer,
          [&](const Tensor& t) {
            if (norm_first) {
              const Tensor y = add(t, sa((*l.norm1)(t)));
              return add(y, ff((*l.norm2)(y)));
            }
            const Tensor y = (*l.norm1)(add(t, sa(t)));
            return (*l.norm2)(add(y, ff(y)));
          },
          x, g);
      check_same(fused, composed);

      // The decoder layer's feed-forward, against its encoder-style composition
      // (self- and cross-attention as the layer runs them, from the same seed).
      nn::TransformerDecoderLayerOptions d;
      d.d_model = 12, d.nhead = 2, d.dim_feedforward = 20, d.dropout = 0.25, d.batch_first = batch_first;
      d.norm_first = norm_first;
      nn::TransformerDecoderLayer dec(d);
      dec.train();
      const Tensor mem = batch_first ? randn({3, 5, 12}) : randn({5, 4, 12});
      auto& dl = dec;
      const auto dec_fused = outputs(
          dec, [&](const Tensor& t) { return dec.forward(t, mem); }, x, g);
      const auto dec_composed = outputs(
          dec,
          [&](const Tensor& t) {
            const auto dsa = [&](const Tensor& h) {
              return (*dl.dropout1)(dl.self_attn->forward(h, h, h, Tensor(), false, Tensor(), true, false).first);
            };
            const auto dca = [&](const Tensor& h) {
              return (*dl.dropout2)(
                  dl.multihead_attn->forward(h, mem, mem, Tensor(), false, Tensor(), true, false).first);
            };
            const auto dff = [&](const Tensor& h) {
              return nn::detail::transformer_feed_forward(h, *dl.linear1, *dl.dropout, *dl.linear2, *dl.dropout3,
                                                          dl.opts.activation);
            };
            if (norm_first) {
              Tensor y = add(t, dsa((*dl.norm1)(t)));
              y = add(y, dca((*dl.norm2)(y)));
              return add(y, dff((*dl.norm3)(y)));
            }
            Tensor y = (*dl.norm1)(add(t, dsa(t)));
            y = (*dl.norm2)(add(y, dca(y)));
            return (*dl.norm3)(add(y, dff(y)));
          },
          x, g);
      check_same(dec_fused, dec_composed);
    }
}

TEST_CASE("residual fusion: a GPT block's training step on CUDA matches the CPU, dropout masks included") {
  if (!test::cuda_usable()) return;
  nn::GPTConfig cfg;
  cfg.block_size = 8, cfg.vocab_size = 11, cfg.n_layer = 1, cfg.n_head = 2, cfg.n_embd = 16, cfg.dropout = 0.2;
  manual_seed(5);
  nn::GPTBlock block(cfg);
  block.train();
  const Tensor x = randn({2, 5, 16}), g = randn({2, 5, 16});
  const auto cpu = outputs(
      block, [&](const Tensor& t) { return block.forward(t); }, x, g);
  block.to(Device("cuda"));
  const auto cuda = outputs(
      block, [&](const Tensor& t) { return block.forward(t); }, x.to(Device("cuda")), g);
  REQUIRE(cpu.size() == cuda.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(allclose(cuda[i].cpu(), cpu[i], 1e-4, 1e-4));
  }
}
