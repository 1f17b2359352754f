// The bench's kernel workloads: matmul at the models' shapes against raw
// OpenBLAS, the bf16 GEMM against the float32 one, the memory-bound kernels
// against the measured bandwidth, causal attention fused against composed,
// and the framework's cost per op.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <ember/ops/bgemm_avx512.h>  // bgemm, bf16_peak_gflops
#include <ember/ops/sgemm_avx512.h>  // sgemm_avx512: the float32 kernel beside it

#include "bench.h"

namespace ember::bench {

void Bench::matmul_shapes() {
  table_header(
      "matmul at the models' shapes: Ember (its pool, OpenBLAS single-threaded underneath) vs raw "
      "OpenBLAS on the same threads");
  struct S {
    const char* name;
    int64_t m, n, k;
  };
  const std::vector<S> shapes = {{"linear 1600x64 -> 192", 1600, 192, 64},   {"linear 1600x64 -> 256", 1600, 256, 64},
                                 {"linear 1600x256 -> 64", 1600, 64, 256},   {"linear 12800x64 -> 192", 12800, 192, 64},
                                 {"linear 12800x256 -> 64", 12800, 64, 256}, {"linear 2176x64 -> 128", 2176, 128, 64}};
  for (const S& s : shapes) {
    const Tensor x = randn({s.m, s.k}, on_dev()), w = randn({s.n, s.k}, on_dev());
    const double gflop = 2.0 * s.m * s.n * s.k * 1e-9;
    record(std::string("ember ") + s.name, s.m, time_steps(warmup, steps * 5, [&] { linear(x, w); }), gflop, 0);
    if (!g_dev.is_cpu()) continue;  // raw OpenBLAS: the CPU comparison only
    std::vector<float> c(s.m * s.n);
    openblas_set_num_threads(num_threads());
    const Timing raw = time_steps(warmup, steps * 5, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, static_cast<const float*>(x.data_ptr()),
                  s.k, static_cast<const float*>(w.data_ptr()), s.k, 0.0f, c.data(), s.n);
    });
    openblas_set_num_threads(1);
    record(std::string("openblas ") + s.name, s.m, raw, gflop, 0);
  }
  for (int64_t b : {128, 1024}) {  // attention scores: (B*H, 50, 16) @ (B*H, 16, 50)
    const Tensor q = randn({b, 50, 16}, on_dev()), k = randn({b, 16, 50}, on_dev());
    record("ember bmm scores 50x16 @ 16x50", b, time_steps(warmup, steps * 5, [&] { matmul(q, k); }),
           2.0 * b * 50 * 50 * 16 * 1e-9, 0);
  }
  if (!g_dev.is_cpu()) gpt2_gemms();
}

// On a GPU: GPT-2 124M's products at batch 16, context 1024 (16,384 rows)
// in bfloat16, each linear's forward y = x W^T and its backward dX = dY W,
// dW = dY^T X, against a square 8192^3 product's rate. The vocabulary's
// product twice: at 50,257 columns, where a bf16 row of the logits starts
// on no 16-byte boundary, and padded to 50,304 (llm.c's padded vocabulary),
// to tell what the alignment costs cuBLAS.
void Bench::gpt2_gemms() {
  std::printf("\nGPT-2 124M's GEMMs in bfloat16 (16384 rows), forward and backward; TFLOP/s\n");
#if defined(EMBER_CUDA_EMULATE)
  // The emulator's products are the CPU's, a teraflop each here: minutes
  // per row for figures that say nothing of a GPU.
  std::printf("(not on the SIMT emulator)\n");
  return;
#endif
  std::printf("%-34s %9s %9s %9s\n", "product", "forward", "dX", "dW");
  const auto tflops = [&](double flop, const std::function<void()>& f) {
    return flop * 1e-12 / (time_steps(warmup, steps * 5, f).median_ms * 1e-3);
  };
  {
    const Tensor a = randn({8192, 8192}, on_dev()).to(kBFloat16), b = randn({8192, 8192}, on_dev()).to(kBFloat16);
    const double t = tflops(2.0 * 8192 * 8192 * 8192, [&] { matmul(a, b); });
    std::printf("%-34s %9.1f\n", "square 8192^3 (reference)", t);
    records.push_back({{"workload", "gemm bf16 8192^3"}, {"tflops", t}});
  }
  struct S {
    const char* name;
    int64_t n, k;
  };
  const int64_t m = 16384;
  for (const S& s : {S{"attn qkv 768 -> 2304", 2304, 768}, S{"attn proj 768 -> 768", 768, 768},
                     S{"mlp fc 768 -> 3072", 3072, 768}, S{"mlp proj 3072 -> 768", 768, 3072},
                     S{"lm_head 768 -> 50257", 50257, 768}, S{"lm_head 768 -> 50304 (padded)", 50304, 768}}) {
    const Tensor x = randn({m, s.k}, on_dev()).to(kBFloat16), w = randn({s.n, s.k}, on_dev()).to(kBFloat16);
    const Tensor dy = randn({m, s.n}, on_dev()).to(kBFloat16);
    const double flop = 2.0 * m * s.n * s.k;
    const double fwd = tflops(flop, [&] { linear(x, w); });
    const double dx = tflops(flop, [&] { matmul(dy, w); });
    const double dw = tflops(flop, [&] { matmul(dy.t(), x); });
    std::printf("%-34s %9.1f %9.1f %9.1f\n", s.name, fwd, dx, dw);
    records.push_back({{"workload", std::string("gpt2 gemm bf16 ") + s.name},
                       {"forward_tflops", fwd},
                       {"dx_tflops", dx},
                       {"dw_tflops", dw}});
  }
}

