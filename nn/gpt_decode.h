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
/// before each replay), looks up wpe's row by that device index, writes
/// the new key and value into the cache where a position mask computed on
/// the device selects them, and attends over the whole cache of
/// block_size positions with the positions after the current one masked to
/// -inf. The arithmetic is the unfused attention (matmul, masked softmax,
/// matmul) over block_size keys: the logits equal forward_cached's to float
/// rounding, not bit for bit (forward_cached runs the fused attention
/// kernel over len + 1 keys).
#pragma once

#include <ember/core/cuda_graph.h>
#include <ember/nn/gpt.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ember::nn {

class GraphedDecoder {
 public:
  /// A decoder for batch rows of model (in eval mode, without gradients,
  /// in the model's dtype: inside an autocast region it and step throw
  /// ValueError). On CUDA the step is run once
  /// eagerly (loading its kernels) and captured; a capture the graph cannot
  /// hold throws DeviceError. On the CPU the same step runs eagerly.
  /// model must outlive the decoder and keep its parameters' memory.
  GraphedDecoder(GPT& model, int64_t batch);
  /// idx (batch, T) int64: the next T positions through GPT::forward_cached
  /// (eager, any T); their logits (batch, T, vocab_size).
  Tensor prefill(const Tensor& idx);
  /// One token per row at position len(); its logits (batch, 1, vocab_size),
  /// the step's own tensor, overwritten by the next step (clone to keep).
  /// Throws ValueError for a wrong count or a token outside the vocabulary,
  /// ShapeError when len() has reached block_size.
  Tensor step(const std::vector<int64_t>& tokens);
  /// Positions filled.
  int64_t len() const { return cache_.len; }
  /// Starts over at position 0 (the cache's old entries are masked off).
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
  /// replaced (moved to another device or dtype), when a new decoder is needed.
  bool current() const;

 private:
  Tensor run_step();  // the step's device work, on the static tensors

  GPT& model_;
  int64_t batch_;
  KVCache cache_;
  Tensor in_;                        // (batch + 1) int64: the tokens, then the position
  Tensor positions_;                 // (block_size) int64: 0, 1, ..., block_size - 1
  Tensor logits_;                    // the captured step's output
  std::vector<const void*> params_;  // the parameters' memory the step reads
  CudaGraph graph_;
};

}  // namespace ember::nn
