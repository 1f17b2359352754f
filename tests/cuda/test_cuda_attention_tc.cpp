// Causal attention in bfloat16 and float16 on device "cuda": the
// tensor-core forward and backward (cuda/causal_attention_tc.cu, _tc_bwd.cu)
// against the float64 CPU op on the same 16-bit values; lengths that are
// and are not multiples of the 64-row tiles, several heads, head dims 64
// and 128, fewer queries than keys, dropout (the CPU's mask), gradients
// asked for alone, and a GPT step under bfloat16 autocast. The profiler
// shows the fused path ran, not the composed one. Linked into the emulated test binary and into
// ember_gpu_tests (real CUDA), where it skips with a message on a machine
// without a GPU. Shapes stay small: the emulator runs every CUDA thread as
// a fiber.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <ember/ember.h>

#include "attention_tc_cases.h"
#include "test_util.h"

using namespace ember;

using namespace ember::attention_tc_test;

TEST_CASE("cuda tensor-core attention: bfloat16 and float16 match float64 at ragged lengths, head dims 64 and 128") {
  if (!test::cuda_usable()) return;
  // One query; one partial tile; exactly one tile; a full tile and a
  // partial one; three query tiles and three key tiles (130 = 2 * 64 + 2),
  // with several heads and batch entries; fewer queries than keys.
  const std::vector<Case> cases = {{1, 1, 1, 2, 64},     {2, 17, 17, 2, 64},    {1, 64, 64, 1, 128},
                                   {1, 100, 100, 2, 64}, {1, 130, 130, 1, 128}, {1, 17, 100, 2, 64}};
  for (const Case& c : cases)
    for (const DType half : {kBFloat16, kFloat16}) check_case(c, half, 0.0, true);
}

TEST_CASE(
    "cuda tensor-core attention: rows on 16 bytes (cp.async staging, double-buffered at head dim 64) match float64") {
  if (!test::cuda_usable()) return;
  // Packed and separate inputs whose rows start on 16 bytes, so every tile
  // is staged by cp.async: one query, several key tiles at both head dims
  // (two buffers at 64, one at 128), ragged tails; dropout once.
  const std::vector<Case> cases = {{1, 1, 1, 2, 64}, {1, 130, 130, 1, 128}, {1, 100, 100, 2, 64}, {1, 17, 150, 2, 64}};
  for (const Case& c : cases)
    for (const DType half : {kBFloat16, kFloat16}) check_case(c, half, 0.0, true, true);
  check_case({1, 70, 70, 2, 64}, kBFloat16, 0.25, true, true);
}

TEST_CASE("cuda tensor-core attention: dropout drops the CPU's weights, forward and backward") {
  if (!test::cuda_usable()) return;
  check_case({1, 70, 70, 2, 64}, kBFloat16, 0.25, true);
  check_case({1, 9, 75, 1, 128}, kFloat16, 0.25, true);
}

TEST_CASE("cuda tensor-core attention: only the gradients asked for, and other head dims take the composed path") {
  if (!test::cuda_usable()) return;
  Generator gen(3);
  // dv alone (q and k frozen): the dK/dV kernel without dQ; dq alone: no dK/dV kernel.
  const Tensor q = randn({1, 20, 128}, TensorOptions(kFloat32), &gen).to(kBFloat16),
               k = randn({1, 30, 128}, TensorOptions(kFloat32), &gen).to(kBFloat16),
               v = randn({1, 30, 128}, TensorOptions(kFloat32), &gen).to(kBFloat16);
  const Tensor vd = v.to(kCuda).requires_grad_(), vh = v.to(kFloat64).requires_grad_();
  sum(causal_attention(q.to(kCuda), k.to(kCuda), vd, 2)).backward();
  sum(causal_attention(q.to(kFloat64), k.to(kFloat64), vh, 2)).backward();
  CHECK(rel_diff(vd.grad(), vh.grad()) < 2e-2);
  const Tensor qd = q.to(kCuda).requires_grad_(), qh = q.to(kFloat64).requires_grad_();
  sum(mul(causal_attention(qd, k.to(kCuda), v.to(kCuda), 2), v.narrow(1, 0, 20).to(kCuda))).backward();
  sum(mul(causal_attention(qh, k.to(kFloat64), v.to(kFloat64), 2), v.narrow(1, 0, 20).to(kFloat64))).backward();
  CHECK(rel_diff(qd.grad(), qh.grad()) < 2e-2);
  // Head dim 32 in bfloat16: the composed attention.
  const Tensor x = randn({1, 5, 3 * 2 * 32}, TensorOptions(kFloat32), &gen).to(kBFloat16);
  profiler::reset();
  Tensor out;
  {
    profiler::Guard guard;
    out = causal_self_attention(x.to(kCuda), 2);  // head dim 32
  }
  CHECK(seen("softmax"));
  CHECK(rel_diff(out, causal_self_attention(x.to(kFloat64), 2)) < 2e-2);
}

TEST_CASE("cuda tensor-core attention: a GPT step under bfloat16 autocast runs it, forward and backward") {
  if (!test::cuda_usable()) return;
  // Two heads of 64 (GPT-2's head dim): autocast's bfloat16 c_attn output
  // goes to the fused op, not to the composed attention.
  nn::GPTConfig cfg;
  cfg.vocab_size = 33;
  cfg.block_size = 24;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.n_embd = 128;
  Generator init(9);
  nn::GPT cpu_model(cfg, &init), dev_model(cfg, &init);
  dev_model.load_state_dict(cpu_model.state_dict());
  dev_model.to(kCuda);
  Generator gen(4);
  const Tensor idx = randint(0, cfg.vocab_size, {2, 20}, TensorOptions(kInt64), &gen);
  const Tensor tgt = randint(0, cfg.vocab_size, {2, 20}, TensorOptions(kInt64), &gen);
  const Tensor want = cpu_model.loss(idx, tgt);
  profiler::reset();
  Tensor got;
  {
    profiler::Guard guard;
    AutocastGuard autocast(DeviceType::CUDA, kBFloat16);
    got = dev_model.loss(idx.to(kCuda), tgt.to(kCuda));
    got.backward();
  }
  CHECK(seen("causal_attention"));  // the fused kernels' table
  CHECK(seen("causal_attention_backward"));
  CHECK_FALSE(seen("softmax"));
  CHECK(std::abs(got.item<double>() - want.item<double>()) < 2e-2 * std::abs(want.item<double>()));
  want.backward();
  // The attention's input projection: its gradient went through the fused backward.
  auto c_attn_grad = [](const nn::GPT& m) {
    for (const auto& [name, p] : m.named_parameters())
      if (name.find("attn.c_attn.weight") != std::string::npos) return p.grad();
    return Tensor();
  };
  REQUIRE(c_attn_grad(cpu_model).defined());
  CHECK(rel_diff(c_attn_grad(dev_model), c_attn_grad(cpu_model)) < 5e-2);
}
