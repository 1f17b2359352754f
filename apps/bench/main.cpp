// Ember's benchmark runner: full training steps of the demo models through
// the public API, and the pieces they are made of, each against what this
// machine can do (measured here, in the same run).
//
//   attention_regression  training step of the demo transformer, batch 32 and 256
//   vit                   training step of the ViT (28x28, patch 7, width 64,
//                         depth 4, 4 heads, MLP 128), batch 128
//   conv                  conv2d forward+backward at the CNN teacher's shapes, and
//                         the teacher's (nn::ResNet) training step, batch 128
//   matmul                linear / bmm at the models' shapes, Ember and raw OpenBLAS
//   bgemm                 the bf16 GEMM kernel against the float32 one at the models'
//                         linear shapes, 1 thread, alternating, and against the bf16 peak
//   kernels               softmax, layer_norm, gelu, cross_entropy forward and
//                         backward in GB/s against a measured triad bandwidth
//   adamw                 one AdamW step over the ViT's parameters
//   causal_attention      causal self-attention forward + backward at context
//                         256-1024: the fused FlashAttention kernel against
//                         the composed path with a mask (time and memory)
//   gpt_generate          tokens/s of GPT::generate (nanoGPT's CPU model
//                         size) at context 64 and 256, with and without the
//                         KV cache
//   overhead              framework cost per op on 1-element tensors
//
//   build/bin/bench [--workload all|NAME] [--steps N] [--warmup N] [--threads K] [--device cpu|cuda]
//                   [--precision fp32,bf16,fp16] [--json FILE]
//
// --precision: the training steps (attention_regression, vit) in each listed
// precision; a 16-bit step's workload name ends in " bf16" / " fp16".
//
// --device cuda runs every workload on the GPU (models, optimizer state and
// data there; every timed call synchronised) and measures the references on
// the device too: SGEMM peak through cuBLAS, bandwidth as a device-to-device
// copy. The machine line (CPU) is printed either way.
#include <cblas.h>
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/ops/bgemm_avx512.h>  // bgemm, bf16_peak_gflops
#include <ember/ops/sgemm_avx512.h>  // sgemm_avx512: the float32 kernel beside it

#include "app.h"
#include "attention_models.h"  // apps/common: the attention-regression demo's transformer
#include "precision.h"         // apps/common: --precision's autocast region and scaled step

extern "C" void openblas_set_num_threads(int);

using namespace ember;

namespace {

// --device: where every workload's tensors and models live. On a GPU each
// timed call ends by reading one element back, which waits for the stream
// (that small copy is included in the times).
Device g_dev = kCPU;
TensorOptions on_dev(DType dt = kFloat32) { return TensorOptions(dt, g_dev); }
void sync_device() {
  if (g_dev.is_cpu()) return;
  static const Tensor probe = zeros({1}, on_dev());
  (void)probe.item();
}

// Wall times, and the process's CPU time per call (all threads): on a
// shared machine the wall time grows with the load, the CPU time much less.
struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0, cpu_ms = 0;
};

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The 1-minute load average (the neighbours' builds on the shared machine); -1 when unknown.
double load_average() {
  double l[1] = {-1};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// warmup untimed calls, then each of steps calls timed on its own.
Timing time_steps(int warmup, int steps, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  sync_device();
  std::vector<double> ms;
  const double cpu0 = process_cpu_ms();
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    sync_device();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = (process_cpu_ms() - cpu0) / steps;
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back(), cpu};
}

// Peak resident memory since the last reset_peak_rss(): Linux's VmHWM, which
// writing "5" to /proc/self/clear_refs resets to the current RSS. Each
// workload resets it first, so the machine measurement's large arrays and the
// workloads before it don't count against it (PyTorch's side does the same).
// A field of /proc/self/status in MB, or -1 where there is none.
double status_mb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) / 1024.0;  // kB
  return -1;
}

double rss_at_reset_mb = 0;  // RSS when the peak was last reset

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
  rss_at_reset_mb = std::max(0.0, status_mb("VmRSS:"));
}