// The bf16 GEMM kernel (bgemm_avx512.h) against the float32 kernel
// (sgemm_avx512.h) at the models' linear shapes, on one thread, called in
// turn (float32, bf16, then a window of the register-only vdpbf16ps loop)
// so each round sees the same machine. Each call is timed alone: "fast"
// is the fastest decile (calls that had the core to themselves), "median"
// what the loaded machine gave; the ratio is the median of the rounds'
// float32 / bf16 time ratios, and "of peak" the fast bf16 rate against the
// loop's best window over the same rounds.
void Bench::bgemm_shapes() {
  const int saved = num_threads();
  set_num_threads(1);
  std::printf(
      "\nbf16 GEMM (vdpbf16ps) vs float32 GEMM (Ember's kernels, raw arrays), 1 thread, %s; load average %.2f\n",
      cpu::bgemm_uses_kernel() ? "AVX512_BF16 kernel" : "float32 fallback (no AVX512_BF16)", load_average());
  std::printf("%-30s %6s %5s %5s %3s %9s %9s %9s %9s %7s %9s %7s\n", "shape", "m", "n", "k", "op", "f32 fast",
              "bf16 fast", "f32 med", "bf16 med", "ratio", "bf16 peak", "of peak");
  struct S {
    const char* name;
    int64_t m, n, k;
    bool ta, tb;
  };
  // ViT b128: 128 x 17 tokens, width 64, qkv 192, MLP 128; linear's
  // forward x W^T (B transposed), dX = dY W, dW = dY^T X (A transposed).
  // Attention regression b256: 256 x 50 tokens, feed-forward 256.
  const std::vector<S> shapes = {{"vit in_proj forward", 2176, 192, 64, false, true},
                                 {"vit out_proj forward", 2176, 64, 64, false, true},
                                 {"vit mlp fc1 forward", 2176, 128, 64, false, true},
                                 {"vit mlp fc2 forward", 2176, 64, 128, false, true},
                                 {"vit patch embed (im2col)", 2048, 64, 49, false, true},
                                 {"vit in_proj dX", 2176, 64, 192, false, false},
                                 {"vit mlp fc1 dX", 2176, 64, 128, false, false},
                                 {"vit mlp fc2 dX", 2176, 128, 64, false, false},
                                 {"vit in_proj dW", 192, 64, 2176, true, false},
                                 {"vit mlp fc1 dW", 128, 64, 2176, true, false},
                                 {"vit mlp fc2 dW", 64, 128, 2176, true, false},
                                 {"ar b256 in_proj forward", 12800, 192, 64, false, true},
                                 {"ar b256 linear1 forward", 12800, 256, 64, false, true},
                                 {"ar b256 linear2 forward", 12800, 64, 256, false, true},
                                 // GPT-2 124M at llm.c's batch 4 x 64 tokens.
                                 {"gpt2 c_attn forward", 256, 2304, 768, false, true},
                                 {"gpt2 mlp c_fc forward", 256, 3072, 768, false, true},
                                 {"gpt2 mlp c_proj forward", 256, 768, 3072, false, true},
                                 {"gpt2 mlp c_fc dX", 256, 768, 3072, false, false},
                                 {"gpt2 mlp c_fc dW", 3072, 768, 256, true, false},
                                 {"gpt2 lm_head forward", 256, 50257, 768, false, true},
                                 {"gpt2 lm_head dX", 256, 768, 50257, false, false},
                                 {"gpt2 lm_head dW", 50257, 768, 256, true, false}};
  Generator gen(7);
  for (const S& s : shapes) {
    const int64_t asz = s.m * s.k, bsz = s.k * s.n;
    const std::vector<float> af = randn({asz}, TensorOptions(), &gen).to_vector<float>();
    const std::vector<float> bf = randn({bsz}, TensorOptions(), &gen).to_vector<float>();
    std::vector<uint16_t> a16(asz), bw16(bsz);
    for (int64_t i = 0; i < asz; ++i) a16[i] = cpu::bf16_from_float(af[i]);
    for (int64_t i = 0; i < bsz; ++i) bw16[i] = cpu::bf16_from_float(bf[i]);
    std::vector<float> c(s.m * s.n);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    cpu::BgemmArgs g;
    g.trans_a = s.ta;
    g.trans_b = s.tb;
    g.m = s.m;
    g.n = s.n;
    g.k = s.k;
    g.a = a16.data();
    g.lda = lda;
    g.b = bw16.data();
    g.ldb = ldb;
    g.c = c.data();
    g.ldc = s.n;
    auto f32 = [&] {
      if (cpu::sgemm_avx512_fits(s.m, s.n, s.k))
        cpu::sgemm_avx512(s.ta, s.tb, s.m, s.n, s.k, 1.0f, af.data(), lda, bf.data(), ldb, 0.0f, c.data(), s.n);
      else
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                    1.0f, af.data(), lda, bf.data(), ldb, 0.0f, c.data(), s.n);
    };
    auto b16 = [&] { cpu::bgemm(g); };
    auto ms = [](const std::function<void()>& f) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int i = 0; i < warmup; ++i) {
      f32();
      b16();
    }
    std::vector<double> tf, tb, ratio;
    double peak_best = 0;
    const int rounds = std::max(20, steps * 10);
    for (int r = 0; r < rounds; ++r) {
      tf.push_back(ms(f32));
      tb.push_back(ms(b16));
      ratio.push_back(tf.back() / tb.back());
      if (r % 4 == 0) peak_best = std::max(peak_best, cpu::bf16_peak_gflops(0.0002));
    }
    const double gflop = 2.0 * s.m * s.n * s.k * 1e-9;
    auto at = [](std::vector<double> v, double q) {
      std::sort(v.begin(), v.end());
      return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
    };
    const double ff = gflop / (at(tf, 0.1) * 1e-3), bfast = gflop / (at(tb, 0.1) * 1e-3);
    const double fm = gflop / (at(tf, 0.5) * 1e-3), bm = gflop / (at(tb, 0.5) * 1e-3), rm = at(ratio, 0.5);
    const double frac = peak_best > 0 ? bfast / peak_best : 0;
    const std::string op = std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N");
    std::printf("%-30s %6lld %5lld %5lld %3s %9.1f %9.1f %9.1f %9.1f %6.2fx %9.1f %6.0f%%\n", s.name,
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), op.c_str(), ff,
                bfast, fm, bm, rm, peak_best, 100 * frac);
    records.push_back(nlohmann::ordered_json{{"workload", std::string("bgemm ") + s.name},
                                             {"m", s.m},
                                             {"n", s.n},
                                             {"k", s.k},
                                             {"op", op},
                                             {"fp32_gflops_fast", ff},
                                             {"bf16_gflops_fast", bfast},
                                             {"fp32_gflops_median", fm},
                                             {"bf16_gflops_median", bm},
                                             {"ratio_median", rm},
                                             {"bf16_peak_gflops", peak_best},
                                             {"fraction_of_bf16_peak", frac},
                                             {"threads", 1}});
  }
  set_num_threads(saved);
}

