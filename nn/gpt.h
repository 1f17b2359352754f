/// \file
/// A decoder-only language model (GPT-2 / nanoGPT): token and learned
/// position embeddings, N pre-norm blocks of causal self-attention and a
/// GELU MLP, a final LayerNorm and a language-model head tied to the token
/// embedding; a per-layer KV cache and sampling (generate).
///
/// Parameter names follow GPT-2's safetensors layout: wte.weight,
/// wpe.weight, h.N.ln_1.*, h.N.attn.c_attn.*, h.N.attn.c_proj.*, h.N.ln_2.*,
/// h.N.mlp.c_fc.*, h.N.mlp.c_proj.*, ln_f.*. Where they differ from GPT-2's
/// files: the projections are nn::Linear, whose weight is (out, in) as in
/// PyTorch's nn.Linear and nanoGPT, where GPT-2's Conv1D stores (in, out)
/// (transpose them to load GPT-2 weights); and there is no separate
/// lm_head.weight: the head is wte.weight itself (one parameter, as GPT-2
/// ties them), so the state dict holds it once. With bias = false every
/// Linear and LayerNorm goes without its bias (nanoGPT's option).
#pragma once

#include <ember/core/random.h>
#include <ember/nn/layers.h>
#include <ember/nn/module.h>
#include <ember/ops/activation.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ember::nn {

class GraphedDecoder;

/// The model's sizes (nanoGPT's GPTConfig names).
struct GPTConfig {
  int64_t vocab_size = 65;  ///< tokens
  int64_t block_size = 64;  ///< the longest context (rows of wpe)
  int64_t n_layer = 4;      ///< blocks
  int64_t n_head = 4;       ///< attention heads per block
  int64_t n_embd = 128;     ///< width
  double dropout = 0.0;     ///< on the embeddings, the attention weights and each residual branch
  bool bias = true;         ///< biases in the Linears and LayerNorms
  /// The MLP's GELU: exact (erf), nanoGPT's nn.GELU(); GPT-2's checkpoints
  /// say "gelu_new", the tanh form (GeluApproximation::Tanh).
  GeluApproximation gelu = GeluApproximation::None;
  double layer_norm_eps = 1e-5;  ///< added to the variance in every LayerNorm (GPT-2's layer_norm_epsilon)
};

/// Keys and values of every layer for incremental decoding: per layer two
/// (batch, block_size, n_embd) tensors allocated once; the first len
/// positions hold the tokens seen so far.
struct KVCache {
  std::vector<Tensor> k, v;  ///< per layer
  int64_t len = 0;           ///< positions filled
};

/// Causal self-attention: c_attn (E -> 3E, [q | k | v]), the fused causal
/// attention op (ops/causal_attention.h), c_proj (E -> E), dropout.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& cfg);
  Tensor forward(const Tensor& x) override;  ///< (B, T, E) -> (B, T, E)
  /// add(residual, forward(x)), c_proj, its dropout and the add as one op
  /// (Linear::forward_dropout_add): the block's residual step.
  Tensor forward_residual(const Tensor& x, const Tensor& residual);
  /// x: the new positions (B, t, E); appends their keys and values to the
  /// layer's cache tensors at [len, len + t) and attends over [0, len + t).
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t len);
  std::string type_name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<Linear> c_attn, c_proj;  ///< the projections
  std::shared_ptr<Dropout> resid_dropout;  ///< on c_proj's output
  int64_t n_head;                          ///< heads
  double attn_dropout;                     ///< on the attention weights

 private:
  Tensor attend(const Tensor& x);  // c_attn and the attention, before c_proj
};

/// The block's MLP: c_fc (E -> 4E), GELU (GPTConfig::gelu), c_proj (4E -> E), dropout.
class GPTMLP : public Module {
 public:
  GPTMLP(const GPTConfig& cfg);
  Tensor forward(const Tensor& x) override;
  /// add(residual, forward(x)), c_proj, dropout and the add as one op
  /// (Linear::forward_dropout_add): the block's residual step.
  Tensor forward_residual(const Tensor& x, const Tensor& residual);
  std::string type_name() const override { return "GPTMLP"; }
  std::shared_ptr<Linear> c_fc, c_proj;  ///< the projections
  std::shared_ptr<Dropout> dropout;      ///< on the output
  GeluApproximation gelu;                ///< the GELU's form
};

