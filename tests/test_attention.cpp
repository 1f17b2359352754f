// Attention layers against PyTorch (tools/reference_attention.py), and the
// shapes and masks of the reference notes.
#include <doctest/doctest.h>

#include <cmath>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_close;

namespace {
// Parameter k (in name order), element i: 0.3 sin(0.5 i + 1.7 k).
void fill(nn::Module& m) { test::fill_parameters(m); }
Tensor inp(const Shape& s, double off) { return test::pattern_input(s, off); }
}  // namespace

TEST_CASE("MultiheadAttention: outputs, weights and gradients match PyTorch") {
  nn::MultiheadAttention mha(8, 2, {0.0, true, 0, 0, /*batch_first=*/true});
  std::vector<std::string> names;
  for (auto& [n, p] : mha.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  fill(mha);
  Tensor x = inp({2, 3, 8}, 0.0).requires_grad_();
  const Tensor kpm = from_vector(std::vector<bool>{false, false, true, false, false, false}, {2, 3});
  auto [out, w] = mha.forward(x, x, x, kpm);
  check_close(out,
              {0.0142304647,  -0.3879873194, -0.0869867947, 0.3343448486,  -0.0638737846, 0.4188864234,  0.4055312743,
               -0.0579598807, 0.0371325101,  -0.4425723711, -0.0385304984, 0.3255836024,  -0.1008766155, 0.4760209984,
               0.3678428043,  -0.0658247997, 0.0095362012,  -0.3785685676, -0.0946055453, 0.3348859923,  -0.0569624642,
               0.4093101988,  0.4111388301,  -0.0557143424, 0.0231421695,  -0.407613195,  -0.0702418426, 0.332080262,
               -0.0776582715, 0.4391712939,  0.3927976088,  -0.0615981928, 0.0372209347,  -0.4403108713, -0.0415753527,
               0.3273026018,  -0.1000789872, 0.4732592697,  0.3706555487,  -0.0667401359, 0.0140602615,  -0.3865063886,
               -0.0887525934, 0.335172324,   -0.0631897338, 0.4171646972,  0.4070980142,  -0.0582863337},
              2e-6);
  check_close(
      w,
      {0.600770951, 0.399229049, 0.0, 0.3789732548, 0.6210267452, 0.0, 0.6373281791, 0.3626718209, 0.0, 0.4091624298,
       0.2967564324, 0.2940811378, 0.2592943874, 0.4181900583, 0.3225155543, 0.3697786935, 0.2189478187, 0.4112734878},
      2e-6);
  sum(mul(out, inp({2, 3, 8}, 1.0))).backward();
  check_close(x.grad().narrow(0, 0, 1).narrow(1, 0, 1),
              {-0.006556937, -0.0091192562, -0.0094488634, -0.0074650593, -0.0036535483, 0.0010524787, 0.0055008222,
               0.0086023726},
              1e-7);
  const std::vector<double> want = {-0.0526363307, -0.2048893192, 0.3585527668, -0.1972311981};
  int k = 0;
  for (auto& entry : mha.named_parameters()) {
    auto& n = entry.first;
    auto& p = entry.second;
    const Tensor c = cos(arange(0, static_cast<double>(p.numel()), 1, kFloat32)).reshape(p.shape());
    CHECK_MESSAGE(std::fabs(sum(mul(p.grad(), c)).item<double>() - want[k]) < 1e-5, n);
    ++k;
  }
}

TEST_CASE("MultiheadAttention: kdim/vdim, sequence-first, bool attn_mask, per-head weights match PyTorch") {
  nn::MultiheadAttention mha(8, 2, {0.0, true, 4, 6, false});
  std::vector<std::string> names;
  for (auto& [n, p] : mha.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                          "out_proj.weight", "out_proj.bias"});
  fill(mha);
  const Tensor mask = gt(arange(5).unsqueeze(0), arange(3).unsqueeze(1));  // triu(ones(3,5), 1)
  auto [out, w] = mha.forward(inp({3, 2, 8}, 0.2), inp({5, 2, 4}, 0.4), inp({5, 2, 6}, 0.6), Tensor(), true, mask,
                              /*average_attn_weights=*/false);
  CHECK(out.shape() == Shape{3, 2, 8});
  check_close(out.narrow(0, 0, 1),
              {0.6108336897, -0.1737211642, -0.0051022591, 0.1113472645, -0.6402722205, -0.0825354677, -0.1705569276,
               -0.4988068118, 0.6445452227, -0.2725904001, 0.0904366986, 0.0853196399, -0.7017855966, 0.0239078087,
               -0.2481954887, -0.5037541878},
              2e-6);
  CHECK(w.shape() == Shape{2, 2, 3, 5});
  check_close(w[1][0],
              {1.0, 0.0, 0.0, 0.0, 0.0, 0.4746887795, 0.5253112205, 0.0, 0.0, 0.0, 0.2882633593, 0.3038106064,
               0.4079260343, 0.0, 0.0},
              2e-6);
}

