// The GPT model of nn/gpt.h: blocks, the tied head, the KV cache and
// generation (its sampler: nn/gpt_sample.cpp).
#include <ember/core/autocast.h>
#include <ember/core/autograd.h>
#include <ember/nn/gpt.h>
#include <ember/nn/gpt_decode.h>
#include <ember/nn/init.h>
#include <ember/ops/activation.h>
#include <ember/ops/causal_attention.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/loss.h>
#include <ember/ops/matmul.h>
#include <ember/ops/softmax.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace ember::nn {
namespace {

std::shared_ptr<LayerNorm> make_norm(int64_t E, bool bias, double eps) {
  if (bias) return std::make_shared<LayerNorm>(Shape{E}, eps);
  // nanoGPT's LayerNorm without a bias: a weight alone (layer_norm takes an undefined bias).
  auto ln = std::make_shared<LayerNorm>(Shape{E}, eps, false);
  ln->weight = ln->register_parameter("weight", ones({E}));
  return ln;
}

void check_config(const GPTConfig& c) {
  EMBER_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0, ValueError,
              "GPT: sizes must be positive, got vocab_size ", c.vocab_size, ", block_size ", c.block_size, ", n_layer ",
              c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd);
  EMBER_CHECK(c.n_embd % c.n_head == 0, ValueError, "GPT: width ", c.n_embd, " is not divisible into ", c.n_head,
              " heads");
  EMBER_CHECK(c.dropout >= 0 && c.dropout < 1, ValueError, "GPT: dropout must be in [0, 1), got ", c.dropout);
  EMBER_CHECK(c.layer_norm_eps > 0, ValueError, "GPT: layer_norm_eps must be positive, got ", c.layer_norm_eps);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg) : n_head(cfg.n_head), attn_dropout(cfg.dropout) {
  c_attn = register_module("c_attn", std::make_shared<Linear>(cfg.n_embd, 3 * cfg.n_embd, cfg.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(cfg.n_embd, cfg.n_embd, cfg.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(cfg.dropout));
}

Tensor CausalSelfAttention::attend(const Tensor& x) {
  return causal_self_attention(c_attn->forward(x), n_head, is_training() ? attn_dropout : 0.0);
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return resid_dropout->forward(c_proj->forward(attend(x))); }

Tensor CausalSelfAttention::forward_residual(const Tensor& x, const Tensor& residual) {
  return c_proj->forward_dropout_add(attend(x), *resid_dropout, residual);
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t len) {
  const int64_t E = x.size(2), t = x.size(1);
  const Tensor qkv = c_attn->forward(x);
  k_cache.narrow(1, len, t).copy_(qkv.narrow(2, E, E));
  v_cache.narrow(1, len, t).copy_(qkv.narrow(2, 2 * E, E));
  // The new queries at positions [len, len + t) against keys [0, len + t):
  // bottom-right aligned causal attention (a single new query sees them all).
  // Under autocast qkv is bfloat16 and so is the cache (make_cache): one new
  // token attends over it as it is (causal_attention's bf16 decode loops,
  // float32 arithmetic). A prompt's many positions attend in float32 on the
  // fused kernel, as does a cache in any other dtype than qkv's.
  Tensor q = qkv.narrow(2, 0, E), k = k_cache.narrow(1, 0, len + t), v = v_cache.narrow(1, 0, len + t);
  const DType dt = q.dtype() == k.dtype() && t == 1 ? k.dtype()
                   : k.dtype() == DType::BFloat16   ? DType::Float32
                                                    : k.dtype();
  if (q.dtype() != dt) q = q.to(dt);
  if (k.dtype() != dt) k = k.to(dt), v = v.to(dt);
  const Tensor y = causal_attention(q, k, v, n_head);
  return c_proj->forward(y);
}

GPTMLP::GPTMLP(const GPTConfig& cfg) : gelu(cfg.gelu) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(cfg.n_embd, 4 * cfg.n_embd, cfg.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * cfg.n_embd, cfg.n_embd, cfg.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(cfg.dropout));
}

Tensor GPTMLP::forward(const Tensor& x) { return dropout->forward(c_proj->forward(c_fc->forward_gelu(x, gelu))); }

Tensor GPTMLP::forward_residual(const Tensor& x, const Tensor& residual) {
  return c_proj->forward_dropout_add(c_fc->forward_gelu(x, gelu), *dropout, residual);
}

GPTBlock::GPTBlock(const GPTConfig& cfg) {
  ln_1 = register_module("ln_1", make_norm(cfg.n_embd, cfg.bias, cfg.layer_norm_eps));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(cfg));
  ln_2 = register_module("ln_2", make_norm(cfg.n_embd, cfg.bias, cfg.layer_norm_eps));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(cfg));
}

