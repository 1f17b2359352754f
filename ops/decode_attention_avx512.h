/// \file
/// The inner loop of causal attention's decoding path (ops/causal_attention.cpp,
/// a few query rows against a long KV cache) in AVX-512: one query row of a
/// group of heads against every visible key, float32 arithmetic on float32
/// or bfloat16 keys and values.
///
/// Why its own kernel: at batch 1 a decoding step reads the whole KV cache
/// once per layer and does 4 flops per element it reads, so its speed is the
/// memory bandwidth, provided the loads run ahead of the arithmetic. Plain
/// loops (one dot product per key and head, each ending in a 16-step
/// horizontal sum, threads split by heads) read the cache at a fifth of the
/// bandwidth: the sums serialise, and each thread reads every row in pieces,
/// which the prefetchers follow badly. Here:
///  - the caller gives each thread a contiguous range of keys with all the
///    heads (and merges the ranges' softmaxes), and the keys go in address
///    order, so every thread streams one contiguous piece of the cache;
///  - scores: each (key, head) dot product stays a vector of partial sums in
///    L1 until 16 keys are done; then a transpose tree reduces the 16
///    vectors to one vector of 16 scores (15 shuffle/add steps, not 16 x 15);
///  - softmax: the row max, exp and sum in vectors (fast::expf_nonpos);
///  - P V: the heads' outputs stay in L1 across the keys.
/// Measured on GPT-2 124M's cache at context 1024 (12 layers, 75 MB in
/// float32), docs/PERFORMANCE.md has the figures.
#pragma once

#include <cstdint>

namespace ember::cpu {

/// Causal attention of L <= a few query rows against S > L keys, bottom-right
/// aligned (row i sees keys 0 .. i + S - L), no dropout. q, k, v, out all
/// float32 or all bfloat16; element (n, row r, head h, d) of q at
/// q + n qs0 + r qs1 + h D + d (k, v likewise); out (N, L, H D) contiguous.
struct DecodeAttention {
  const void *q, *k, *v;
  bool bf16;  ///< the arrays hold bfloat16 (else float32)
  int64_t qs0, qs1, ks0, ks1, vs0, vs1;
  int64_t N, H, L, S, D;
  float scale;  ///< the scores are scale q . k
  void* out;
  float* lse;  ///< (N, H, L) row log-sum-exps of the scores, or null
};

/// True when decode_attention runs this shape: an AVX-512 build, D a
/// multiple of 16 up to 128, at most 64 heads, S >= 1.
bool decode_attention_supported(int64_t H, int64_t D, int64_t S);

/// Runs it on Ember's pool (the caller checked decode_attention_supported).
void decode_attention(const DecodeAttention& a);

}  // namespace ember::cpu
