// Ember's benchmark runner: full training steps of the demo models through
// the public API, and the pieces they are made of, each against what this
// machine can do (measured here, in the same run).
//
//   attention_regression  training step of the demo transformer, batch 32 and 256
//   vit                   training step of the ViT (28x28, patch 7, width 64,
//                         depth 4, 4 heads, MLP 128), batch 128
//   conv                  conv2d forward+backward at the CNN teacher's shapes, and
//                         the teacher's (nn::ResNet) training step, batch 128
//   matmul                linear / bmm at the models' shapes, Ember and raw OpenBLAS;
//                         on a GPU also GPT-2's bf16 GEMMs (its vocabulary padded and not)
//   bgemm                 the bf16 GEMM kernel against the float32 one at the models'
//                         linear shapes, 1 thread, alternating, and against the bf16 peak
//   kernels               softmax, layer_norm, gelu, cross_entropy forward and
//                         backward, and one row through a Linear (decoding's
//                         GEMV), in GB/s against a measured triad bandwidth
//   gpt                   training step of the character-level GPT (nanoGPT's
//                         CPU configuration: 4 layers, width 128, context 64), batch 12
//   adamw                 one AdamW step over the ViT's parameters
//   causal_attention      causal self-attention forward + backward at context
//                         256-1024: the fused FlashAttention kernel against
//                         the composed path with a mask (time and memory)
//   gpt2                  GPT-2 124M training step (AdamW, batch and context
//                         from --gpt2-batch / --gpt2-seq: llm.c's settings), tokens/s;
//                         with --gpt2-checkpoint / --gpt2-tokens / --gpt2-recipe
//                         a training run from those files instead, from step 0,
//                         each step's loss recorded (gpt2_files.cpp)
//   gpt_generate          tokens/s of GPT::generate (nanoGPT's CPU model
//                         size) at context 64 and 256, with and without the
//                         KV cache; GPT-2 124M's decoding at contexts 64,
//                         256 and 1024 in fp32 and bf16 against its
//                         bandwidth bound
//   overhead              framework cost per op on 1-element tensors
//
// This file holds the flags and main(); the workloads are members of Bench
// (bench.h): the training steps and generation in model_workloads.cpp, the
// kernels in kernel_workloads.cpp, timing and the machine's references in
// timing.cpp.
//
//   build/bin/bench [--workload all|NAME] [--steps N] [--warmup N] [--threads K] [--device cpu|cuda]
//                   [--precision fp32,bf16,fp16] [--json FILE]
//   build/bin/bench --workload gpt2 [--gpt2-checkpoint FILE|DIR] [--gpt2-tokens FILE] [--gpt2-recipe
//   bench|llmc|llmc-cuda]
//                   [--gpt2-batch B] [--gpt2-seq T] [--steps N]
//
// --precision: the training steps (attention_regression, vit) in each listed
// precision; a 16-bit step's workload name ends in " bf16" / " fp16".
//
// --device cuda runs every workload on the GPU (models, optimizer state and
// data there; every timed call synchronised) and measures the references on
// the device too: SGEMM peak through cuBLAS, bandwidth as a device-to-device
// copy. The machine line (CPU) is printed either way.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <sstream>
#include <string>

#include "app.h"
#include "bench.h"

using namespace ember;
using ember::bench::Bench;
using ember::bench::g_dev;
using ember::bench::sync_device;