// GB/s: bytes each kernel must read and write, over its median time.
void Bench::kernels() {
  std::printf("\nmemory-bound kernels on 64 MB tensors, GB/s against the %s's %.1f GB/s\n", bandwidth_name, bandwidth);
  std::printf("%-34s %9s %9s %9s\n", "kernel", "median ms", "GB/s", g_dev.is_cpu() ? "of triad" : "of copy");
  auto row = [&](const char* name, double bytes, const std::function<void()>& body) {
    const Timing t = time_steps(2, std::max(3, steps / 2), body);
    const double gbs = bytes / (t.median_ms * 1e-3) * 1e-9;
    std::printf("%-34s %9.3f %9.1f %8.0f%%\n", name, t.median_ms, gbs, 100 * gbs / bandwidth);
    records.push_back({{"workload", std::string("kernel ") + name},
                       {"batch", 0},
                       {"median_ms", t.median_ms},
                       {"min_ms", t.min_ms},
                       {"max_ms", t.max_ms},
                       {"gflops", 0},
                       {"gb_per_s", gbs},
                       {"fraction_of_triad", gbs / bandwidth},
                       {"peak_rss_mb", peak_rss_mb()}});
  };
  const double mb64 = 64.0 * 1048576;
  {
    const Tensor x = randn({16384, 1024}, on_dev());
    const Tensor y = softmax(x, -1), g = randn({16384, 1024}, on_dev());
    row("softmax forward", 2 * mb64, [&] { softmax(x, -1); });
    Tensor xr = x.detach().requires_grad_();
    const Tensor yr = softmax(xr, -1);
    row("softmax backward", 3 * mb64, [&] {
      autograd::backward({yr}, {g}, true);
      xr.mutable_grad() = Tensor();
    });
  }
  {
    const Tensor x = randn({65536, 256}, on_dev()), w = ones({256}, on_dev()), b = zeros({256}, on_dev()),
                 g = randn({65536, 256}, on_dev());
    row("layer_norm forward", 2 * mb64, [&] { layer_norm(x, {256}, w, b); });
    Tensor xr = x.detach().requires_grad_();
    const Tensor yr = layer_norm(xr, {256}, w, b);
    row("layer_norm backward (dx)", 3 * mb64, [&] {
      autograd::backward({yr}, {g}, true);
      xr.mutable_grad() = Tensor();
    });
  }
  {
    const Tensor x = randn({1 << 24}, on_dev()), g = randn({1 << 24}, on_dev());
    row("gelu forward", 2 * mb64, [&] { gelu(x); });
    Tensor xr = x.detach().requires_grad_();
    const Tensor yr = gelu(xr);
    row("gelu backward", 3 * mb64, [&] {
      autograd::backward({yr}, {g}, true);
      xr.mutable_grad() = Tensor();
    });
  }
  {
    const Tensor logits = randn({65536, 256}, on_dev());
    const Tensor t = randint(0, 256, {65536}, on_dev(kInt64));
    row("cross_entropy forward", mb64, [&] { cross_entropy(logits, t); });
    Tensor lr = logits.detach().requires_grad_();
    const Tensor loss = cross_entropy(lr, t);
    row("cross_entropy backward", 2 * mb64, [&] {
      autograd::backward({loss}, {Tensor()}, true);
      lr.mutable_grad() = Tensor();
    });
  }
  // Decoding at batch 1: one token's Linear reads its whole weight once, so
  // its rate is the weight bytes over the time. First 64 MB of weight in
  // either dtype at GPT-2's width 768 (21,845 rows of float32, 43,690 of
  // bf16), then GPT-2 124M's 48 block weights one after the other (170 MB in
  // bf16), as a token reads them: 48 smaller products, each split anew.
  for (const DType dt : {kFloat32, kBFloat16}) {
    const bool f32 = dt == kFloat32;
    const int64_t size = f32 ? 4 : 2, rows = static_cast<int64_t>(mb64) / (768 * size);
    const Tensor w = randn({rows, 768}, on_dev()).to(dt), x = randn({1, 768}, on_dev()).to(dt);
    row(f32 ? "linear, one row (fp32 weight)" : "linear, one row (bf16 weight)", static_cast<double>(w.numel() * size),
        [&] { linear(x, w); });
    std::vector<Tensor> ws;  // per layer: c_attn, attn.c_proj, c_fc, mlp.c_proj as (out, in)
    int64_t elems = 0;
    for (int l = 0; l < 12; ++l)
      for (const auto& [o, i] : {std::pair<int64_t, int64_t>{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}}) {
        ws.push_back(randn({o, i}, on_dev()).to(dt));
        elems += o * i;
      }
    const Tensor x4 = randn({1, 3072}, on_dev()).to(dt);
    row(f32 ? "GPT-2's 48 linears, one row (fp32)" : "GPT-2's 48 linears, one row (bf16)",
        static_cast<double>(elems * size), [&] {
          for (const Tensor& wi : ws) linear(wi.size(1) == 768 ? x : x4, wi);
        });
  }
}