Tensor GPTBlock::forward(const Tensor& x) {
  const Tensor y = attn->forward_residual(ln_1->forward(x), x);
  return mlp->forward_residual(ln_2->forward(y), y);
}

Tensor GPTBlock::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t len) {
  const Tensor y = add(x, attn->forward_cached(ln_1->forward(x), k_cache, v_cache, len));
  return add(y, mlp->forward(ln_2->forward(y)));
}

GPT::GPT(GPTConfig c, Generator* gen) : cfg(c) {
  check_config(cfg);
  wte = register_module("wte", std::make_shared<Embedding>(cfg.vocab_size, cfg.n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(cfg.block_size, cfg.n_embd));
  drop = register_module("drop", std::make_shared<Dropout>(cfg.dropout));
  h = register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(cfg));
  ln_f = register_module("ln_f", make_norm(cfg.n_embd, cfg.bias, cfg.layer_norm_eps));
  // GPT-2's init (nanoGPT's _init_weights, then the scaled residual projections).
  NoGradGuard ng;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 1) {
      if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) init::zeros_(p);
      continue;  // LayerNorm weights stay ones
    }
    const bool resid = name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
    init::normal_(p, 0.0, resid ? resid_std : 0.02, gen);
  }
}

int64_t GPT::num_parameters_non_embedding() const { return num_parameters() - wpe->weight.numel(); }

Tensor GPT::embed(const Tensor& idx, int64_t pos0) {
  EMBER_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64, ShapeError,
              "GPT: expected token ids (B, T) of int64, got ", idx.shape().str(), " ", dtype_name(idx.dtype()));
  const int64_t T = idx.size(1);
  EMBER_CHECK(pos0 + T <= cfg.block_size, ShapeError, "GPT: ", pos0 + T, " positions do not fit the context of ",
              cfg.block_size);
  const Tensor pos =
      arange(static_cast<double>(pos0), static_cast<double>(pos0 + T), 1.0, TensorOptions(DType::Int64, idx.device()));
  return drop->forward(add(wte->forward(idx), wpe->forward(pos)));
}

// The tied head: logits = ln_f(x) wte^T (no bias), wte.weight's second use.
Tensor GPT::head(const Tensor& x) { return linear(ln_f->forward(x), wte->weight); }

Tensor GPT::forward(const Tensor& idx) {
  Tensor x = embed(idx, 0);
  for (size_t i = 0; i < h->size(); ++i) x = h->at<GPTBlock>(i).forward(x);
  return head(x);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  const Tensor logits = forward(idx);
  return cross_entropy(logits.reshape({-1, cfg.vocab_size}), targets.reshape({-1}));
}

Tensor GPT::attention_weights(const Tensor& idx, int64_t layer) {
  EMBER_CHECK(layer >= 0 && layer < cfg.n_layer, ValueError, "GPT::attention_weights: layer ", layer, " of ",
              cfg.n_layer);
  NoGradGuard ng;
  Tensor x = embed(idx, 0);
  for (int64_t i = 0; i < layer; ++i) x = h->at<GPTBlock>(static_cast<size_t>(i)).forward(x);
  GPTBlock& b = h->at<GPTBlock>(static_cast<size_t>(layer));
  const Tensor qkv = b.attn->c_attn->forward(b.ln_1->forward(x));
  const int64_t B = idx.size(0), T = idx.size(1), E = cfg.n_embd, H = cfg.n_head, D = E / H;
  auto split = [&](int64_t part) { return qkv.narrow(2, part * E, E).reshape({B, T, H, D}).transpose(1, 2); };
  const Tensor s = mul(matmul(split(0), split(1).transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(D)));
  return softmax(masked_fill(s, causal_attention_mask(T, T, s.device()), -INFINITY), -1);
}

