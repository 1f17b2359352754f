// multi_head_attention's fused fast path on CUDA (the tables of
// ops/attention_fused.h; the op and when it takes them: ops/attention.cpp):
// bidirectional attention for bfloat16 and float16 at head dims 64 and 128,
// on the tensor-core kernels the causal op runs (cuda/causal_attention_tc.cu,
// _tc_bwd.cu) with the causal band switched off: every query sees all S
// keys, L and S any lengths. Dropout draws the same Philox words as the
// composed path and the CPU kernel; nothing of size L x S is written.
#include <ember/core/dispatch.h>
#include <ember/core/error.h>
#include <ember/ops/attention_fused.h>
#include <ember/ops/causal_attention.h>
#include <ember/cuda/attention_tc.cuh>

namespace ember::cuda {
namespace {

void check(const char* what, const Tensor& q, int64_t heads) {
  const int64_t D = q.size(2) / heads;
  EMBER_CHECK(detail::cuda_causal_tensor_core(q.dtype(), D), ValueError, what,
              " (cuda tensor cores): takes bfloat16 or float16 with head dim 64 or 128, got ", dtype_name(q.dtype()),
              " with head dim ", D);
}

void cuda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const detail::FusedAttentionParams& fp,
                            Tensor& out, Tensor& lse) {
  check("multi_head_attention", q, fp.heads);
  EMBER_CHECK(lse.dtype() == DType::Float32, ValueError,
              "multi_head_attention (cuda tensor cores): the log-sum-exp must be float32, got ",
              dtype_name(lse.dtype()));
  attention_tc::forward(q, k, v, attention_tc::make_geom(q, k, v, fp, false), out, lse);
}

void cuda_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const detail::FusedAttentionParams& fp, Tensor& dq, Tensor& dk,
                             Tensor& dv) {
  check("multi_head_attention backward", q, fp.heads);
  attention_tc::backward(g.dtype() == q.dtype() ? g : g.to(q.dtype()), q, k, v, out, lse,
                         attention_tc::make_geom(q, k, v, fp, false), dq, dk, dv);
}

}  // namespace

EMBER_REGISTER_KERNEL(detail::attention_forward_kernel, CUDA, cuda_attention_forward);
EMBER_REGISTER_KERNEL(detail::attention_backward_kernel, CUDA, cuda_attention_backward);

}  // namespace ember::cuda
