// The gpt2 workload from files: a training run that starts from a GPT-2
// checkpoint (llm.c's file or a Hugging Face directory, --gpt2-checkpoint)
// on the batches of a token file in llm.c's format (--gpt2-tokens), so that
// the same run can be made in llm.c and PyTorch and the losses compared step
// by step (tools/gpt2_compare.py). Unlike the timing workload it starts at
// step 0 with no warm-up: each of --steps steps is timed, and its loss (the
// forward pass before that step's update, as llm.c prints it) recorded.
// --gpt2-recipe llmc is train_gpt2.c's optimizer: AdamW at lr 1e-4, betas
// 0.9 / 0.999, eps 1e-8, no weight decay, no gradient clipping; llmc-cuda is
// train_gpt2.cu's as tools/gpt2_compare_cuda.py runs it (-l 3e-4 -c 0): AdamW
// at lr 3e-4, betas 0.9 / 0.95, eps 1e-8, no weight decay, the gradients'
// norm clipped at 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ember/core/file_io.h>
#include <ember/nn/gpt2_checkpoint.h>

#include "app.h"  // apps/common: UsageError
#include "bench.h"
#include "precision.h"  // apps/common: --precision's autocast region and step

namespace ember::bench {

namespace {

// --gpt2-recipe's optimizers (the flag's values are checked in main.cpp).
struct Recipe {
  const char* text;   // printed and recorded
  const char* label;  // appended to the workload's name
  optim::AdamWOptions adamw;
  double clip;  // the gradients' norm clipped to this; 0: not clipped
};
Recipe recipe_named(const std::string& name) {
  if (name == "llmc")
    return {"llm.c's train_gpt2.c: AdamW lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay, no clipping",
            " llm.c recipe",
            {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0},
            0.0};
  if (name == "llmc-cuda")
    return {"llm.c's train_gpt2.cu: AdamW lr 3e-4, betas 0.9/0.95, eps 1e-8, no weight decay, clipping at 1",
            " llm.c cuda recipe",
            {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0},
            1.0};
  return {"bench: AdamW lr 3e-4, no weight decay, clipping at 1", "", {.lr = 3e-4, .weight_decay = 0.0}, 1.0};
}

// GPT-2 124M, the model when no checkpoint is given: its sizes and its tanh
// GELU (the timing workload, model_workloads.cpp, keeps the exact one).
nn::GPTConfig gpt2_124m() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 50257, cfg.block_size = 1024, cfg.n_layer = 12, cfg.n_head = 12, cfg.n_embd = 768;
  cfg.gelu = GeluApproximation::Tanh;
  return cfg;
}

double cpu_ms_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

// llm.c's token file (its dev/data/data_common.py writes it): 256 int32 of
// header (magic 20240520, version 1, the token count), then the tokens as
// little-endian uint16. Every fault is one IOError naming the file.
std::vector<uint16_t> read_llmc_tokens(const std::string& path) {
  const std::string what = "llm.c token file";
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in, IOError, what, " '", path, "': cannot open");
  int32_t h[256] = {};
  in.read(reinterpret_cast<char*>(h), sizeof h);
  EMBER_CHECK(in.gcount() == static_cast<std::streamsize>(sizeof h), IOError, what, " '", path, "': ", in.gcount(),
              " bytes, shorter than the 1024-byte header");
  EMBER_CHECK(h[0] == 20240520, IOError, what, " '", path, "': bad magic ", h[0],
              " (llm.c's token files start with 20240520)");
  EMBER_CHECK(h[1] == 1, IOError, what, " '", path, "': version ", h[1], ", expected 1");
  EMBER_CHECK(h[2] > 0, IOError, what, " '", path, "': the header gives ", h[2], " tokens");
  const uint64_t expected = sizeof h + 2 * static_cast<uint64_t>(h[2]);
  const uint64_t size = std::filesystem::file_size(path);
  EMBER_CHECK(size == expected, IOError, what, " '", path, "': ", size < expected ? "truncated: " : "",
              "the header gives ", h[2], " tokens (", expected, " bytes with the header), the file holds ", size,
              " bytes");
  std::vector<uint16_t> tokens(static_cast<size_t>(h[2]));
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(2 * tokens.size()));
  EMBER_CHECK(in.gcount() == static_cast<std::streamsize>(2 * tokens.size()), IOError, what, " '", path, "': read ",
              in.gcount(), " of ", 2 * tokens.size(), " token bytes");
  return tokens;
}

// The model the run starts from: the checkpoint's, or GPT-2 124M's random
// init (generator 4, as the timing workload's). A Hugging Face config's
// resid_pdrop becomes the model's dropout; the run has none (llm.c has none),
// so such a model is rebuilt without it and given the same tensors.
std::shared_ptr<nn::GPT> Bench::gpt2_model() const {
  if (gpt2_checkpoint.empty()) {
    Generator gen(4);
    return std::make_shared<nn::GPT>(gpt2_124m(), &gen);
  }
  if (!std::filesystem::is_directory(gpt2_checkpoint)) return nn::load_gpt2_llmc(gpt2_checkpoint);
  std::shared_ptr<nn::GPT> m = nn::load_gpt2_hf(gpt2_checkpoint);
  if (m->cfg.dropout == 0) return m;
  nn::GPTConfig c = m->cfg;
  c.dropout = 0;
  auto plain = std::make_shared<nn::GPT>(c);
  plain->load_state_dict(m->state_dict());
  return plain;
}