// Causal self-attention (GPT's: batch 4, 4 heads of 32) forward and
// backward, the fused kernel (ops/causal_attention.h) against the composed
// multi_head_self_attention with the causal mask. The "tensorMB" column of
// these rows is the most tensor memory a step holds beyond its input and
// output gradient (the allocator's peak minus what was allocated before
// the step): the composed path's (N, H, T, T) scores, weights and their
// gradients grow with T^2 (64 MB each at T = 1024), the fused one's
// (N, H, T) log-sum-exps, output and input gradient with T.
void Bench::causal_attention() {
  std::printf("\ncausal self-attention forward + backward (batch 4, 4 heads, head dim 32)\n");
  table_header("fused (FlashAttention) against composed (GEMMs, masked softmax)");
  for (int64_t T : {256, 512, 1024}) {
    const int64_t B = 4, H = 4, E = 128;
    Tensor x = randn({B, T, 3 * E}, on_dev()).requires_grad_();
    const Tensor g = randn({B, T, E}, on_dev()), mask = causal_attention_mask(T, T, g_dev);
    for (bool fused : {true, false}) {
      auto body = [&] {
        const Tensor y = fused ? causal_self_attention(x, H) : multi_head_self_attention(x, H, mask);
        autograd::backward({y}, {g});
        x.mutable_grad() = Tensor();
      };
      reset_peak_rss();
      // FLOPs: the composed path's 2 products forward and 4 backward, 2 B H T^2 D each (the fused one
      // skips half of them above the diagonal), so the GFLOP/s of both rows compare like for like.
      const double gflop = 12.0 * B * H * T * T * (E / H) * 1e-9;
      const Timing t = time_steps(std::max(1, warmup / 4), steps, body);
      const size_t before = memory_stats(g_dev).allocated;
      reset_peak_memory_stats(g_dev);
      body();
      record(std::string(fused ? "causal attention fused T=" : "causal attention composed T=") + std::to_string(T), B,
             t, gflop, static_cast<double>(memory_stats(g_dev).peak_allocated - before) / 1048576.0);
    }
  }
  if (!g_dev.is_cpu()) {
    causal_attention_tensor_core();
    bidirectional_attention_tensor_core();
  }
}