TEST_CASE("MultiheadAttention: the notes' (10, 20, 128) input with 8 heads") {
  nn::MultiheadAttention mha(128, 8, {0.0, true, 0, 0, true});
  const Tensor x = randn({10, 20, 128});
  auto [out, w] = mha.forward(x, x, x, Tensor(), true, Tensor(), false);
  CHECK(out.shape() == Shape{10, 20, 128});
  CHECK(w.shape() == Shape{10, 8, 20, 20});
  CHECK(allclose(sum(w, {-1}), ones({10, 8, 20}), 1e-5, 1e-5));
  CHECK_THROWS_AS(nn::MultiheadAttention(100, 8), ValueError);
}

TEST_CASE("attention: scaled dot product with lengths and causality, additive attention") {
  const Tensor q = randn({2, 4, 6}), k = randn({2, 5, 6}), v = randn({2, 5, 3});
  Tensor w;
  const Tensor o = nn::scaled_dot_product_attention(q, k, v, from_vector(std::vector<int64_t>{2, 4}), 0.0, false, &w);
  CHECK(o.shape() == Shape{2, 4, 3});
  CHECK(w.at<float>({0, 3, 2}) == 0.0f);
  CHECK(w.at<float>({1, 0, 4}) == 0.0f);
  const Tensor oc = nn::scaled_dot_product_attention(q, k.narrow(1, 0, 4), v.narrow(1, 0, 4), Tensor(), 0.0, true, &w);
  CHECK(w.at<float>({0, 0, 1}) == 0.0f);
  CHECK(w.at<float>({0, 0, 0}) == 1.0f);
  // Additive attention: the d2l example shapes (queries (2,1,20), keys (2,10,2), values (2,10,4)).
  nn::AdditiveAttention att(2, 20, 8, 0.1);
  att.eval();
  const Tensor vals = arange(0, 40, 1, kFloat32).reshape({1, 10, 4}).expand({2, 10, 4});
  const Tensor y = att.forward(ones({2, 1, 20}), ones({2, 10, 2}), vals, from_vector(std::vector<int64_t>{2, 6}));
  CHECK(y.shape() == Shape{2, 1, 4});
  // Equal keys: uniform weights over the valid ones, so the mean of the valid values.
  check_close(y, {2, 3, 4, 5, 10, 11, 12, 13}, 1e-5);
  CHECK(att.attention_weights.at<float>({0, 0, 2}) == 0.0f);
}

// MultiheadAttention runs attention as one op (ops/attention.h) unless the
// weights are asked for; the composed path (split heads, matmul, softmax,
// dropout, merge) is the reference here: the same draws of the default
// generator, so the same dropout mask, and the same outputs and gradients.
TEST_CASE("MultiheadAttention: the one-op path matches the composed one, with dropout and masks") {
  struct Case {
    const char* name;
    bool self, causal, kpm;
    int64_t kdim;
  };
  for (const Case c :
       {Case{"self, packed", true, false, false, 0}, Case{"self, causal, padding", true, true, true, 0},
        Case{"cross, padding", false, false, true, 0}, Case{"cross, kdim/vdim", false, true, false, 6}}) {
    CAPTURE(c.name);
    nn::MultiheadAttention mha(8, 2, {0.25, true, c.kdim, c.kdim, /*batch_first=*/true});
    fill(mha);
    mha.train();
    const int64_t kd = c.kdim ? c.kdim : 8;
    Tensor x = inp({3, 4, 8}, 0.0).requires_grad_();
    Tensor mem = inp({3, 4, kd}, 0.5).requires_grad_();
    const Tensor kpm = c.kpm ? from_vector(std::vector<bool>{false, false, true, false, false, false, false, false,
                                                             false, true, true, true},
                                           {3, 4})
                             : Tensor();
    std::vector<Tensor> grads[2];
    Tensor outs[2];
    for (int weights = 0; weights < 2; ++weights) {
      manual_seed(11);
      mha.zero_grad();
      x.mutable_grad() = Tensor();
      mem.mutable_grad() = Tensor();
      const Tensor& kv = c.self ? x : mem;
      outs[weights] = mha.forward(x, kv, kv, kpm, weights == 1, Tensor(), true, c.causal).first;
      sum(mul(outs[weights], inp({3, 4, 8}, 1.0))).backward();
      grads[weights].push_back(x.grad());
      if (!c.self) grads[weights].push_back(mem.grad());
      for (const Tensor& p : mha.parameters()) grads[weights].push_back(p.grad());
    }
    CHECK(max(abs(sub(outs[0], outs[1]))).item<double>() < 1e-6);
    REQUIRE(grads[0].size() == grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) CHECK(max(abs(sub(grads[0][i], grads[1][i]))).item<double>() < 1e-5);
  }
}