KVCache GPT::make_cache(int64_t batch) const {
  KVCache c;
  // In a bfloat16 autocast region on the CPU c_attn's keys and values come
  // out in bfloat16: the cache keeps them so, losing nothing, and each decoded
  // token reads half the bytes of a float32 cache.
  const Device dev = wte->weight.device();
  const bool bf16 = dev.is_cpu() && wte->weight.dtype() == DType::Float32 && autocast_enabled(DeviceType::CPU) &&
                    autocast_dtype(DeviceType::CPU) == DType::BFloat16;
  const TensorOptions o(bf16 ? DType::BFloat16 : wte->weight.dtype(), dev);
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    c.k.push_back(empty({batch, cfg.block_size, cfg.n_embd}, o));
    c.v.push_back(empty({batch, cfg.block_size, cfg.n_embd}, o));
  }
  return c;
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) {
  EMBER_CHECK(static_cast<int64_t>(cache.k.size()) == cfg.n_layer, ValueError, "GPT::forward_cached: the cache has ",
              cache.k.size(), " layers, the model ", cfg.n_layer);
  NoGradGuard ng;
  Tensor x = embed(idx, cache.len);
  for (size_t i = 0; i < h->size(); ++i) x = h->at<GPTBlock>(i).forward_cached(x, cache.k[i], cache.v[i], cache.len);
  cache.len += idx.size(1);
  return head(x);
}

std::vector<int64_t> GPT::generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens, const SampleOptions& o) {
  EMBER_CHECK(!prompt.empty(), ValueError, "GPT::generate: the prompt is empty (give at least one token)");
  EMBER_CHECK(max_new_tokens >= 0, ValueError, "GPT::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  EMBER_CHECK(o.temperature >= 0 && std::isfinite(o.temperature), ValueError,
              "GPT::generate: temperature must be finite and >= 0, got ", o.temperature);
  EMBER_CHECK(o.top_k >= 0, ValueError, "GPT::generate: top_k must be >= 0, got ", o.top_k);
  EMBER_CHECK(o.top_p > 0 && o.top_p <= 1, ValueError, "GPT::generate: top_p must be in (0, 1], got ", o.top_p);
  for (int64_t t : prompt)
    EMBER_CHECK(t >= 0 && t < cfg.vocab_size, ValueError, "GPT::generate: token ", t, " is outside the vocabulary of ",
                cfg.vocab_size);
  const bool was_training = is_training();
  eval();
  NoGradGuard ng;
  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> seq = prompt;
  KVCache cache;
  if (o.use_cache && !o.cuda_graph) cache = make_cache(1);
  GraphedDecoder* dec = nullptr;
  if (o.use_cache && o.cuda_graph) {
    if (!decoder_ || !decoder_->current() || !decoder_->matches_autocast()) {
      decoder_.reset();  // the old graph's pool back before a new capture
      decoder_ = std::make_shared<GraphedDecoder>(*this, 1);
    }
    dec = decoder_.get();
    dec->reset();
  }
  const Device dev = wte->weight.device();
  auto ids = [&](int64_t from) {
    std::vector<int64_t> w(seq.begin() + from, seq.end());
    return from_vector(w, {1, static_cast<int64_t>(w.size())}).to(dev);
  };
  for (int64_t s = 0; s < max_new_tokens; ++s) {
    const int64_t n = static_cast<int64_t>(seq.size());
    Tensor logits;
    if (!o.use_cache || n > cfg.block_size) {
      // Without a cache (or past the context, where every position shifts):
      // the last block_size tokens from scratch.
      logits = forward(ids(std::max<int64_t>(0, n - cfg.block_size)));
    } else if (dec) {
      logits = dec->len() == 0 ? dec->prefill(ids(0)) : dec->step({seq.back()});
    } else if (cache.len == 0) {
      logits = forward_cached(ids(0), cache);  // the prompt, at once
    } else {
      logits = forward_cached(ids(n - 1), cache);  // the one new token
    }
    const std::vector<double> last = logits.narrow(1, logits.size(1) - 1, 1).cpu().to_vector<double>();
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    seq.push_back(sample_token(last, o, u));
  }
  train(was_training);
  return seq;
}

}  // namespace ember::nn
