/// \file
/// One decoding step's attention: a single new query per row against a KV
/// cache, over the keys up to a position read from device memory, so that a
/// captured CUDA graph (nn/gpt_decode.h) replays it at every position with
/// work proportional to the position, not to the cache's size:
/// \code
///   for row b, head h, with n = pos[b] + 1:
///     s_j = q_bh . k_bjh / sqrt(D)   (j < n);   w = softmax(s);   out_bh = sum_j w_j v_bjh
/// \endcode
/// Scores, softmax and the weighted sum run in float32 (float64 for float64
/// inputs); the result is rounded once to q's dtype. Inference only: it has
/// no backward (decoding needs none), so inputs that require grad are
/// refused while grad mode is on, and there is no float64 gradcheck.
///
/// Kernels: on the CPU the AVX-512 decoding loop of causal attention
/// (ops/decode_attention_avx512.h) for float32 and bfloat16 where it takes
/// the head width, plain loops otherwise; on CUDA (cuda/kv_cache_attention.cu)
/// one launch whose blocks each take a range of one (row, head)'s visible
/// keys, warps on 32-key tiles with an online softmax each, the ranges
/// merged by the last block to finish (head dims up to
/// kKvCacheAttentionCudaMaxHeadDim).
#pragma once

#include <ember/core/dispatch.h>
#include <ember/core/tensor.h>

namespace ember {

/// q (B, 1, E); k_cache and v_cache (B, S, E), E = num_heads * D, all of one
/// floating dtype on one device, any views whose last dim is contiguous; pos
/// int64 on that device with 1 entry (every row) or B entries (one per row),
/// each in [0, S): row b attends over keys 0 .. pos[b]. Returns (B, 1, E) in
/// q's dtype. A position out of range is an IndexError, checked on the host
/// before the kernel runs (a read-back on CUDA); inside a CUDA graph capture
/// the kernel reports it to the graph's error record instead (replay() then
/// throws) and writes zeros for that row.
Tensor kv_cache_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& pos,
                          int64_t num_heads);

/// The widest head the CUDA kernel takes (its shared memory holds one
/// float32 or float64 row of D per warp).
inline constexpr int64_t kKvCacheAttentionCudaMaxHeadDim = 512;

namespace detail {
/// The kernels: q (B, 1, E), k and v (B, S, E) with unit last stride, pos
/// contiguous int64 (1 or B entries, already checked outside a capture);
/// out (B, 1, E) contiguous, of q's dtype.
extern KernelTable<void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos, int64_t heads,
                        Tensor& out)>
    kv_cache_attention_kernel;
}  // namespace detail

}  // namespace ember