TEST_CASE("multi_head_attention: bad input is refused with the op named") {
  const Tensor q = randn({2, 3, 8}), k = randn({2, 5, 8});
  CHECK_THROWS_WITH_AS(multi_head_attention(q, k, k, 3), doctest::Contains("multi_head_attention"), ValueError);
  CHECK_THROWS_AS(multi_head_attention(q, k.narrow(1, 0, 0), k.narrow(1, 0, 0), 2), ShapeError);
  CHECK_THROWS_AS(multi_head_attention(q, randn({2, 5, 4}), k, 2), ShapeError);
  CHECK_THROWS_AS(multi_head_attention(q, k, k, 2, zeros({2, 1, 3, 5})), DTypeError);
  CHECK_THROWS_AS(multi_head_attention(q, k, k, 2, Tensor(), 1.0), ValueError);
  CHECK_THROWS_AS(multi_head_self_attention(randn({2, 3, 8}), 2), ShapeError);
}

TEST_CASE("multi_head_attention: the fused float32 CPU kernel matches the composed float64 path") {
  // The fused kernel (ops/attention.cpp) takes float32 on the CPU without a
  // mask and with at most 64 queries and keys; float64 takes the composed
  // path (GEMMs, softmax and dropout kernels), which the gradchecks cover.
  // Both draw the same dropout mask from the same seed, so they agree to
  // float32 rounding, dropout included.
  struct Case {
    int64_t N, L, S, H, D;
    bool packed;
  };
  for (const Case c : {Case{2, 17, 5, 3, 8, false}, Case{3, 50, 50, 4, 16, true}, Case{1, 64, 64, 2, 32, true},
                       Case{2, 7, 64, 1, 64, false}, Case{2, 65, 9, 2, 4, true}, Case{2, 1, 1, 1, 1, false}}) {
    for (double p : {0.0, 0.3}) {
      CAPTURE(c.L);
      CAPTURE(c.S);
      CAPTURE(c.D);
      CAPTURE(p);
      const int64_t E = c.H * c.D;
      // Inputs as strided views: columns [1, 1 + E) of wider rows (rows 3E + 2 apart when packed).
      Generator gen(5);
      const Tensor wide_q = randn({c.N, c.L, 3 * E + 2}, TensorOptions(DType::Float64), &gen);
      const Tensor wide_kv = randn({c.N, c.S, 2 * E + 1}, TensorOptions(DType::Float64), &gen);
      const Tensor gout = randn({c.N, c.L, E}, TensorOptions(DType::Float64), &gen);
      std::vector<Tensor> outs, grads;
      for (DType dt : {DType::Float32, DType::Float64}) {
        const Tensor base_q = wide_q.to(dt).requires_grad_(), base_kv = wide_kv.to(dt).requires_grad_();
        Generator drop(42);
        Tensor out;
        if (c.packed && c.L == c.S) {
          out = multi_head_self_attention(base_q.narrow(2, 1, 3 * E), c.H, Tensor(), p, &drop);
        } else if (c.packed) {
          out = multi_head_attention(base_q.narrow(2, 1, E), base_q.narrow(2, 1 + E, E).narrow(1, 0, c.S),
                                     base_q.narrow(2, 1 + 2 * E, E).narrow(1, 0, c.S), c.H, Tensor(), p, &drop);
        } else {
          out = multi_head_attention(base_q.narrow(2, 1, E), base_kv.narrow(2, 0, E), base_kv.narrow(2, E + 1, E), c.H,
                                     Tensor(), p, &drop);
        }
        sum(mul(out, gout.to(dt))).backward();
        outs.push_back(out.to(DType::Float64));
        grads.push_back(base_q.grad().to(DType::Float64));
        grads.push_back(base_kv.grad().defined() ? base_kv.grad().to(DType::Float64) : zeros_like(wide_kv));
      }
      CHECK(max(abs(sub(outs[0], outs[1]))).item<double>() < 1e-5);
      CHECK(max(abs(sub(grads[0], grads[2]))).item<double>() < 2e-5);
      CHECK(max(abs(sub(grads[1], grads[3]))).item<double>() < 2e-5);
      CHECK(max(abs(outs[1])).item<double>() > 0.1);  // not vacuous
    }
  }
}

