// multi_head_attention's fused path on device "cuda" in bfloat16 and
// float16: the bidirectional tensor-core forward and backward
// (cuda/attention.cu) against the float64 CPU op on the same 16-bit values,
// at lengths that are and are not multiples of the 64-row tiles, more or
// fewer queries than keys, several heads and batch entries, head dims 64
// and 128, dropout (the CPU's draws), the composed path for what the
// kernels do not take, and a ViT-like encoder layer step under bfloat16
// autocast. The profiler shows which path ran. Linked into the emulated
// test binary and into ember_gpu_tests (real CUDA), where it skips without
// a GPU. Shapes stay small: the emulator runs every CUDA thread as a fiber.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <ember/ember.h>

#include "attention_tc_cases.h"
#include "test_util.h"

using namespace ember;

using namespace ember::attention_tc_test;

TEST_CASE("cuda tensor-core bidirectional attention: bfloat16 and float16 match float64 at ragged lengths") {
  if (!test::cuda_usable()) return;
  // One query and key; one partial tile; a full tile and a partial one;
  // three tiles each way (130 = 2 * 64 + 2); fewer and more queries than
  // keys; several heads and batch entries; head dim 128.
  const std::vector<Case> cases = {{1, 1, 1, 2, 64},     {2, 17, 17, 2, 64}, {1, 65, 65, 2, 64},
                                   {1, 130, 130, 1, 64}, {2, 17, 70, 2, 64}, {1, 70, 9, 1, 128}};
  for (const Case& c : cases)
    for (const DType half : {kBFloat16, kFloat16}) check_case(c, half, 0.0, false);
}

TEST_CASE(
    "cuda tensor-core bidirectional attention: rows on 16 bytes (cp.async staging, double-buffered at head dim 64) "
    "match float64") {
  if (!test::cuda_usable()) return;
  // Packed and separate inputs whose rows start on 16 bytes, so every tile
  // is staged by cp.async: one query, several key tiles at both head dims
  // (two buffers at 64, one at 128), ragged tails; dropout once.
  const std::vector<Case> cases = {{2, 17, 17, 2, 64}, {1, 130, 130, 1, 128}, {2, 17, 140, 2, 64}, {1, 70, 9, 1, 128}};
  for (const Case& c : cases)
    for (const DType half : {kBFloat16, kFloat16}) check_case(c, half, 0.0, false, true);
  check_case({1, 70, 70, 2, 64}, kBFloat16, 0.25, false, true);
}

TEST_CASE("cuda tensor-core bidirectional attention: dropout drops the CPU's weights, forward and backward") {
  if (!test::cuda_usable()) return;
  check_case({1, 70, 70, 2, 64}, kBFloat16, 0.25, false);
  check_case({2, 9, 75, 1, 64}, kFloat16, 0.25, false);
}

TEST_CASE("cuda tensor-core bidirectional attention: masks, other head dims and float32 take the composed path") {
  if (!test::cuda_usable()) return;
  Generator gen(5);
  const Tensor x = randn({2, 5, 3 * 2 * 64}, TensorOptions(kFloat32), &gen).to(kBFloat16);
  const Tensor mask = causal_attention_mask(5, 5, kCPU);  // any bool mask
  const Tensor y = randn({2, 5, 3 * 2 * 32}, TensorOptions(kFloat32), &gen).to(kBFloat16);
  struct Fallback {
    Tensor qkv, mask;
    DType dt;
  };
  for (const Fallback& f : {Fallback{x, mask, kBFloat16}, Fallback{y, Tensor(), kBFloat16},  // a mask; head dim 32
                            Fallback{x, Tensor(), kFloat32}}) {                              // float32
    CAPTURE(dtype_name(f.dt));
    profiler::reset();
    Tensor out;
    {
      profiler::Guard guard;
      out = multi_head_self_attention(f.qkv.to(f.dt).to(kCuda), 2, f.mask.defined() ? f.mask.to(kCuda) : Tensor());
    }
    CHECK(seen("softmax"));
    CHECK(out.dtype() == f.dt);
    CHECK(rel_diff(out, multi_head_self_attention(f.qkv.to(kFloat64), 2, f.mask)) < 2e-2);
  }
}

TEST_CASE("cuda tensor-core bidirectional attention: a ViT-like encoder layer step under bfloat16 autocast runs it") {
  if (!test::cuda_usable()) return;
  // A pre-norm GELU layer of two heads of 64 over 17 tokens (a 4 x 4 patch
  // grid and [CLS]): autocast's bfloat16 in_proj output goes to the fused
  // kernels, forward and backward.
  nn::TransformerEncoderLayerOptions o;
  o.d_model = 128;
  o.nhead = 2;
  o.dim_feedforward = 64;
  o.dropout = 0.0;
  o.activation = "gelu";
  o.batch_first = true;
  o.norm_first = true;
  manual_seed(11);
  nn::TransformerEncoderLayer cpu_layer(o), dev_layer(o);
  dev_layer.load_state_dict(cpu_layer.state_dict());
  dev_layer.to(kCuda);
  Generator gen(6);
  const Tensor src = randn({2, 17, 128}, TensorOptions(kFloat32), &gen);
  const Tensor w = randn({2, 17, 128}, TensorOptions(kFloat32), &gen);
  const Tensor want = cpu_layer.forward(src);
  profiler::reset();
  Tensor got;
  {
    profiler::Guard guard;
    AutocastGuard autocast(DeviceType::CUDA, kBFloat16);
    got = dev_layer.forward(src.to(kCuda));
    sum(mul(got, w.to(kCuda))).backward();
  }
  CHECK(seen("multi_head_attention_backward"));
  CHECK_FALSE(seen("softmax"));
  CHECK(rel_diff(got, want) < 3e-2);
  sum(mul(want, w)).backward();
  auto in_proj_grad = [](const nn::TransformerEncoderLayer& m) {
    for (const auto& [name, p] : m.named_parameters())
      if (name.find("in_proj_weight") != std::string::npos) return p.grad();
    return Tensor();
  };
  REQUIRE(in_proj_grad(cpu_layer).defined());
  CHECK(rel_diff(in_proj_grad(dev_layer), in_proj_grad(cpu_layer)) < 5e-2);
}
