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
#include <functional>
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
  // The cosine's length (nanoGPT's lr_decay_iters): --iters for a new run; a
  // resumed run keeps its checkpoint's, whatever --iters it is given, so the
  // rate it continues with is the one the schedule was at. Past it the rate
  // stays at min_lr (optim::NanoGPTCosineLR, as nanoGPT's get_lr).
  int64_t decay_iters = 0;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, dropout = 0.0, beta2 = 0.99, clip = 1.0;
  int64_t warmup = 100, eval_interval = 250, eval_iters = 20, sample_tokens = 600, top_k = 0, stop_after = 0;
  double temperature = 0.8, top_p = 1.0;
  bool bias = true;
  uint64_t seed = 1337;
  int threads = 0;
  std::string preset, data, out = "out/gpt", resume, weights, prompt, device = "cpu";
  bool eval_only = false, generate = false, quiet = false, check = false;
  bool cuda_graph = false;         // --cuda-graph: each training step, or --generate's token step, as a CUDA graph
  bool force_eval = false;         // --force-eval: score or sample from broken weights
  bool allow_data_change = false;  // --allow-data-change: resume on another corpus
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
// loss.png of either path: train and validation loss at each evaluation, on
// a log scale, under `title`.
void save_loss_chart(const ember::app::MetricsHistory& hist, const std::string& title, const std::string& path);

/// Registers every flag on app.
void add_flags(CLI::App& app, Config& c);
/// After parsing: applies --preset, checks what CLI11 cannot (finite
/// values, heads dividing width, the modes' companions); app::UsageError.
void finish_flags(const CLI::App& app, Config& c);
/// What the flags' ranges cannot say (heads dividing width), for a
/// configuration from the flags (file empty) or from `file`'s metadata;
/// fail gets the message and throws.
void check_config(const Config& c, const std::function<void(const std::string&)>& fail, const std::string& file);
/// --resume: the checkpoint's configuration `saved` (read from `path`, whose
/// metadata is `meta`) with what this invocation says about the run itself:
/// the flags of its length and its reports (--iters, --eval-interval,
/// --eval-iters, --sample-tokens, --temperature, --top-k, --top-p,
/// --stop-after, --out, --threads, --device, --quiet, --check,
/// --export-onnx, and --data where the corpus moved) are honoured; the model's,
/// the data's and the optimizer's (--layers, --heads, --width, --context,
/// --batch-size, --lr, --min-lr, --warmup, --weight-decay, --dropout,
/// --seed, --preset, --precision) come from the checkpoint, and one given
/// with another value than the stored one is an app::UsageError naming the
/// flag, both values and the file. --iters below the iteration the
/// checkpoint stopped at is refused likewise.
Config resumed_config(const CLI::App& app, const Config& given, Config saved, const std::string& path,
                      const std::map<std::string, std::string>& meta);
/// Whether a checkpoint's tensors have the shared layout (nn/checkpoint.h:
/// model., optimizer., scheduler.) rather than the older GPT one.
bool shared_layout(const StateDict& sd);
/// A stored configuration describing a model larger than the file's tensors
/// is refused (IOError naming the file) before anything is built.
void check_model_size(const Config& c, const StateDict& tensors, const std::string& path);

/// The metadata key under which a checkpoint records the corpus's
/// fingerprint (app::bytes_fingerprint of its text), checked by --resume.
inline constexpr const char* kDataKey = "data_fingerprint";

/// --device (parsed by its validator) as a device; a CUDA device in a build
/// without the backend, or one that is not there, is an app::UsageError
/// naming the flag, before any work.
ember::Device run_device(const Config& c);

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
/// vocabulary; IOError when the metadata is missing or disagrees with the
/// tensors, or when the weights hold NaN, Inf or overflowing values (with
/// force_eval a warning on stderr instead).
std::unique_ptr<nn::GPT> load_model(const std::string& path, nn::CharTokenizer& vocab,
                                    std::map<std::string, std::string>& meta, bool force_eval = false);

/// checkpoint.safetensors: nn::save_training_checkpoint's model, AdamW and LR
/// schedule, with the configuration, vocabulary, iteration, the batch and
/// dropout generators' positions, the training clock, the curves and the
/// corpus's fingerprint (kDataKey) in the metadata.
void save_checkpoint(const std::filesystem::path& path, const Config& c, const nn::CharTokenizer& vocab,
                     const nn::GPT& model, const optim::AdamW& opt, const optim::LRScheduler& sched,
                     const Generator& batches, int64_t iter, double train_seconds,
                     const ember::app::MetricsHistory& hist, const std::string& data_fingerprint);
/// What a checkpoint of either path records beside the configuration: the
/// iteration, the generators' positions, the clock, the curves, the corpus's fingerprint.
std::map<std::string, std::string> training_metadata(const Generator& batches, int64_t iter, double train_seconds,
                                                     const ember::app::MetricsHistory& hist,
                                                     const std::string& data_fingerprint);
/// A resumed run trains on the corpus its checkpoint was made with: one whose
/// fingerprint (`now`) differs from the stored one is named with both and
/// refused (app::UsageError) unless --allow-data-change, which notes it on
/// stderr. Checkpoints from before the fingerprint was stored resume as they did.
void check_resume_data(const Config& c, const std::map<std::string, std::string>& meta, const Corpus& corpus,
                       const std::string& now);

/// Puts a checkpoint's state back exactly (nn::load_training_checkpoint, IOError
/// naming what would differ); returns the iteration to continue from. A file
/// in the older GPT layout (model tensors without a prefix, no schedule: the
/// schedule is a function of the iteration) is converted, with a note on
/// stderr. The stored iteration must be a whole number in [0, total_iters].
int64_t restore(const StateDict& ckpt, const std::map<std::string, std::string>& meta, const std::string& path,
                nn::GPT& model, optim::AdamW& opt, optim::LRScheduler& sched, Generator& batches, double& train_seconds,
                ember::app::MetricsHistory& hist, int64_t total_iters);
/// --export-onnx (apps/common/onnx_export.h): the model as a graph from
/// "tokens" (batch, sequence) to "logits" (batch, sequence, vocabulary),
/// both axes dynamic (the sequence up to the model's context); traced on 2
/// windows of half the context from `val`, checked on 4 of the whole
/// context. `what` starts the file's doc string (the model, its tokens).
void export_onnx(const Config& c, nn::GPT& model, const std::vector<int64_t>& val, const std::string& what);

/// A value from a file, spelled as a flag would be (a number as JSON writes
/// it) or described ("a JSON object"), for messages.
std::string stored_text(const nlohmann::json& v);
/// A path or other bytes in stored JSON: a string where they are UTF-8, else
/// the bytes as numbers (JSON strings hold nothing else); and back, IOError
/// starting with `where` for anything else.
nlohmann::json bytes_json(const std::string& s);
std::string bytes_from_json(const nlohmann::json& v, const std::string& where);

/// The run configuration and vocabulary a file's metadata records, every
/// field checked against its flag's range (add_flags) with the flag's words,
/// the file and the field named (IOError).
Config config_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);
nn::CharTokenizer vocab_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);

}  // namespace gpt