TEST_CASE("multi_head_attention: the fused kernel in bfloat16 does the composed path's bf16 products") {
  // bfloat16 q, k, v (autocast's) go through the fused kernel without float32
  // copies, its products on the bf16 GEMM as torch.autocast runs attention's
  // bmm: q, k, v and g read as they are, the float32 weights (and their
  // gradient) rounded to bfloat16 as the GEMM packs them, float32 sums, each
  // output rounded once. The composed path (forced here by a mask that masks
  // nothing) does the same products through matmul: the two agree bit for bit
  // but for an element whose rounding a float32-level difference in the
  // softmax flips (at most one bf16 step: 2^-8 of the largest, measured 0 to
  // 1.9e-3). The float32 kernel on the same inputs differs by the rounding of
  // the weights (measured 1.8e-3 to 3.9e-3 of the largest).
  struct Case {
    int64_t N, L, S, H, D;
    bool packed;
  };
  for (const Case c : {Case{3, 50, 50, 4, 16, true}, Case{1, 64, 64, 2, 32, true}, Case{2, 7, 64, 1, 64, false},
                       Case{2, 33, 40, 2, 12, false}}) {
    for (double p : {0.0, 0.3}) {
      CAPTURE(c.L);
      CAPTURE(c.S);
      CAPTURE(p);
      const int64_t E = c.H * c.D;
      Generator gen(9);
      const Tensor wide_q = randn({c.N, c.L, 3 * E + 2}, TensorOptions(DType::BFloat16), &gen);
      const Tensor wide_kv = randn({c.N, c.S, 2 * E + 1}, TensorOptions(DType::BFloat16), &gen);
      const Tensor gout = randn({c.N, c.L, E}, TensorOptions(DType::BFloat16), &gen);
      const Tensor none = zeros({c.L, c.S}, TensorOptions(DType::Bool));
      std::vector<Tensor> outs, grads;  // fused bf16, composed bf16, fused float32
      for (int run = 0; run < 3; ++run) {
        const DType dt = run == 2 ? DType::Float32 : DType::BFloat16;
        const Tensor mask = run == 1 ? none : Tensor();
        const Tensor base_q = wide_q.to(dt).detach().requires_grad_(),
                     base_kv = wide_kv.to(dt).detach().requires_grad_();
        Generator drop(42);
        Tensor out;
        if (c.packed) {
          out = multi_head_self_attention(base_q.narrow(2, 1, 3 * E), c.H, mask, p, &drop);
        } else {
          out = multi_head_attention(base_q.narrow(2, 1, E), base_kv.narrow(2, 0, E), base_kv.narrow(2, E + 1, E), c.H,
                                     mask, p, &drop);
        }
        CHECK(out.dtype() == dt);
        sum(mul(out, gout.to(dt))).backward();
        outs.push_back(out.to(DType::Float32));
        grads.push_back(base_q.grad().to(DType::Float32));
        if (!c.packed) grads.push_back(base_kv.grad().to(DType::Float32));
      }
      auto diff = [](const Tensor& x, const Tensor& y) { return max(abs(sub(x, y))).item<double>(); };
      const double scale = max(abs(outs[2])).item<double>();
      CHECK(scale > 0.1);  // not vacuous
      // Fused and composed bf16: a few bf16 roundings of a float32-level difference.
      CHECK(diff(outs[0], outs[1]) <= 4e-3 * scale);
      CHECK(diff(outs[0], outs[2]) <= 1e-2 * scale);
      const size_t per = grads.size() / 3;
      for (size_t i = 0; i < per; ++i) {
        const double gs = max(abs(grads[2 * per + i])).item<double>();
        CHECK(gs > 0.01);
        CHECK(diff(grads[i], grads[per + i]) <= 4e-3 * gs);
        CHECK(diff(grads[i], grads[2 * per + i]) <= 1e-2 * gs);
      }
    }
  }
}