int main(int argc, char** argv) {
  std::string workload = "all", json, device = "cpu";
  int threads = 0;
  bool check = false;
  Bench b;
  CLI::App cli{"Ember benchmarks: training steps of the demo models and the kernels they are made of"};
  cli.add_option("--workload", workload,
                 "all, attention_regression, vit, gpt, conv, matmul, bgemm, kernels, adamw, causal_attention, gpt2, "
                 "gpt_generate or overhead")
      ->check(CLI::IsMember({"all", "attention_regression", "vit", "gpt", "conv", "matmul", "bgemm", "kernels", "adamw",
                             "causal_attention", "gpt2", "gpt_generate", "overhead"}));
  cli.add_option("--steps", b.steps, "timed steps per workload (median, min and max reported; at most 100000)")
      ->check(ember::app::int_range(1, 100000));
  cli.add_option("--warmup", b.warmup, "untimed steps first (at most 100000)")->check(ember::app::int_range(0, 100000));
  ember::app::add_threads(cli, threads);
  ember::app::add_device(cli, device,
                         "cpu (default) or cuda / cuda:N (a build with the CUDA backend and a GPU; the machine line "
                         "and the raw OpenBLAS rows stay CPU figures)");
  cli.add_option("--batch", b.only_batch, "attention_regression: run only this batch size (32 or 256)")
      ->check(CLI::IsMember({0, 32, 256}));
  cli.add_option("--gpt2-batch", b.gpt2_batch, "gpt2: sequences per step (default 4, llm.c's CPU setting)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cli.add_option("--gpt2-seq", b.gpt2_seq, "gpt2: tokens per sequence (default 64; at most 1024, GPT-2's context)")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  ember::app::input_file(cli.add_option(
      "--gpt2-checkpoint", b.gpt2_checkpoint,
      "gpt2: a training run from these weights: llm.c's checkpoint file (gpt2_124M.bin) or a Hugging Face GPT-2 "
      "directory (config.json + model.safetensors); from step 0, each step's time and loss recorded"));
  ember::app::input_file(cli.add_option(
      "--gpt2-tokens", b.gpt2_tokens,
      "gpt2: a training run on the batches of this token file (llm.c's format: magic 20240520, uint16 tokens), in "
      "order: batch k is tokens [k B T, k B T + B T + 1), inputs and targets one apart; from step 0, each step's "
      "time and loss recorded"));
  cli.add_option("--gpt2-recipe", b.gpt2_recipe,
                 "gpt2: bench (AdamW lr 3e-4, clipping at 1: the timing workload's), llmc (llm.c's train_gpt2.c: "
                 "AdamW lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay, no clipping) or llmc-cuda (llm.c's "
                 "train_gpt2.cu at -l 3e-4 -c 0: AdamW lr 3e-4, betas 0.9/0.95, eps 1e-8, no weight decay, clipping "
                 "at 1); a run from step 0 as with --gpt2-tokens")
      ->check(CLI::IsMember({"bench", "llmc", "llmc-cuda"}));
  cli.add_option("--graphs", b.graphs,
                 "on a GPU, also time each training step replayed as a CUDA graph (default true)");
  cli.add_flag("--profile", b.profile,
               "after each training step's timing, one step with the profiler on (on a GPU synchronising around "
               "each kernel): the kernels that take its time");
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
    const bool gpt2_files = (workload == "all" || workload == "gpt2") && b.gpt2_from_files();
    if (b.gpt2_from_files() && !gpt2_files)
      throw ember::app::UsageError("--gpt2-checkpoint/--gpt2-tokens/--gpt2-recipe: not for --workload " + workload);
    if (gpt2_files) b.gpt2_prepare();  // a bad file: one error now, before minutes of measuring
    if (check) {
      std::printf("bench: check ok\n");
      return 0;
    }
    manual_seed(0);
    auto want = [&](const char* w) { return workload == "all" || workload == w; };
    if (workload != "overhead") b.measure_machine();
    if (workload != "overhead" && !g_dev.is_cpu()) b.measure_device();
    if (want("attention_regression") || want("vit") || want("gpt"))
      Bench::table_header("training steps (forward, backward, clipping, optimizer)");
    if (want("attention_regression")) b.attention_regression();
    if (want("vit")) b.vit();
    if (want("gpt")) b.gpt_train();
    if (want("conv")) {
      Bench::table_header("the CNN teacher: conv2d forward+backward at its shapes, and its training step");
      b.conv();
    }
    if (want("matmul")) b.matmul_shapes();
    if (want("bgemm") && g_dev.is_cpu()) b.bgemm_shapes();
    if (want("kernels")) b.kernels();
    if (want("adamw")) b.adamw();
    if (want("causal_attention")) b.causal_attention();
    if (gpt2_files) {
      b.gpt2_run();
    } else if (want("gpt2")) {
      Bench::table_header("GPT-2 124M training step (forward, backward, clipping, AdamW)");
      b.gpt2_train();
    }
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