// On a GPU: bfloat16 causal self-attention at GPT-2's heads (12 of 64,
// batch 4), the tensor-core forward (cuda/causal_attention_tc.cu) alone and
// with the backward (_tc_bwd.cu), against the dense bf16 tensor-core peak of an H100 /
// H200 SXM (989 TFLOP/s). FLOPs as FlashAttention 2 counts them: forward
// 4 B H T^2 D / 2 (S = Q K^T and O = P V, the causal half), backward 2.5
// times that (five products, one of them recomputing S).
void Bench::causal_attention_tensor_core() {
  constexpr double kPeakTflops = 989.0;
  std::printf("\ncausal self-attention, bfloat16 on tensor cores (batch 4, 12 heads, head dim 64)\n");
  table_header("forward alone, and forward + backward; % of the 989 TFLOP/s bf16 peak below each row");
#if defined(EMBER_CUDA_EMULATE)
  // bench_emu: the SIMT emulator runs each mma lane by lane; one short context checks the rows run.
  const std::vector<int64_t> lengths = {128};
#else
  const std::vector<int64_t> lengths = {1024, 4096};
#endif
  for (int64_t T : lengths) {
    const int64_t B = 4, H = 12, D = 64, E = H * D;
    Tensor x = randn({B, T, 3 * E}, on_dev(kBFloat16)).requires_grad_();
    const Tensor g = randn({B, T, E}, on_dev(kBFloat16));
    const double fwd_gflop = 4.0 * B * H * T * T * D / 2 * 1e-9;
    for (bool backward : {false, true}) {
      auto body = [&] {
        if (!backward) {
          autograd::NoGradGuard no_grad;
          (void)causal_self_attention(x, H);
          return;
        }
        autograd::backward({causal_self_attention(x, H)}, {g});
        x.mutable_grad() = Tensor();
      };
      const double gflop = backward ? 3.5 * fwd_gflop : fwd_gflop;
      const Timing t = time_steps(std::max(1, warmup / 4), steps, body);
      record(std::string("causal attention bf16 ") + (backward ? "fwd+bwd" : "fwd") + " T=" + std::to_string(T), B, t,
             gflop, 0);
      const double frac = t.median_ms > 0 ? gflop / (t.median_ms * 1e-3) / (kPeakTflops * 1e3) : 0;
      std::printf("    %.1f%% of the bf16 tensor-core peak\n", 100 * frac);
      records.back()["fraction_of_bf16_tensor_peak"] = frac;
    }
  }
}