/// x + attn(ln_1(x)), then + mlp(ln_2(x)).
class GPTBlock : public Module {
 public:
  GPTBlock(const GPTConfig& cfg);
  Tensor forward(const Tensor& x) override;
  /// The same with the attention reading and extending a layer's KV cache.
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t len);
  std::string type_name() const override { return "GPTBlock"; }
  std::shared_ptr<LayerNorm> ln_1, ln_2;      ///< pre-norms
  std::shared_ptr<CausalSelfAttention> attn;  ///< the attention
  std::shared_ptr<GPTMLP> mlp;                ///< the MLP
};

/// How generate samples the next token.
struct SampleOptions {
  double temperature = 1.0;  ///< logits / temperature; 0: greedy (argmax)
  int64_t top_k = 0;         ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;        ///< keep the fewest most likely tokens whose probability reaches top_p (1: all)
  uint64_t seed = 1337;      ///< the sampler's generator
  bool use_cache = true;     ///< the KV cache; false recomputes the whole context for every token
  /// With the cache: each new token through GraphedDecoder (nn/gpt_decode.h),
  /// one CUDA graph launch per token on CUDA (its fixed-shape step eagerly on
  /// the CPU); the logits agree with the eager cache's to float rounding.
  /// Inside a 16-bit autocast region the decoder runs the step as the region
  /// would (16-bit copies of the GEMM weights, a 16-bit cache). The model
  /// keeps the decoder (its capture) for later calls with the same region.
  bool cuda_graph = false;
};

/// The model. Initialised as GPT-2 and nanoGPT: every Linear and Embedding
/// weight from N(0, 0.02), biases zero, LayerNorms ones and zeros, and the
/// residual projections (attn.c_proj, mlp.c_proj) from N(0, 0.02 / sqrt(2
/// n_layer)), drawn from gen (default_generator() when null).
class GPT : public Module {
 public:
  explicit GPT(GPTConfig cfg, Generator* gen = nullptr);
  /// idx (B, T) int64 token ids, T <= block_size -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& idx) override;
  /// Mean cross-entropy of forward(idx) against targets (B, T).
  Tensor loss(const Tensor& idx, const Tensor& targets);
  /// A cache for batch rows, allocated to block_size positions.
  KVCache make_cache(int64_t batch) const;
  /// idx (B, t): the next t positions after the cache's len; their logits
  /// (B, t, vocab_size). Throws when len + t passes block_size. No graph.
  Tensor forward_cached(const Tensor& idx, KVCache& cache);
  /// The prompt followed by max_new_tokens sampled tokens (nanoGPT's
  /// generate: the context is the last block_size tokens). With the cache,
  /// each token costs one position's work until the context is full; then
  /// each step re-encodes the last block_size tokens, as without it, so both
  /// give the same tokens for the same seed. Runs in eval mode; on CUDA without
  /// a graph unless SampleOptions::cuda_graph.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                const SampleOptions& opts = {});
  /// The attention weights (B, n_head, T, T) of block layer for idx (B, T),
  /// without dropout (for pictures; composed ops, no graph).
  Tensor attention_weights(const Tensor& idx, int64_t layer);
  std::string type_name() const override { return "GPT"; }
  /// Every parameter element, as for any Module (the tied head counted once).
  using Module::num_parameters;
  /// Parameters without the position embedding wpe: nanoGPT's
  /// get_num_params(non_embedding=True), the count its logs report.
  int64_t num_parameters_non_embedding() const;
  /// nanoGPT's get_num_params with its argument spelled out: the
  /// non-embedding count when true, every parameter when false. No default,
  /// so that num_parameters() means the same on a GPT as on any Module.
  int64_t num_parameters(bool non_embedding) const {
    return non_embedding ? num_parameters_non_embedding() : num_parameters();
  }

  GPTConfig cfg;                        ///< the sizes
  std::shared_ptr<Embedding> wte, wpe;  ///< token and position embeddings; wte.weight is also the head
  std::shared_ptr<Dropout> drop;        ///< on the summed embeddings
  std::shared_ptr<ModuleList> h;        ///< the blocks
  std::shared_ptr<LayerNorm> ln_f;      ///< the final norm

 private:
  Tensor embed(const Tensor& idx, int64_t pos0);
  Tensor head(const Tensor& x);
  // generate's graphed step (SampleOptions::cuda_graph), captured once and
  // kept while it reads the current parameters.
  std::shared_ptr<GraphedDecoder> decoder_;
};

/// The index of the next token from one row of logits (SampleOptions: greedy
/// at temperature 0, else temperature, top-k, top-p, then one draw u in [0,
/// 1) against the cumulative probabilities). A NaN logit ranks after every
/// number and is never drawn while a number is left; +inf logits share all
/// the probability; a row of only NaN or only -inf gives its first token.
int64_t sample_token(const std::vector<double>& logits, const SampleOptions& opts, double u);

}  // namespace ember::nn
