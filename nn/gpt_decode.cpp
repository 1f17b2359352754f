// GraphedDecoder (nn/gpt_decode.h): GPT's one-token step on fixed shapes,
// captured as a CUDA graph.
#include <ember/core/autocast.h>
#include <ember/core/autograd.h>
#include <ember/nn/gpt_decode.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/matmul.h>
#include <ember/ops/softmax.h>

#include <cmath>

namespace ember::nn {
namespace {

// One block's attention for a single new query per row at the position the
// masks encode. write (1, L, 1): true at the position, where the new key and
// value replace the cache's; after (1, 1, 1, L): true past the position,
// the keys the query must not see. Softmax(q k^T / sqrt(D)) v over all L
// cached positions, the masked ones at -inf (weight exactly 0; the cache
// starts zeroed, so no stale NaN meets a zero weight).
Tensor attention_step(CausalSelfAttention& a, const Tensor& x, Tensor& k_cache, Tensor& v_cache, const Tensor& write,
                      const Tensor& after) {
  const int64_t B = x.size(0), E = x.size(2), H = a.n_head, D = E / H, L = k_cache.size(1);
  const Tensor qkv = a.c_attn->forward(x);
  k_cache.copy_(where(write, qkv.narrow(2, E, E), k_cache));
  v_cache.copy_(where(write, qkv.narrow(2, 2 * E, E), v_cache));
  const Tensor q = qkv.narrow(2, 0, E).reshape({B, 1, H, D}).transpose(1, 2);
  const Tensor k = k_cache.reshape({B, L, H, D}).transpose(1, 2), v = v_cache.reshape({B, L, H, D}).transpose(1, 2);
  const Tensor s = mul(matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(D)));
  const Tensor y = matmul(softmax(masked_fill(s, after, -INFINITY), -1), v);
  return a.c_proj->forward(y.transpose(1, 2).reshape({B, 1, E}));
}

// The step runs in the model's dtype: under autocast its projections would
// come out in another dtype than the cache, and a graph would freeze the
// region's choice into every replay.
void check_no_autocast(Device dev, const char* where) {
  EMBER_CHECK(!autocast_enabled(dev.type), ValueError, "GraphedDecoder::", where,
              ": not inside an autocast region (the step runs in the model's dtype)");
}

}  // namespace

GraphedDecoder::GraphedDecoder(GPT& model, int64_t batch) : model_(model), batch_(batch) {
  EMBER_CHECK(batch > 0, ValueError, "GraphedDecoder: batch must be positive, got ", batch);
  model_.eval();
  NoGradGuard ng;
  const Device dev = model_.wte->weight.device();
  check_no_autocast(dev, "GraphedDecoder");
  const TensorOptions o(model_.wte->weight.dtype(), dev);
  for (int64_t i = 0; i < model_.cfg.n_layer; ++i) {
    cache_.k.push_back(zeros({batch, model_.cfg.block_size, model_.cfg.n_embd}, o));
    cache_.v.push_back(zeros({batch, model_.cfg.block_size, model_.cfg.n_embd}, o));
  }
  for (const Tensor& p : model_.parameters()) params_.push_back(p.data_ptr());
  const TensorOptions ids(DType::Int64, dev);
  in_ = zeros({batch + 1}, ids);
  positions_ = arange(static_cast<double>(model_.cfg.block_size), ids);
  if (dev.is_cpu()) return;
  // Once eagerly (at position 0, which the first token overwrites): loads
  // the kernels and sizes the allocator's blocks; then the capture.
  run_step();
  graph_.capture(dev, [&] { logits_ = run_step(); });
}

bool GraphedDecoder::current() const {
  std::vector<const void*> now;
  for (const Tensor& p : model_.parameters()) now.push_back(p.data_ptr());
  return now == params_;
}

Tensor GraphedDecoder::run_step() {
  const int64_t B = batch_;
  const Tensor tokens = in_.narrow(0, 0, B).reshape({B, 1}), pos = in_.narrow(0, B, 1);
  // wte rows (B, 1, E) plus wpe's row at the device position (1, E).
  Tensor x = model_.drop->forward(add(model_.wte->forward(tokens), model_.wpe->forward(pos)));
  const int64_t L = model_.cfg.block_size;
  const Tensor write = eq(positions_, pos).reshape({1, L, 1}), after = gt(positions_, pos).reshape({1, 1, 1, L});
  for (size_t i = 0; i < model_.h->size(); ++i) {
    GPTBlock& b = model_.h->at<GPTBlock>(i);
    const Tensor y = add(x, attention_step(*b.attn, b.ln_1->forward(x), cache_.k[i], cache_.v[i], write, after));
    x = add(y, b.mlp->forward(b.ln_2->forward(y)));
  }
  return linear(model_.ln_f->forward(x), model_.wte->weight);
}

Tensor GraphedDecoder::prefill(const Tensor& idx) {
  EMBER_CHECK(idx.dim() == 2 && idx.size(0) == batch_, ShapeError, "GraphedDecoder::prefill: expected (", batch_,
              ", T) token ids, got ", idx.shape().str());
  return model_.forward_cached(idx, cache_);
}

Tensor GraphedDecoder::step(const std::vector<int64_t>& tokens) {
  check_no_autocast(model_.wte->weight.device(), "step");
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