double peak_rss_mb() {
  const double hwm = status_mb("VmHWM:");
  if (hwm >= 0) return hwm;
  rusage u{};  // no /proc: the process-wide peak
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

struct Bench {
  int steps = 20, warmup = 20;
  double sgemm_peak = 0;  // GFLOP/s, raw OpenBLAS on a large square, this thread count
  double ember_gemm = 0;  // GFLOP/s, Ember's matmul at 16384 x 256 @ 256 x 256 (its own AVX-512 kernel)
  double triad_gbs = 0;   // GB/s, a = b + s c over arrays far larger than the caches
  // GFLOP/s of one core's register-only loops (bgemm_avx512.h): vdpbf16ps and
  // vfmadd231ps, the best of 20 short windows; 0 without AVX512_BF16.
  double bf16_peak = 0, fp32_fma_peak = 0;
  // The references the fractions are taken against: the CPU's, or on a GPU
  // measure_device()'s.
  double peak = 0, bandwidth = 0;
  const char* bandwidth_name = "triad";
  nlohmann::ordered_json records = nlohmann::ordered_json::array();

  void record(const std::string& workload, int64_t batch, const Timing& t, double gflop_per_step, double extra_mb) {
    const double gflops = t.median_ms > 0 ? gflop_per_step / (t.median_ms * 1e-3) : 0;
    const double fraction = peak > 0 ? gflops / peak : 0;
    nlohmann::ordered_json r = {{"workload", workload},
                                {"batch", batch},
                                {"median_ms", t.median_ms},
                                {"min_ms", t.min_ms},
                                {"max_ms", t.max_ms},
                                {"cpu_ms", t.cpu_ms},
                                {"gflops", gflops},
                                {"fraction_of_sgemm_peak", fraction},
                                {"peak_tensor_mb", extra_mb},
                                {"peak_rss_mb", peak_rss_mb()},
                                {"rss_growth_mb", peak_rss_mb() - rss_at_reset_mb},
                                {"threads", num_threads()}};
    records.push_back(r);
    std::printf("%-34s %6lld %9.3f %9.3f %9.3f %9.3f %9.1f %6.0f%% %9.1f %9.1f\n", workload.c_str(),
                static_cast<long long>(batch), t.median_ms, t.min_ms, t.max_ms, t.cpu_ms, gflops, 100 * fraction,
                extra_mb, peak_rss_mb());
  }

  static void table_header(const char* what) {
    std::printf("\n%s\n%-34s %6s %9s %9s %9s %9s %9s %7s %9s %9s\n", what, "workload", "batch", "median", "min", "max",
                "cpu ms", "GFLOP/s", "of peak", "tensorMB", "rssMB");
  }

  // The machine: SGEMM peak (2048^3, OpenBLAS on num_threads threads) and triad bandwidth.
  void measure_machine() {
    const int64_t n = 2048;
    std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
    openblas_set_num_threads(num_threads());
    // Both references are medians over 7 runs, as every workload's time is a
    // median: on this shared machine a best-of-N reference taken in a quiet
    // moment and a median workload time taken in a busy one would make the
    // fractions of peak swing with the neighbours' load.
    const Timing t = time_steps(1, 7, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                  n);
    });
    openblas_set_num_threads(1);  // Ember's own pool is the only set of threads
    sgemm_peak = 2.0 * n * n * n / (t.median_ms * 1e-3) * 1e-9;
    const int64_t m = 1 << 26;  // 256 MB per array: far beyond any last-level cache
    std::vector<float> x(m, 1.0f), y(m, 2.0f), z(m);
    const Timing tt = time_steps(1, 7, [&] {
      parallel_for(0, m, 1 << 16, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) z[i] = x[i] + 3.0f * y[i];
      });
    });
    triad_gbs = 3.0 * 4 * m / (tt.median_ms * 1e-3) * 1e-9;  // STREAM's count: 3 arrays, no write-allocate
    // Ember's own kernel at its best shape: on an AVX-512 machine it outruns
    // OpenBLAS's Haswell kernel (docs/PERFORMANCE.md), so "of peak" (against
    // OpenBLAS, the reference the targets name) can pass 100% on a single GEMM.
    {
      const Tensor ea = randn({16384, 256}), eb = randn({256, 256});
      const Timing te = time_steps(1, 7, [&] { (void)matmul(ea, eb); });
      ember_gemm = 2.0 * 16384 * 256 * 256 / (te.median_ms * 1e-3) * 1e-9;
    }
    empty_cache();  // its 32 MB must not count in the workloads' peak RSS
    // The best of short windows: on the shared machine a window that got the
    // core to itself is the core's rate; longer ones average in the neighbours.
    for (int i = 0; i < 20; ++i) {
      bf16_peak = std::max(bf16_peak, cpu::bf16_peak_gflops(0.002));
      fp32_fma_peak = std::max(fp32_fma_peak, cpu::fp32_peak_gflops(0.002));
    }
    std::printf(
        "machine: SGEMM peak %.1f GFLOP/s (OpenBLAS, 2048^3, %d thread(s)); Ember's matmul %.1f GFLOP/s "
        "(16384x256 @ 256x256); triad %.1f GB/s; one core's register-only loops: bf16 %.1f GFLOP/s "
        "(vdpbf16ps), fp32 %.1f (vfmadd231ps)\n",
        sgemm_peak, num_threads(), ember_gemm, triad_gbs, bf16_peak, fp32_fma_peak);
    peak = sgemm_peak;
    bandwidth = triad_gbs;
  }

  // On a GPU: float32 GEMM peak through Ember's matmul (cuBLAS, 4096^3) and
  // memory bandwidth as a 256 MB device-to-device copy (read + write).
  void measure_device() {
    const int64_t n = 4096;
    const Tensor a = randn({n, n}, on_dev()), b = randn({n, n}, on_dev());
    const Timing t = time_steps(1, 5, [&] { matmul(a, b); });
    peak = 2.0 * n * n * n / (t.min_ms * 1e-3) * 1e-9;
    const int64_t m = 1 << 26;
    const Tensor x = randn({m}, on_dev());
    Tensor y = empty({m}, on_dev());
    const Timing tc = time_steps(1, 5, [&] { y.copy_(x); });
    bandwidth = 2.0 * 4 * m / (tc.min_ms * 1e-3) * 1e-9;
    bandwidth_name = "device copy";
    std::printf(
        "device %s: SGEMM peak %.1f GFLOP/s (cuBLAS through matmul, 4096^3); copy %.1f GB/s; the fractions "
        "below are of these\n",
        g_dev.str().c_str(), peak, bandwidth);
  }

  // A training step; FLOPs from Ember's matmul counter over one step.
  void step(const std::string& name, int64_t batch, const std::function<void()>& body) {
    reset_peak_rss();
    body();
    const uint64_t f0 = profiler::matmul_flops();
    body();
    const double gflop = static_cast<double>(profiler::matmul_flops() - f0) * 1e-9;
    reset_peak_memory_stats(g_dev);
    const Timing t = time_steps(warmup, steps, body);
    record(name, batch, t, gflop, static_cast<double>(memory_stats(g_dev).peak_allocated) / 1048576.0);
  }

  int64_t only_batch = 0;  // --batch: one batch size of attention_regression (0: both)
  // --precision: the training steps' precisions (fp32: plain float32; bf16 /
  // fp16: forward and loss in an autocast region, core/autocast.h, float32
  // master weights; fp16 with a GradScaler, as PyTorch's recipe).
  std::vector<std::string> precisions{"fp32", "bf16"};

  // A training step's forward + loss in precision prec, backward, unscaling
  // (fp16), clipping at 1 and the optimizer step (app::MixedPrecision). The workload's name gets
  // " bf16" / " fp16" appended for the 16-bit steps.
  template <class Forward>
  void train_steps(const std::string& name, int64_t batch, optim::Optimizer& opt, const std::vector<Tensor>& params,
                   Forward forward_loss) {
    for (const std::string& prec : precisions) {
      app::MixedPrecision mp(prec, g_dev.type);  // apps/common/precision.h
      step(mp.low() ? name + " " + prec : name, batch, [&] {
        opt.zero_grad();
        Tensor loss;
        {
          const AutocastGuard region = mp.region();
          loss = forward_loss();
        }
        mp.backward_step(loss, opt, params, 1.0);
      });
    }
  }

  void attention_regression() {
    for (int64_t batch : {32, 256}) {
      if (only_batch && batch != only_batch) continue;
      ar::TokenTransformer model;
      model.to(g_dev);
      model.train();
      optim::Adam opt(model.parameters(), optim::AdamOptions{.lr = 1e-3, .weight_decay = 1e-6});
      Generator g(1);
      std::vector<Tensor> xs;  // 8 batches in turn, so the model keeps learning
      for (int i = 0; i < 8; ++i) xs.push_back(uniform({batch, 50}, 0, 5, on_dev(), &g));
      int it = 0;
      train_steps("attention_regression train step", batch, opt, model.parameters(), [&] {
        const Tensor& x = xs[it++ % 8];
        const Tensor y = add(mul(sin(x), 2.0), pow(x, 0.8));
        return mse_loss(model(x), y);
      });
    }
  }

  void vit() {
    const int64_t batch = 128;
    nn::VisionTransformerOptions o;  // 28x28, patch 7, width 64, depth 4, 4 heads, MLP 128
    nn::VisionTransformer model(o);
    model.to(g_dev);
    model.train();
    optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.05), optim::AdamW::defaults());
    Generator g(2);
    std::vector<std::pair<Tensor, Tensor>> data;  // 8 batches in turn
    for (int i = 0; i < 8; ++i)
      data.emplace_back(randn({batch, 1, 28, 28}, on_dev(), &g), randint(0, 10, {batch}, on_dev(kInt64), &g));
    int it = 0;
    train_steps("vit train step", batch, opt, model.parameters(), [&] {
      const auto& [x, t] = data[it++ % 8];
      return cross_entropy(model(x), t, Reduction::Mean, -100, 0.1);
    });
  }

  // The CNN teacher's convolutions (3x3, padding 1, batch 128) forward and
  // backward (input, weight and bias gradients), then a whole training step of
  // the teacher (nn::ResNet with its defaults: 1 -> 32 -> 64 -> 128 channels on
  // 28x28, 14x14, 7x7; SGD with momentum). tools/bench_torch.py times the same.
  void conv() {
    const int64_t batch = 128;
    struct S {
      int64_t cin, cout, hw, stride;
    };
    for (const S& s : std::vector<S>{
             {1, 32, 28, 1}, {32, 32, 28, 1}, {32, 64, 28, 2}, {64, 64, 14, 1}, {64, 128, 14, 2}, {128, 128, 7, 1}}) {
      const Tensor x = randn({batch, s.cin, s.hw, s.hw}, on_dev()).requires_grad_();
      const Tensor w = mul(randn({s.cout, s.cin, 3, 3}, on_dev()), 0.1).requires_grad_();
      const Tensor b = zeros({s.cout}, on_dev()).requires_grad_();
      const int64_t ho = (s.hw + 2 - 3) / s.stride + 1;
      const double gflop = 3 * 2.0 * batch * s.cout * ho * ho * s.cin * 9 * 1e-9;  // forward + two backward GEMMs
      char name[96];
      std::snprintf(name, sizeof name, "conv2d fwd+bwd %lld->%lld %lldx%lld s%lld", static_cast<long long>(s.cin),
                    static_cast<long long>(s.cout), static_cast<long long>(s.hw), static_cast<long long>(s.hw),
                    static_cast<long long>(s.stride));
      record(name, batch,
             time_steps(std::min(warmup, 5), steps,
                        [&] {
                          sum(conv2d(x, w, b, {s.stride, s.stride}, {1, 1})).backward();
                        }),
             gflop, 0);
    }
    nn::ResNet model;
    model.to(g_dev);
    model.train();
    optim::SGD opt(model.parameters(),
                   optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
    Generator g(3);
    std::vector<std::pair<Tensor, Tensor>> data;  // 4 batches in turn
    for (int i = 0; i < 4; ++i)
      data.emplace_back(randn({batch, 1, 28, 28}, on_dev(), &g), randint(0, 10, {batch}, on_dev(kInt64), &g));
    int it = 0;
    step("resnet teacher train step", batch, [&] {
      const auto& [x, t] = data[it++ % 4];
      opt.zero_grad();
      cross_entropy(model(x), t).backward();
      opt.step();
    });
  }

  void matmul_shapes() {
    table_header(
        "matmul at the models' shapes: Ember (its pool, OpenBLAS single-threaded underneath) vs raw "
        "OpenBLAS on the same threads");
    struct S {
      const char* name;
      int64_t m, n, k;
    };
    const std::vector<S> shapes = {
        {"linear 1600x64 -> 192", 1600, 192, 64},   {"linear 1600x64 -> 256", 1600, 256, 64},
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f,
                    static_cast<const float*>(x.data_ptr()), s.k, static_cast<const float*>(w.data_ptr()), s.k, 0.0f,
                    c.data(), s.n);
      });
      openblas_set_num_threads(1);
      record(std::string("openblas ") + s.name, s.m, raw, gflop, 0);
    }
    for (int64_t b : {128, 1024}) {  // attention scores: (B*H, 50, 16) @ (B*H, 16, 50)
      const Tensor q = randn({b, 50, 16}, on_dev()), k = randn({b, 16, 50}, on_dev());
      record("ember bmm scores 50x16 @ 16x50", b, time_steps(warmup, steps * 5, [&] { matmul(q, k); }),
             2.0 * b * 50 * 50 * 16 * 1e-9, 0);
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
  void bgemm_shapes() {
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
                                   {"ar b256 linear2 forward", 12800, 64, 256, false, true}};
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
  void kernels() {
    std::printf("\nmemory-bound kernels on 64 MB tensors, GB/s against the %s's %.1f GB/s\n", bandwidth_name,
                bandwidth);
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
  }

  // Causal self-attention (GPT's: batch 4, 4 heads of 32) forward and
  // backward, the fused kernel (ops/causal_attention.h) against the composed
  // multi_head_self_attention with the causal mask. The "tensorMB" column of
  // these rows is the most tensor memory a step holds beyond its input and
  // output gradient (the allocator's peak minus what was allocated before
  // the step): the composed path's (N, H, T, T) scores, weights and their
  // gradients grow with T^2 (64 MB each at T = 1024), the fused one's
  // (N, H, T) log-sum-exps, output and input gradient with T.
  void causal_attention() {
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
  }

  // Generation speed of the nanogpt-cpu model size (4 layers, 4 heads,
  // width 128, vocabulary 65) from a one-token prompt to the full context:
  // with the KV cache each token is one position's work; without it every
  // token re-encodes the whole sequence so far. Untrained weights: the speed
  // does not depend on them.
  void gpt_generate() {
    std::printf("\nGPT generation, tokens per second (4 layers, 4 heads, width 128), context - 1 new tokens\n");
    std::printf("%-34s %9s %9s %9s\n", "workload", "context", "ms", "tokens/s");
    for (int64_t T : {64, 256}) {
      nn::GPTConfig cfg;
      cfg.vocab_size = 65, cfg.block_size = T;
      Generator gen(1);
      nn::GPT m(cfg, &gen);
      for (bool cache : {true, false}) {
        nn::SampleOptions o;
        o.use_cache = cache;
        const Timing t = time_steps(1, std::max(3, steps / 4), [&] { m.generate({0}, T - 1, o); });
        const double tps = static_cast<double>(T - 1) / (t.median_ms * 1e-3);
        const std::string name = cache ? "gpt generate, KV cache" : "gpt generate, no cache";
        std::printf("%-34s %9lld %9.2f %9.0f\n", name.c_str(), static_cast<long long>(T), t.median_ms, tps);
        records.push_back({{"workload", name},
                           {"context", T},
                           {"median_ms", t.median_ms},
                           {"min_ms", t.min_ms},
                           {"max_ms", t.max_ms},
                           {"cpu_ms", t.cpu_ms},
                           {"tokens_per_second", tps},
                           {"threads", num_threads()}});
      }
    }
  }

  void adamw() {
    nn::VisionTransformer model(nn::VisionTransformerOptions{});
    model.to(g_dev);
    optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.05), optim::AdamW::defaults());
    for (Tensor& p : model.parameters()) p.mutable_grad() = ones_like(p);
    table_header("optimizer");
    record("adamw step over ViT parameters (" + std::to_string(model.num_parameters()) + ")", 0,
           time_steps(warmup, steps * 10, [&] { opt.step(); }), 0, 0);
  }

  void overhead() {
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
};

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "all", json, device = "cpu";
  int threads = 0;
  bool check = false;
  Bench b;
  CLI::App cli{"Ember benchmarks: training steps of the demo models and the kernels they are made of"};
  cli.add_option("--workload", workload,
                 "all, attention_regression, vit, conv, matmul, bgemm, kernels, adamw, causal_attention, gpt_generate "
                 "or overhead")
      ->check(CLI::IsMember({"all", "attention_regression", "vit", "conv", "matmul", "bgemm", "kernels", "adamw",
                             "causal_attention", "gpt_generate", "overhead"}));
  cli.add_option("--steps", b.steps, "timed steps per workload (median, min and max reported; at most 100000)")
      ->check(ember::app::int_range(1, 100000));
  cli.add_option("--warmup", b.warmup, "untimed steps first (at most 100000)")->check(ember::app::int_range(0, 100000));
  ember::app::add_threads(cli, threads);
  ember::app::add_device(cli, device,
                         "cpu (default) or cuda / cuda:N (a build with the CUDA backend and a GPU; the machine line "
                         "and the raw OpenBLAS rows stay CPU figures)");
  cli.add_option("--batch", b.only_batch, "attention_regression: run only this batch size (32 or 256)")
      ->check(CLI::IsMember({0, 32, 256}));
  std::string precision = "fp32,bf16";
  cli.add_option("--precision", precision,
                 "training steps in these precisions, comma-separated: fp32, bf16, fp16 (autocast regions with "
                 "float32 master weights; fp16 adds a GradScaler and on this CPU runs through float32, so it is "
                 "slower than fp32); default fp32,bf16")
      ->check([](const std::string& v) -> std::string {
        std::string item;
        std::stringstream in(v);
        int n = 0;
        while (std::getline(in, item, ','))
          if (item != "fp32" && item != "bf16" && item != "fp16")
            return "unknown precision '" + item + "'";
          else
            ++n;
        return n ? "" : "no precision given";
      });
  ember::app::output_file(cli.add_option("--json", json, "write one record per workload and batch size to this file"));
  ember::app::add_check(cli, check);
  return ember::app::run_main("bench", cli, argc, argv, [&] {
    ember::app::apply_threads(threads);
    b.precisions.clear();
    {
      std::string item;
      std::stringstream in(precision);
      while (std::getline(in, item, ',')) b.precisions.push_back(item);
    }
    if (!json.empty()) ember::app::check_output_file(json, "--json");  // before minutes of measuring
    g_dev = Device(device);
    if (!g_dev.is_cpu()) sync_device();  // no GPU: the clear error now, before the CPU measurements
    if (check) {
      std::printf("bench: check ok\n");
      return 0;
    }
    manual_seed(0);
    auto want = [&](const char* w) { return workload == "all" || workload == w; };
    if (workload != "overhead") b.measure_machine();
    if (workload != "overhead" && !g_dev.is_cpu()) b.measure_device();
    if (want("attention_regression") || want("vit"))
      Bench::table_header("training steps (forward, backward, clipping, optimizer)");
    if (want("attention_regression")) b.attention_regression();
    if (want("vit")) b.vit();
    if (want("conv")) {
      Bench::table_header("the CNN teacher: conv2d forward+backward at its shapes, and its training step");
      b.conv();
    }
    if (want("matmul")) b.matmul_shapes();
    if (want("bgemm") && g_dev.is_cpu()) b.bgemm_shapes();
    if (want("kernels")) b.kernels();
    if (want("adamw")) b.adamw();
    if (want("causal_attention")) b.causal_attention();
    if (want("gpt_generate")) b.gpt_generate();
    if (want("overhead")) b.overhead();
    if (!json.empty())
      ember::app::write_json(json, nlohmann::ordered_json{{"threads", num_threads()},
                                                          {"device", g_dev.str()},
                                                          {"sgemm_peak_gflops", b.sgemm_peak},
                                                          {"ember_matmul_gflops", b.ember_gemm},
                                                          {"triad_gb_per_s", b.triad_gbs},
                                                          {"bf16_register_peak_gflops", b.bf16_peak},
                                                          {"fp32_register_peak_gflops", b.fp32_fma_peak},
                                                          {"reference_gflops", b.peak},
                                                          {"reference_gb_per_s", b.bandwidth},
                                                          {"records", b.records}});
    return 0;
  });
}
