/// \file
/// GPT decoding one token per step with fixed shapes, so that on CUDA the
/// whole step is captured once as a CUDA graph (core/cuda_graph.h) and each
/// token costs one host-to-device copy, one graph launch and the logits'
/// read-back instead of hundreds of kernel launches.
///
/// \code
///   nn::GraphedDecoder dec(model, 1);       // captures the step (CUDA), or runs it eagerly (CPU)
///   Tensor logits = dec.prefill(prompt);    // (1, T) ids, eager: the prompt at once
///   for (...) logits = dec.step({next});    // (1, 1, vocab): one token at position dec.len()
/// \endcode
///
/// Why the step differs from GPT::forward_cached: a graph replays fixed
/// shapes and fixed launch arguments, while forward_cached narrows the
/// cache to len + 1 positions and builds the position index with a host
/// copy (arange), both of which change every token. Here the step reads
/// the token ids and the position from one static device buffer (written
/// before each replay) and every op that depends on the position reads it
/// there: wpe's row is looked up by that device index; the new key and
/// value go into the cache with one index_copy_ (ops/indexing.h) per layer,
/// which writes that one row of a layer's (batch, block_size, 2 n_embd)
/// key-and-value tensor and reads nothing else of it; and the query attends
/// over keys 0 .. position only with kv_cache_attention
/// (ops/kv_cache_attention.h), which reads the position on the device, so a
/// token's attention costs its position's keys, not block_size's. Scores
/// and softmax run in float32 (float64 for a float64 model); the logits
/// equal forward_cached's to float rounding, not bit for bit (its attention
/// is another kernel).
///
/// Precision: built inside a 16-bit autocast region (the gpt app's
/// --precision bf16) on a float32 model, the decoder runs the step as
/// autocast runs forward_cached there, with the casts made once: the
/// weights of the GEMMs (c_attn, c_proj, c_fc, the MLP's c_proj and the
/// tied head) are kept as 16-bit copies (what autocast's cast gives,
/// made at construction), the cache is 16-bit, the residual stream,
/// embeddings and LayerNorms stay float32, attention computes in float32,
/// and the logits come out 16-bit, as under autocast. Outside a region the
/// step runs in the model's dtype on its own parameters.
#pragma once

#include <ember/core/cuda_graph.h>
#include <ember/nn/gpt.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ember::nn {

class GraphedDecoder {
 public:
  /// A decoder for batch rows of model (in eval mode, without gradients),
  /// in the model's dtype, or, inside a bfloat16 or float16 autocast region
  /// on the model's device over a float32 model, as that region would run
  /// it (the file comment; another model dtype there is a ValueError).
  /// step must then be called in the same region. On CUDA the step is run once
  /// eagerly (loading its kernels) and captured; a capture the graph cannot
  /// hold throws DeviceError. On the CPU the same step runs eagerly.
  /// model must outlive the decoder and keep its parameters' memory.
  GraphedDecoder(GPT& model, int64_t batch);
  /// idx (batch, T) int64: the next T positions through GPT::forward_cached
  /// (eager, any T); their logits (batch, T, vocab_size). In the
  /// constructor's autocast region (ValueError otherwise).
  Tensor prefill(const Tensor& idx);
  /// One token per row at position len(); its logits (batch, 1, vocab_size),
  /// the step's own tensor, overwritten by the next step (clone to keep).
  /// Throws ValueError for a wrong count, a token outside the vocabulary, or
  /// an autocast region other than the constructor's (matches_autocast()),
  /// ShapeError when len() has reached block_size.
  Tensor step(const std::vector<int64_t>& tokens);
  /// Positions filled.
  int64_t len() const { return cache_.len; }
  /// Starts over at position 0 (the step reads no key past its position).
  void reset() { cache_.len = 0; }
  /// Whether the step is a CUDA graph.
  bool graphed() const { return graph_.captured(); }
  /// Launches the captured step holds (0 on the CPU). A step on CUDA issues
  /// four whatever the depth: the input copy, the graph, the read-back of
  /// the graph's index-check record (the embeddings), and the caller's
  /// read-back of the logits.
  int64_t captured_launches() const { return graph_.captured_launches(); }
  /// Rows per step.
  int64_t batch() const { return batch_; }
  /// Whether the step still reads model's parameters: false once they were
  /// replaced (moved to another device or dtype), or, for a decoder with
  /// 16-bit copies of them, written in place since (a load, an optimizer
  /// step): then a new decoder is needed.
  bool current() const;
  /// Whether this thread's autocast state on the model's device is the one
  /// the decoder was built in (off, or the same 16-bit dtype).
  bool matches_autocast() const;
  /// The dtype the GEMMs and the cache run in: the model's, or the
  /// autocast region's.
  DType dtype() const { return dtype_; }

 private:
  Tensor run_step();  // the step's device work, on the static tensors

  // One block's GEMM weights in the step's dtype: the parameters
  // themselves, or their 16-bit copies under autocast.
  struct BlockWeights {
    Tensor attn_w, attn_b, proj_w, proj_b, fc_w, fc_b, mlp_w, mlp_b;
  };

  GPT& model_;
  int64_t batch_;
  std::optional<DType> region_;  // the autocast dtype it was built under, if any
  DType dtype_;
  std::vector<BlockWeights> blocks_;
  Tensor head_w_;                    // wte.weight in dtype_ (the tied head)
  std::vector<Tensor> kv_;           // per layer (batch, block_size, 2 n_embd): keys, then values
  KVCache cache_;                    // views of kv_: k = [..., :E], v = [..., E:]
  Tensor in_;                        // (batch + 1) int64: the tokens, then the position
  Tensor logits_;                    // the captured step's output
  std::vector<const void*> params_;  // the parameters' memory the step reads
  std::vector<uint64_t> versions_;   // their versions, when dtype_'s copies were made of them
  CudaGraph graph_;
};

}  // namespace ember::nn
