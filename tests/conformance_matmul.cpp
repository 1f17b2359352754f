// Conformance rows: matmul in all its 1-D / 2-D / batched forms, mm, bmm,
// linear, linear_gelu and linear_dropout_add, and multi-head attention (ops/attention.h), which
// is made of GEMMs.
// GEMMs sum k products, so float32 tolerances are looser.
#include "conformance.h"

namespace conformance {
using namespace ember;
namespace {

OpCase gemm(OpCase c) {
  c.fwd_rtol = 1e-4;
  c.bwd_rtol = 1e-4;
  return c;
}

Register rows({
    gemm({"mm", {F({3, 4}), F({4, 5})}, [](const In& x) { return mm(x[0], x[1]); }}),
    gemm({"matmul 2-D @ 2-D", {F({4, 3}), F({3, 2})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 1-D @ 1-D", {F({5}), F({5})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 1-D @ 2-D", {F({4}), F({4, 3})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 2-D @ 1-D", {F({3, 4}), F({4})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 1-D @ 3-D", {F({4}), F({2, 4, 3})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 3-D @ 1-D", {F({2, 3, 4}), F({4})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 3-D @ 2-D", {F({2, 3, 4}), F({4, 5})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul 2-D @ 3-D", {F({3, 4}), F({2, 4, 5})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"matmul batched broadcast", {F({2, 1, 3, 4}), F({3, 4, 2})}, [](const In& x) { return matmul(x[0], x[1]); }}),
    gemm({"bmm", {F({2, 3, 4}), F({2, 4, 3})}, [](const In& x) { return bmm(x[0], x[1]); }}),
    gemm({"linear", {F({2, 3, 4}), F({5, 4}), F({5})}, [](const In& x) { return linear(x[0], x[1], x[2]); }}),
    gemm({"linear no bias", {F({3, 4}), F({2, 4})}, [](const In& x) { return linear(x[0], x[1]); }}),
    gemm({"linear 1-D input", {F({4}), F({3, 4}), F({3})}, [](const In& x) { return linear(x[0], x[1], x[2]); }}),
    // The fused CUDA kernels: 7 x 3 rows, and an odd width with no bias.
    gemm({"linear_gelu", {F({7, 3, 4}), F({5, 4}), F({5})}, [](const In& x) { return linear_gelu(x[0], x[1], x[2]); }}),
    gemm({"linear_gelu tanh, no bias",
          {F({3, 4}), F({7, 4})},
          [](const In& x) { return linear_gelu(x[0], x[1], Tensor(), GeluApproximation::Tanh); }}),
    // The residual branch's end: the fused CUDA kernels with a dropout mask
    // (drawn from a seeded generator: the same mask on every device and in
    // each of the row's runs), and without one over an odd width, no bias.
    gemm({"linear_dropout_add",
          {F({7, 3, 4}), F({5, 4}), F({5}), F({7, 3, 5})},
          [](const In& x) {
            Generator g(3);
            return linear_dropout_add(x[0], x[1], x[2], x[3], 0.3, true, &g);
          }}),
    gemm({"linear_dropout_add eval, no bias",
          {F({3, 4}), F({7, 4}), F({3, 7})},
          [](const In& x) { return linear_dropout_add(x[0], x[1], Tensor(), x[2], 0.3, false); }}),
    // Attention as one op: its GEMMs read and write per-head strided views.
    gemm({"multi_head_attention",
          {F({2, 3, 4}), F({2, 5, 4}), F({2, 5, 4})},
          [](const In& x) { return multi_head_attention(x[0], x[1], x[2], 2); }}),
    gemm({"multi_head_attention bool mask, dropout",
          {F({2, 3, 4}), F({2, 5, 4}), F({2, 5, 4}), B({2, 1, 1, 5})},
          [](const In& x) {
            Generator g(5);
            return multi_head_attention(x[0], x[1], x[2], 2, x[3], 0.3, &g);
          }}),
    gemm(
        {"multi_head_self_attention", {F({2, 4, 12})}, [](const In& x) { return multi_head_self_attention(x[0], 2); }}),
    gemm({"multi_head_self_attention causal, dropout",
          {F({2, 4, 18})},
          [](const In& x) {
            Generator g(7);
            return multi_head_self_attention(x[0], 3, causal_mask(4, 4, x[0].device()), 0.3, &g);
          }}),
    // 32-64 keys without a mask: the fused CPU kernel (float32 and bfloat16;
    // float64, which the gradcheck runs, takes the composed path).
    gemm({"multi_head_self_attention fused shape, dropout",
          {F({2, 33, 12})},
          [](const In& x) {
            Generator g(11);
            return multi_head_self_attention(x[0], 2, Tensor(), 0.2, &g);
          }}),
    // Causal attention (ops/causal_attention.h): the fused FlashAttention
    // kernels on the CPU and on CUDA (cuda/causal_attention.cu), compared
    // with each other on "cuda"; bfloat16/float16 take the composed path.
    gemm({"causal_self_attention with dropout",
          {F({2, 5, 12})},
          [](const In& x) {
            Generator g(7);
            return causal_self_attention(x[0], 2, 0.3, &g);
          }}),
    gemm({"causal_attention with fewer queries than keys",
          {F({2, 3, 4}), F({2, 5, 4}), F({2, 5, 4})},
          [](const In& x) { return causal_attention(x[0], x[1], x[2], 2); }}),
    // Past one CUDA query tile (16 rows in float32) with a ragged tail,
    // three heads; and one query against two key tiles (32 keys each).
    gemm({"causal_self_attention ragged query tiles, dropout",
          {F({1, 19, 9})},
          [](const In& x) {
            Generator g(3);
            return causal_self_attention(x[0], 3, 0.2, &g);
          }}),
    gemm({"causal_attention one query, two key tiles",
          {F({2, 1, 4}), F({2, 35, 4}), F({2, 35, 4})},
          [](const In& x) { return causal_attention(x[0], x[1], x[2], 2); }}),
    // One query per row against a KV cache up to a position per row
    // (ops/kv_cache_attention.h): inference only, so no gradcheck; row 0
    // past one warp's 32-key tile on CUDA.
    {"kv_cache_attention per-row positions",
     {C({2, 1, 8}), C({2, 40, 8}), C({2, 40, 8}), I({2}, 0, 40)},
     [](const In& x) { return kv_cache_attention(x[0], x[1], x[2], x[3], 2); },
     false},
});

}  // namespace
}  // namespace conformance
