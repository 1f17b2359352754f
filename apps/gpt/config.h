// The GPT demo's run configuration: its flags (kept in one place, so they
// can move onto shared app machinery as a block), the preset, the corpus,
// and what model and checkpoint files hold (configuration and vocabulary in
// their metadata, checked when read back). Checkpoints have the layout every
// app's has (nn/checkpoint.h: model., optimizer., scheduler.), reloaded
// exactly or refused; the older GPT layout is still read, once, with a note.
#pragma once

#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "onnx_export.h"
#include "train_loop.h"

namespace gpt {
namespace nn = ember::nn;
namespace optim = ember::optim;
using ember::Generator;
using ember::StateDict;

/// Everything a run needs. The defaults are the fortunes configuration.
struct Config {
  // The fortunes default: wider and twice the context of nanogpt-cpu (2.2x
  // its parameters, 4.5x its work per step); the corpus (2.6 MB) is seen
  // about once, so no dropout.
  int64_t layers = 4, heads = 4, width = 192, context = 128, batch = 12, iters = 1500;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, dropout = 0.0, beta2 = 0.99, clip = 1.0;
  int64_t warmup = 100, eval_interval = 250, eval_iters = 20, sample_tokens = 600, top_k = 0, stop_after = 0;
  double temperature = 0.8, top_p = 1.0;
  bool bias = true;
  uint64_t seed = 1337;
  int threads = 0;
  std::string preset, data, out = "out/gpt", resume, weights, prompt;
  bool eval_only = false, generate = false, quiet = false, check = false;
  // GPT-2 (apps/gpt/gpt2_run.h): a Hugging Face directory or a GPT-2 shape
  // to start from, the tokenizer (resolved by finish_flags: gpt2 with --hf or
  // --init, char otherwise) and where its files are.
  std::string hf, init, tokenizer, tokenizer_dir;
  std::string precision = "fp32";    // fp32, or bf16 autocast (apps/common/precision.h)
  ember::app::OnnxExportFlags onnx;  // --export-onnx FILE [--export-onnx-check] (not stored)
  bool gpt2() const { return tokenizer == "gpt2"; }
};

/// The training curves: train_loss and val_loss at each evaluation, against "iters".
inline ember::app::MetricsHistory make_history() { return ember::app::MetricsHistory("iters"); }

/// Registers every flag on app.
void add_flags(CLI::App& app, Config& c);
/// After parsing: applies --preset, checks what CLI11 cannot (finite
/// values, heads dividing width, the modes' companions); app::UsageError.
void finish_flags(const CLI::App& app, Config& c);

/// The training text and where it came from.
struct Corpus {
  std::string text, name, description;
};
/// --data FILE, or the fortunes files (regular files without an extension,
/// in name order); ember::IOError when none can be read.
Corpus read_corpus(const Config& c);

nn::GPTConfig model_config(const Config& c, int64_t vocab_size);
nlohmann::ordered_json config_json(const Config& c);

/// model.safetensors: the parameters, with config, vocab and final_val_loss in the metadata.
void save_model(const std::filesystem::path& path, const Config& c, const nn::CharTokenizer& vocab,
                const nn::GPT& model, double final_val_loss);
/// A model.safetensors or checkpoint.safetensors: the model it holds and its
/// vocabulary; IOError when the metadata is missing or disagrees with the tensors.
std::unique_ptr<nn::GPT> load_model(const std::string& path, nn::CharTokenizer& vocab,
                                    std::map<std::string, std::string>& meta);

/// checkpoint.safetensors: nn::save_training_checkpoint's model, AdamW and LR
/// schedule, with the configuration, vocabulary, iteration, the batch and
/// dropout generators' positions, the training clock and the curves in the metadata.
void save_checkpoint(const std::filesystem::path& path, const Config& c, const nn::CharTokenizer& vocab,
                     const nn::GPT& model, const optim::AdamW& opt, const optim::LRScheduler& sched,
                     const Generator& batches, int64_t iter, double train_seconds,
                     const ember::app::MetricsHistory& hist);
/// Puts a checkpoint's state back exactly (nn::load_training_checkpoint, IOError
/// naming what would differ); returns the iteration to continue from. A file
/// in the older GPT layout (model tensors without a prefix, no schedule: the
/// schedule is a function of the iteration) is converted, with a note on stderr.
int64_t restore(const StateDict& ckpt, const std::map<std::string, std::string>& meta, const std::string& path,
                nn::GPT& model, optim::AdamW& opt, optim::LRScheduler& sched, Generator& batches, double& train_seconds,
                ember::app::MetricsHistory& hist);
/// --export-onnx (apps/common/onnx_export.h): the model as a graph from
/// "tokens" (batch, sequence) to "logits" (batch, sequence, vocabulary),
/// both axes dynamic (the sequence up to the model's context); traced on 2
/// windows of half the context from `val`, checked on 4 of the whole
/// context. `what` starts the file's doc string (the model, its tokens).
void export_onnx(const Config& c, nn::GPT& model, const std::vector<int64_t>& val, const std::string& what);

/// The run configuration and vocabulary a file's metadata records.
Config config_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);
nn::CharTokenizer vocab_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);

}  // namespace gpt
