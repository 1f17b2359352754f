// GraphedDecoder (nn/gpt_decode.h): GPT's one-token step on fixed shapes,
// captured as a CUDA graph, in the model's dtype or as a 16-bit autocast
// region runs it.
#include <ember/core/autocast.h>
#include <ember/core/autograd.h>
#include <ember/nn/gpt_decode.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/kv_cache_attention.h>
#include <ember/ops/linear_gelu.h>
#include <ember/ops/matmul.h>

#include <string>

namespace ember::nn {
namespace {

// The autocast dtype on dev now, if a region is on.
std::optional<DType> region_on(Device dev) {
  if (!autocast_enabled(dev.type)) return std::nullopt;
  return autocast_dtype(dev.type);
}

std::string region_name(const std::optional<DType>& r) {
  return r ? std::string("a ") + dtype_name(*r) + " autocast region" : std::string("no autocast region");
}

}  // namespace

GraphedDecoder::GraphedDecoder(GPT& model, int64_t batch) : model_(model), batch_(batch) {
  EMBER_CHECK(batch > 0, ValueError, "GraphedDecoder: batch must be positive, got ", batch);
  model_.eval();
  NoGradGuard ng;
  const Device dev = model_.wte->weight.device();
  const DType model_dt = model_.wte->weight.dtype();
  region_ = region_on(dev);
  // Under autocast over a float32 model the GEMMs run on 16-bit copies of
  // their weights; a model already in the region's dtype runs as it is.
  const bool copies = region_ && *region_ != model_dt;
  EMBER_CHECK(!copies || (model_dt == DType::Float32 && is_half(*region_)), ValueError,
              "GraphedDecoder: ", region_name(region_), " over a ", dtype_name(model_dt),
              " model (a 16-bit region over a float32 model, or the model's own dtype)");
  dtype_ = region_ ? *region_ : model_dt;
  auto low = [&](const Tensor& t) { return copies && t.defined() ? t.to(dtype_) : t; };
  for (size_t i = 0; i < model_.h->size(); ++i) {
    GPTBlock& b = model_.h->at<GPTBlock>(i);
    blocks_.push_back({low(b.attn->c_attn->weight), low(b.attn->c_attn->bias), low(b.attn->c_proj->weight),
                       low(b.attn->c_proj->bias), low(b.mlp->c_fc->weight), low(b.mlp->c_fc->bias),
                       low(b.mlp->c_proj->weight), low(b.mlp->c_proj->bias)});
  }
  head_w_ = low(model_.wte->weight);
  const int64_t L = model_.cfg.block_size, E = model_.cfg.n_embd;
  for (int64_t i = 0; i < model_.cfg.n_layer; ++i) {
    kv_.push_back(zeros({batch, L, 2 * E}, TensorOptions(dtype_, dev)));
    cache_.k.push_back(kv_.back().narrow(2, 0, E));
    cache_.v.push_back(kv_.back().narrow(2, E, E));
  }
  for (const Tensor& p : model_.parameters()) {
    params_.push_back(p.data_ptr());
    if (copies) versions_.push_back(p.version());
  }
  in_ = zeros({batch + 1}, TensorOptions(DType::Int64, dev));
  if (dev.is_cpu()) return;
  // Once eagerly (at position 0, which the first token overwrites): loads
  // the kernels and sizes the allocator's blocks; then the capture.
  run_step();
  graph_.capture(dev, [&] { logits_ = run_step(); });
}

bool GraphedDecoder::current() const {
  std::vector<const void*> now;
  std::vector<uint64_t> versions;
  for (const Tensor& p : model_.parameters()) {
    now.push_back(p.data_ptr());
    if (!versions_.empty()) versions.push_back(p.version());
  }
  return now == params_ && versions == versions_;
}

bool GraphedDecoder::matches_autocast() const { return region_on(model_.wte->weight.device()) == region_; }

// Per block, with x the float32 (or the model's dtype) residual stream:
//   qkv = c_attn(ln_1(x));  kv[pos] = qkv[E:3E];  y = attention(q, k[0..pos], v[0..pos]);
//   x += c_proj(y);  x += mlp_c_proj(gelu(c_fc(ln_2(x)))).
// The GEMMs' inputs are cast to dtype_ as autocast would cast them; the
// region itself is off here (its casts are the ones made here).
Tensor GraphedDecoder::run_step() {
  const AutocastSuspend off;
  const int64_t B = batch_, E = model_.cfg.n_embd, H = model_.cfg.n_head;
  const Tensor tokens = in_.narrow(0, 0, B).reshape({B, 1}), pos = in_.narrow(0, B, 1);
  auto low = [&](const Tensor& t) { return t.dtype() == dtype_ ? t : t.to(dtype_); };
  // wte rows (B, 1, E) plus wpe's row at the device position (1, E).
  Tensor x = model_.drop->forward(add(model_.wte->forward(tokens), model_.wpe->forward(pos)));
  for (size_t i = 0; i < model_.h->size(); ++i) {
    GPTBlock& b = model_.h->at<GPTBlock>(i);
    const BlockWeights& w = blocks_[i];
    const Tensor qkv = linear(low(b.ln_1->forward(x)), w.attn_w, w.attn_b);
    index_copy_(kv_[i], 1, pos, qkv.narrow(2, E, 2 * E));
    const Tensor y = kv_cache_attention(qkv.narrow(2, 0, E), cache_.k[i], cache_.v[i], pos, H);
    x = add(x, linear(y, w.proj_w, w.proj_b));
    const Tensor m = linear_gelu(low(b.ln_2->forward(x)), w.fc_w, w.fc_b, model_.cfg.gelu);
    x = add(x, linear(m, w.mlp_w, w.mlp_b));
  }
  return linear(low(model_.ln_f->forward(x)), head_w_);
}

Tensor GraphedDecoder::prefill(const Tensor& idx) {
  EMBER_CHECK(idx.dim() == 2 && idx.size(0) == batch_, ShapeError, "GraphedDecoder::prefill: expected (", batch_,
              ", T) token ids, got ", idx.shape().str());
  EMBER_CHECK(matches_autocast(), ValueError, "GraphedDecoder::prefill: called in ",
              region_name(region_on(model_.wte->weight.device())), ", the decoder was built in ", region_name(region_),
              " (its cache's dtype is fixed then)");
  return model_.forward_cached(idx, cache_);
}

Tensor GraphedDecoder::step(const std::vector<int64_t>& tokens) {
  EMBER_CHECK(matches_autocast(), ValueError, "GraphedDecoder::step: called in ",
              region_name(region_on(model_.wte->weight.device())), ", the decoder was built in ", region_name(region_),
              " (its step's dtypes are fixed then)");
  EMBER_CHECK(static_cast<int64_t>(tokens.size()) == batch_, ValueError, "GraphedDecoder::step: ", tokens.size(),
              " tokens for a batch of ", batch_);
  for (int64_t t : tokens)
    EMBER_CHECK(t >= 0 && t < model_.cfg.vocab_size, ValueError, "GraphedDecoder::step: token ", t,
                " is outside the vocabulary of ", model_.cfg.vocab_size);
  EMBER_CHECK(cache_.len < model_.cfg.block_size, ShapeError, "GraphedDecoder::step: position ", cache_.len,
              " does not fit the context of ", model_.cfg.block_size, " (reset() or re-encode a shorter context)");
  std::vector<int64_t> host = tokens;
  host.push_back(cache_.len);
  in_.copy_(from_vector(host, {batch_ + 1}));  // the step's one input copy
  NoGradGuard ng;
  Tensor out;
  if (graph_.captured()) {
    graph_.replay();
    out = logits_;
  } else {
    out = run_step();
  }
  ++cache_.len;
  return out;
}

}  // namespace ember::nn
