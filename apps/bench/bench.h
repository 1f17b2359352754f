// What the bench's source files share: the device the workloads run on, how
// a call is timed and how much memory it took, and Bench, which holds the
// run's settings, the machine's reference figures and the records, with one
// member function per workload. timing.cpp defines the helpers, the records
// and the references; model_workloads.cpp the training steps and generation;
// kernel_workloads.cpp the GEMM, memory-bound, attention and overhead
// workloads; gpt2_files.cpp the GPT-2 training run from files; main.cpp the
// flags.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ember/ember.h>

extern "C" void openblas_set_num_threads(int);

namespace ember::bench {

// --device: where every workload's tensors and models live (timing.cpp).
extern Device g_dev;
TensorOptions on_dev(DType dt = kFloat32);
// On a GPU, waits for the stream by reading one element back.
void sync_device();

// Wall times, and the process's CPU time per call (all threads): on a
// shared machine the wall time grows with the load, the CPU time much less.
struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0, cpu_ms = 0;
};

// The 1-minute load average (the neighbours' builds on the shared machine); -1 when unknown.
double load_average();
// warmup untimed calls, then each of steps calls timed on its own.
Timing time_steps(int warmup, int steps, const std::function<void()>& body);
// Resets the peak resident memory that peak_rss_mb() reports (timing.cpp).
void reset_peak_rss();
double peak_rss_mb();

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

  // One row of a table and one JSON record.
  void record(const std::string& workload, int64_t batch, const Timing& t, double gflop_per_step, double extra_mb);
  static void table_header(const char* what);
  void measure_machine();
  void measure_device();
  void step(const std::string& name, int64_t batch, const std::function<void()>& body);

  int64_t only_batch = 0;
  int64_t gpt2_batch = 4, gpt2_seq = 64;  // --gpt2-batch, --gpt2-seq (llm.c's CPU setting by default)  // --batch: one
                                          // batch size of attention_regression (0: both)
  // --precision: the training steps' precisions (fp32: plain float32; bf16 /
  // fp16: forward and loss in an autocast region, core/autocast.h, float32
  // master weights; fp16 with a GradScaler, as PyTorch's recipe).
  std::vector<std::string> precisions{"fp32", "bf16"};
  // --graphs: on a GPU, training steps also as CUDA graphs (default on).
  bool graphs = true;
  // --profile: after timing a training step, one more step with the
  // profiler on (synchronising around each kernel on a GPU): where its time goes.
  bool profile = false;
  void profile_step(const std::string& name, const std::function<void()>& body);
  // A training step in each of the precisions, on the batches in turn (model_workloads.cpp).
  void train_steps(const std::string& name, int64_t batch, optim::Optimizer& opt, const std::vector<Tensor>& params,
                   const std::vector<std::vector<Tensor>>& batches,
                   const std::function<Tensor(const std::vector<Tensor>&)>& forward_loss);

  // The workloads (model_workloads.cpp).
  void attention_regression();
  void vit();
  void conv();
  void gpt_generate();
  void gpt2_train();
  void gpt_train();

  // The GPT-2 training run from files (gpt2_files.cpp): --gpt2-checkpoint
  // (llm.c's file or a Hugging Face directory), --gpt2-tokens (llm.c's token
  // file), --gpt2-recipe (bench or llmc). Any of them set makes the gpt2
  // workload this run: from step 0, each step's time and loss recorded.
  std::string gpt2_checkpoint, gpt2_tokens, gpt2_recipe = "bench";
  bool gpt2_from_files() const { return !gpt2_checkpoint.empty() || !gpt2_tokens.empty() || gpt2_recipe != "bench"; }
  // Reads and checks the files (before the machine is measured, and under --check).
  void gpt2_prepare();
  void gpt2_run();
  std::shared_ptr<nn::GPT> gpt2_model() const;
  std::shared_ptr<nn::GPT> gpt2_first_model;  // gpt2_prepare's, used by the first precision
  std::vector<uint16_t> gpt2_token_data;
  void adamw();
  // The workloads (kernel_workloads.cpp).
  void matmul_shapes();
  void gpt2_gemms();  // on a GPU: GPT-2's bf16 products, the vocabulary's padded and not
  void bgemm_shapes();
  void kernels();
  void causal_attention();
  void causal_attention_tensor_core();
  void bidirectional_attention_tensor_core();
  void overhead();
};

}  // namespace ember::bench