// On a GPU: bfloat16 bidirectional self-attention (multi_head_self_attention
// without a mask: its fused path, cuda/attention.cu) at ViT-B/16's shape
// (197 tokens, 12 heads of 64, batch 32) and at T = 1024 (batch 4), forward
// alone and with the backward. FLOPs: forward 4 B H T^2 D (S = Q K^T and
// O = P V over every key), backward 2.5 times that.
void Bench::bidirectional_attention_tensor_core() {
  constexpr double kPeakTflops = 989.0;
  std::printf("\nbidirectional self-attention, bfloat16 on tensor cores (12 heads, head dim 64)\n");
  table_header("forward alone, and forward + backward; % of the 989 TFLOP/s bf16 peak below each row");
  struct Shape {
    int64_t B, T;
  };
#if defined(EMBER_CUDA_EMULATE)
  const std::vector<Shape> shapes = {{1, 65}};  // bench_emu: one short sequence checks the rows run
#else
  const std::vector<Shape> shapes = {{32, 197}, {4, 1024}};
#endif
  for (const auto& [B, T] : shapes) {
    const int64_t H = 12, D = 64, E = H * D;
    Tensor x = randn({B, T, 3 * E}, on_dev(kBFloat16)).requires_grad_();
    const Tensor g = randn({B, T, E}, on_dev(kBFloat16));
    const double fwd_gflop = 4.0 * B * H * T * T * D * 1e-9;
    for (bool backward : {false, true}) {
      auto body = [&] {
        if (!backward) {
          autograd::NoGradGuard no_grad;
          (void)multi_head_self_attention(x, H);
          return;
        }
        autograd::backward({multi_head_self_attention(x, H)}, {g});
        x.mutable_grad() = Tensor();
      };
      const double gflop = backward ? 3.5 * fwd_gflop : fwd_gflop;
      const Timing t = time_steps(std::max(1, warmup / 4), steps, body);
      record(std::string("attention bf16 ") + (backward ? "fwd+bwd" : "fwd") + " T=" + std::to_string(T), B, t, gflop,
             0);
      const double frac = t.median_ms > 0 ? gflop / (t.median_ms * 1e-3) / (kPeakTflops * 1e3) : 0;
      std::printf("    %.1f%% of the bf16 tensor-core peak\n", 100 * frac);
      records.back()["fraction_of_bf16_tensor_peak"] = frac;
    }
  }
}

void Bench::overhead() {
  const Tensor a = tensor({1.0}, on_dev()), b = tensor({2.0}, on_dev());
  const Tensor ga = tensor({1.0}, on_dev()).requires_grad_(), gb = tensor({2.0}, on_dev()).requires_grad_();
  std::printf("\nframework overhead per op, 1-element float32 tensors\n%-34s %10s\n", "op", "us/op");
  auto row = [&](const char* name, const std::function<void()>& body) {
    const int n = 20000;
    const Timing t = time_steps(1, 5, [&] {
      for (int i = 0; i < n; ++i) body();
    });
    const double us = t.median_ms * 1e3 / n;
    std::printf("%-34s %10.3f\n", name, us);
    records.push_back({{"workload", std::string("overhead ") + name},
                       {"batch", 1},
                       {"median_ms", t.median_ms / n},
                       {"min_ms", t.min_ms / n},
                       {"max_ms", t.max_ms / n},
                       {"gflops", 0},
                       {"peak_rss_mb", peak_rss_mb()}});
  };
  row("add, forward, no grad", [&] { Tensor c = add(a, b); });
  row("exp, forward, no grad", [&] { Tensor c = exp(a); });
  row("mul, forward, recording graph", [&] { Tensor c = mul(ga, gb); });
  row("mul, forward + backward", [&] { mul(ga, gb).backward(); });
}

}  // namespace ember::bench