// Reads and checks the files before anything is measured (and under
// --check): the model loads, the token file holds at least one batch of
// --gpt2-batch x --gpt2-seq + 1 tokens, each below the model's vocabulary,
// and --gpt2-seq fits its context.
void Bench::gpt2_prepare() {
  gpt2_first_model = gpt2_model();
  const nn::GPTConfig& c = gpt2_first_model->cfg;
  const std::string from = gpt2_checkpoint.empty() ? "GPT-2 124M" : "the checkpoint '" + gpt2_checkpoint + "'";
  if (gpt2_seq > c.block_size)
    throw app::UsageError("--gpt2-seq " + std::to_string(gpt2_seq) + " is longer than the context of " + from + " (" +
                          std::to_string(c.block_size) + ")");
  if (gpt2_tokens.empty()) return;
  gpt2_token_data = read_llmc_tokens(gpt2_tokens);
  const int64_t need = gpt2_batch * gpt2_seq + 1;
  if (static_cast<int64_t>(gpt2_token_data.size()) < need)
    throw app::UsageError("--gpt2-tokens '" + gpt2_tokens + "': " + std::to_string(gpt2_token_data.size()) +
                          " tokens, fewer than one batch of --gpt2-batch x --gpt2-seq + 1 = " + std::to_string(need));
  const auto top = std::max_element(gpt2_token_data.begin(), gpt2_token_data.end());
  EMBER_CHECK(*top < c.vocab_size, IOError, "llm.c token file '", gpt2_tokens, "': token ", *top, " at position ",
              top - gpt2_token_data.begin(), " is outside the vocabulary of ", from, " (", c.vocab_size, ")");
}

// The run: per precision a fresh model and optimizer, then --steps steps on
// the batches in turn (batch k: tokens [k B T, k B T + B T + 1), inputs and
// targets one apart, as llm.c's loader reads them without shuffling;
// random tokens when no token file is given).
void Bench::gpt2_run() {
  const int64_t B = gpt2_batch, T = gpt2_seq;
  const Recipe recipe = recipe_named(gpt2_recipe);
  std::shared_ptr<nn::GPT> model = std::move(gpt2_first_model);
  const int64_t V = model->cfg.vocab_size;
  std::vector<std::pair<Tensor, Tensor>> batches;
  if (gpt2_token_data.empty()) {
    Generator gen(4);
    for (int i = 0; i < 4; ++i)
      batches.emplace_back(randint(0, V, {B, T}, on_dev(kInt64), &gen), randint(0, V, {B, T}, on_dev(kInt64), &gen));
  } else {
    const int64_t n = std::min<int64_t>(steps, (static_cast<int64_t>(gpt2_token_data.size()) - 1) / (B * T));
    for (int64_t k = 0; k < n; ++k) {
      Tensor x = empty({B, T}, TensorOptions(kInt64)), y = empty({B, T}, TensorOptions(kInt64));
      const uint16_t* src = gpt2_token_data.data() + k * B * T;
      for (int64_t i = 0; i < B * T; ++i) x.data<int64_t>()[i] = src[i], y.data<int64_t>()[i] = src[i + 1];
      batches.emplace_back(x.to(g_dev), y.to(g_dev));
    }
  }
  char size_text[32];  // "124M", "0.0297M"
  std::snprintf(size_text, sizeof size_text, "%.3gM", static_cast<double>(model->num_parameters()) * 1e-6);
  const std::string size = size_text;
  std::printf("\nGPT-2 %s training run from step 0, batch %lld, context %lld; %s\n", size.c_str(),
              static_cast<long long>(B), static_cast<long long>(T), recipe.text);
  for (const std::string& prec : precisions) {
    if (!model) model = gpt2_model();
    model->to(g_dev);
    model->train();
    const std::vector<Tensor> params = model->parameters();
    optim::AdamW opt(params, recipe.adamw);
    app::MixedPrecision mp(prec, g_dev.type);
    const std::string label =
        "gpt2 " + size + " run T=" + std::to_string(T) + recipe.label + (mp.low() ? " " + prec : "");
    reset_peak_rss();
    reset_peak_memory_stats(g_dev);
    std::vector<double> ms, losses;
    double gflop = 0;
    const double cpu0 = cpu_ms_now();
    for (int s = 0; s < steps; ++s) {
      const auto& [x, y] = batches[static_cast<size_t>(s) % batches.size()];
      const uint64_t f0 = profiler::matmul_flops();
      const auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      Tensor loss;
      {
        const AutocastGuard region = mp.region();
        loss = model->loss(x, y);
      }
      mp.backward_step(loss, opt, params, recipe.clip);
      losses.push_back(loss.item<double>());  // reads the device: the step is done
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (s == 0) gflop = static_cast<double>(profiler::matmul_flops() - f0) * 1e-9;
      std::printf("step %d: train loss %.6f (took %.3f ms)\n", s, losses.back(), ms.back());
      std::fflush(stdout);
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const Timing t{sorted[sorted.size() / 2], sorted.front(), sorted.back(), (cpu_ms_now() - cpu0) / steps};
    table_header("the run's steps");
    record(label, B, t, gflop, static_cast<double>(memory_stats(g_dev).peak_allocated) / 1048576.0);
    nlohmann::ordered_json& r = records.back();
    r["tokens_per_second"] = static_cast<double>(B * T) / (t.median_ms * 1e-3);
    r["parameters"] = model->num_parameters();
    r["checkpoint"] = gpt2_checkpoint;
    r["tokens"] = gpt2_tokens;
    r["recipe"] = recipe.text;
    r["precision"] = prec;
    r["losses"] = losses;
    r["step_ms"] = ms;
    model.reset();  // the next precision starts from the file again
  }
}

}  // namespace ember::bench
