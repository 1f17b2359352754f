// A character-level GPT (nn/gpt.h) trained on a text file, as nanoGPT's
// shakespeare_char: by default on Debian's fortunes (the plain-text files
// under /usr/share/games/fortunes, concatenated in name order), or --data
// FILE. `--preset nanogpt-cpu` sets nanoGPT's documented CPU configuration
// (tools/gpt_torch.py is the same model and loop in PyTorch).
//
// Writes into --out: metrics.json (train and validation loss at every
// evaluation, final_val_loss over the whole validation split, train_seconds
// for the steps alone, tokens_per_second, generation speed with and without
// the KV cache, parameters, configuration), loss.png, samples.txt,
// attention.png (the last layer's heads over a line of validation text),
// model.safetensors (configuration and vocabulary in its metadata) and
// checkpoint.safetensors (model, AdamW and LR schedule in the shared layout of
// nn/checkpoint.h, iteration and generator positions) for --resume, which
// continues a run exactly. The loop is apps/common/train_loop.h's; the
// schedule, nanoGPT's warm-up and cosine, is optim::NanoGPTCosineLR.
// --eval-only --weights M scores a model on the validation split again;
// --generate --weights M --prompt TEXT samples from it. --export-onnx FILE
// writes the trained (or --eval-only's) model as ONNX (config.h).
// --hf DIR (a Hugging Face GPT-2), --init gpt2-* or --tokenizer gpt2 take the
// GPT-2 path instead (apps/gpt/gpt2_run.h): BPE tokens, fine-tuning and
// sampling with the KV cache, an HF directory written back.
// Exit codes: 0 done, 1 a run-time error (bad file, bad model), 2 bad usage;
// every failure is one line on stderr.
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "app.h"
#include "config.h"
#include "gpt2_run.h"
#include "graph_step.h"
#include "plot.h"
#include "precision.h"
#include "train_loop.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

// Tokens per second of generating n tokens after a one-token prompt.
double generation_speed(nn::GPT& m, int64_t first, int64_t n, bool cache, uint64_t seed) {
  nn::SampleOptions o;
  o.seed = seed;
  o.use_cache = cache;
  const app::Timer t;
  m.generate({first}, n, o);
  return static_cast<double>(n) / t.seconds();
}

// attention.png: each head of the last layer over one line of text, side by
// side (a blank column between heads); rows are the queries, columns the keys.
void save_attention(nn::GPT& m, const nn::CharTokenizer& tok, const std::string& line, const std::string& path) {
  NoGradGuard ng;
  m.eval();
  const std::vector<int64_t> ids = tok.encode(line);
  const int64_t T = static_cast<int64_t>(ids.size()), H = m.cfg.n_head;
  const Tensor w = m.attention_weights(from_vector(ids, {1, T}).to(m.wte->weight.device()), m.cfg.n_layer - 1)
                       .cpu()
                       .to(DType::Float64)
                       .contiguous();
  const std::vector<double> v = w.to_vector<double>();
  plot::Heatmap hm;
  hm.title = "last layer's attention, heads 1-" + std::to_string(H) + " left to right";
  hm.xlabel = "keys (characters)";
  hm.rows = static_cast<int>(T);
  hm.cols = static_cast<int>(H * (T + 1) - 1);
  hm.values.assign(static_cast<size_t>(hm.rows) * static_cast<size_t>(hm.cols), 0.0);
  auto label = [](char ch) {
    return ch == ' ' ? std::string("_") : ch == '\n' ? std::string("\\n") : std::string(1, ch);
  };
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        hm.values[static_cast<size_t>(i * hm.cols + h * (T + 1) + j)] = v[static_cast<size_t>((h * T + i) * T + j)];
    for (int64_t j = 0; j < T; ++j) hm.col_labels.push_back(label(line[static_cast<size_t>(j)]));
    if (h + 1 < H) hm.col_labels.push_back("|");
  }
  for (int64_t i = 0; i < T; ++i) hm.row_labels.push_back(label(line[static_cast<size_t>(i)]));
  hm.label_every = 1;
  plot::render(hm, std::max(760, 140 + 14 * hm.cols), std::max(480, 160 + 14 * hm.rows)).save_png(path);
}

// A line of validation text for attention.png: the first full line of 16 to
// context characters, or the split's first context characters.
std::string sample_line(const nn::TextDataset& d, int64_t context) {
  const std::string text = d.tokenizer.decode(
      std::vector<int64_t>(d.val.begin(), d.val.begin() + std::min<int64_t>(static_cast<int64_t>(d.val.size()), 4096)));
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;
    const size_t len = end - start;
    if (len >= 16 && static_cast<int64_t>(len) <= std::min<int64_t>(context, 48)) return text.substr(start, len);
    start = end + 1;
  }
  return text.substr(0, static_cast<size_t>(std::min<int64_t>(context, 48)));
}

// The prompt of samples.txt: a newline when the vocabulary has one, else the
// validation split's first character.
std::vector<int64_t> default_prompt(const nn::TextDataset& d) {
  if (d.tokenizer.chars().find('\n') != std::string::npos) return d.tokenizer.encode("\n");
  return {d.val.front()};
}

// --check: everything is validated, read and built; stop before the work.
int check_done() {
  std::printf("gpt: check ok\n");
  return 0;
}

int train(gpt::Config c, const CLI::App& app) {
  app::apply_threads(c.threads);
  app::prepare_out_dir(c.out);
  app::check_export_onnx(c.onnx);
  // A resumed run takes the model, data and optimizer from the checkpoint and
  // its length and reports from the flags (gpt::resumed_config, README.md).
  std::map<std::string, std::string> meta;
  StateDict ckpt;
  if (!c.resume.empty()) {
    ckpt = load_safetensors(c.resume, &meta);
    app::warn_suspicious("gpt", ckpt, c.resume);  // NaN/Inf or negative second moments named on stderr
    const gpt::Config saved = gpt::config_from_metadata(meta, c.resume);
    gpt::check_model_size(saved, ckpt, c.resume);
    c = gpt::resumed_config(app, c, saved, c.resume, meta);
  }
  const Device dev = gpt::run_device(c);
  const gpt::Corpus corpus = gpt::read_corpus(c);
  const std::string fingerprint = app::bytes_fingerprint(corpus.text);
  if (!c.resume.empty()) gpt::check_resume_data(c, meta, corpus, fingerprint);
  const nn::CharTokenizer vocab = c.resume.empty() ? nn::CharTokenizer() : gpt::vocab_from_metadata(meta, c.resume);
  const nn::TextDataset data =
      nn::TextDataset::from_text(corpus.text, c.context, corpus.name, c.resume.empty() ? nullptr : &vocab);
  if (!c.quiet)
    std::printf("%s: %zu characters, vocabulary %lld; %zu train / %zu validation tokens\n", corpus.description.c_str(),
                corpus.text.size(), static_cast<long long>(data.tokenizer.size()), data.train.size(), data.val.size());

  manual_seed(c.seed + 1);  // initialisation, then dropout
  nn::GPT model(gpt::model_config(c, data.tokenizer.size()));
  model.to(dev);  // initialised on the CPU (the same weights on every device), moved before the optimizer's handles
  std::vector<Tensor> decay, no_decay;
  for (auto& [n, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamWOptions ao;
  ao.lr = c.lr;
  ao.beta2 = c.beta2;
  ao.weight_decay = c.weight_decay;
  optim::AdamW opt({optim::ParamGroup{decay, -1, c.weight_decay}, optim::ParamGroup{no_decay, -1, 0.0}}, ao);
  // nanoGPT's get_lr: linear warm-up, then a cosine from lr to min_lr at the last iteration.
  optim::NanoGPTCosineLR sched(opt, c.warmup, c.decay_iters, c.min_lr);
  Generator batches(c.seed);
  app::MetricsHistory hist = gpt::make_history();
  int64_t start = 0;
  double train_seconds = 0;
  if (!c.resume.empty())
    start = gpt::restore(ckpt, meta, c.resume, model, opt, sched, batches, train_seconds, hist, c.iters);
  if (!c.quiet)
    std::printf(
        "model: %lld parameters (%lld without positions), %d layers x %d heads, width %lld, context %lld; "
        "%d threads, %s\n",
        static_cast<long long>(model.num_parameters()), static_cast<long long>(model.num_parameters_non_embedding()),
        static_cast<int>(c.layers), static_cast<int>(c.heads), static_cast<long long>(c.width),
        static_cast<long long>(c.context), num_threads(), dev.str().c_str());
  if (c.check) return check_done();

  const fs::path out(c.out);
  const double tokens_per_step = static_cast<double>(c.batch * c.context);
  // The CPU time restarts at a resume (it is this process's); the wall time continues.
  app::Stopwatch clock(train_seconds);
  auto tokens_per_second = [&](const app::LoopStatus& s) {
    return tokens_per_step * static_cast<double>(s.run_steps) / std::max(s.clock->seconds(), 1e-9);
  };
  // fp32: the region is off and the step is the one the README's figures come from.
  const app::MixedPrecision mp(c.precision, dev.type);
  // One step on a batch's tokens and targets; with --cuda-graph replayed as a CUDA graph (graph_step.h).
  app::GraphStep step(c.cuda_graph, [&](const std::vector<Tensor>& in) {
    Tensor loss;
    {
      const AutocastGuard region = mp.region();
      loss = model.loss(in[0], in[1]);
    }
    opt.zero_grad();
    loss.backward();
    if (c.clip > 0) optim::clip_grad_norm_(model.parameters(), c.clip);
    opt.step();
    return loss;
  });
  model.train();
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
             auto [x, y] = nn::random_batch(data.train, c.batch, c.context, batches);
             return step({x.to(dev), y.to(dev)}).item<double>();
           },
       .status =
           [&](const app::LoopStatus& s) {
             const double tps = tokens_per_second(s);
             return app::fmt("loss %.4f  lr %.2e  %.0f tok/s  ETA %.0fs", s.loss, s.lr, tps,
                             tokens_per_step * static_cast<double>(s.total - s.done) / std::max(tps, 1e-9));
           },
       .evaluate =
           [&](const app::LoopStatus& s) {
             const AutocastGuard region = mp.region();
             const double tl = gpt::estimate_loss(model, data.train, c, 1),
                          vl = gpt::estimate_loss(model, data.val, c, 2);
             hist.record(static_cast<double>(s.done), {{"train_loss", tl}, {"val_loss", vl}});
             if (!c.quiet)
               std::printf(
                   "iter %5lld  train loss %.4f  val loss %.4f  (last %lld steps' mean %.4f)  %.1fs, %.0f tok/s\n",
                   static_cast<long long>(s.done), tl, vl, static_cast<long long>(s.window_steps),
                   s.window_loss / static_cast<double>(s.window_steps), s.clock->seconds(), tokens_per_second(s));
             std::fflush(stdout);
           },
       .save_and_stop =
           [&](const app::LoopStatus& s) {
             gpt::save_checkpoint(out / "checkpoint.safetensors", c, data.tokenizer, model, opt, sched, batches, s.done,
                                  s.clock->seconds(), hist, fingerprint);
             std::printf("gpt: stopped after iteration %lld (--stop-after); continue with --resume %s\n",
                         static_cast<long long>(s.done), (out / "checkpoint.safetensors").c_str());
           }},
      clock);
  if (end == app::LoopEnd::Stopped) return 0;
  train_seconds = clock.seconds();

  // The whole validation split, then samples and pictures.
  const app::Timer tv;
  double final_val;
  {
    const AutocastGuard region = mp.region();
    final_val = nn::split_loss(model, data.val, c.context, 64);
  }
  const double val_seconds = tv.seconds();
  // The model first: whatever fails after it (a chart, a report), the run's work is kept.
  gpt::save_model(out / "model.safetensors", c, data.tokenizer, model, final_val);
  gpt::save_checkpoint(out / "checkpoint.safetensors", c, data.tokenizer, model, opt, sched, batches, c.iters,
                       train_seconds, hist, fingerprint);
  const std::vector<int64_t> prompt = default_prompt(data);
  nn::SampleOptions so;
  so.temperature = c.temperature, so.top_k = c.top_k, so.top_p = c.top_p, so.seed = c.seed;
  const std::string sample = data.tokenizer.decode(model.generate(prompt, c.sample_tokens, so));
  const int64_t gen_n = std::min<int64_t>(c.context - 1, 200);
  const double gen_cached = generation_speed(model, prompt[0], gen_n, true, c.seed);
  const double gen_uncached = generation_speed(model, prompt[0], gen_n, false, c.seed);
  app::write_text((out / "samples.txt").string(), sample + "\n");
  save_attention(model, data.tokenizer, sample_line(data, c.context), (out / "attention.png").string());
  gpt::save_loss_chart(hist, "GPT on " + corpus.name + ": cross-entropy per character", (out / "loss.png").string());
  const double tps = tokens_per_step * static_cast<double>(c.iters) / std::max(train_seconds, 1e-9);
  nlohmann::ordered_json m = {{"task", "character-level language model"},
                              {"data", corpus.description},
                              {"final_val_loss", final_val},
                              {"train_seconds", train_seconds},
                              {"tokens_per_second", tps},
                              {"train_cpu_seconds", clock.cpu_seconds()},
                              {"validation_seconds", val_seconds},
                              {"parameters", model.num_parameters()},
                              {"parameters_without_positions", model.num_parameters_non_embedding()},
                              {"vocab_size", data.tokenizer.size()},
                              {"train_tokens", data.train.size()},
                              {"val_tokens", data.val.size()},
                              {"threads", num_threads()},
                              {"device", dev.str()},
                              {"configuration", gpt::config_json(c)},
                              {"eval_iters_at", hist.x()},
                              {"train_loss", hist.at("train_loss")},
                              {"val_loss", hist.at("val_loss")},
                              {"generation_tokens", gen_n},
                              {"generation_tokens_per_second_cached", gen_cached},
                              {"generation_tokens_per_second_uncached", gen_uncached},
                              {"sample", gpt::utf8_for_json(sample)}};
  // Steps this process ran as replays of the captured graph (--cuda-graph).
  if (c.cuda_graph) m["cuda_graph_replays"] = step.replays();
  app::write_json((out / "metrics.json").string(), m);
  std::printf(
      "gpt: validation loss %.4f over the whole split (%zu tokens), %.1fs training (%lld iterations, %.0f "
      "tok/s, %d threads) -> %s\n",
      final_val, data.val.size(), train_seconds, static_cast<long long>(c.iters), tps, num_threads(), c.out.c_str());
  gpt::export_onnx(c, model, data.val, "Ember's character-level GPT (apps/gpt) trained on " + corpus.name);
  return 0;
}

// --eval-only: the saved model's loss over the validation split of the
// corpus (--data or fortunes), with the model's own vocabulary.
int eval_only(gpt::Config c) {
  app::apply_threads(c.threads);
  app::prepare_out_dir(c.out);  // eval.json goes there
  app::check_export_onnx(c.onnx);
  nn::CharTokenizer vocab;
  std::map<std::string, std::string> meta;
  std::unique_ptr<nn::GPT> model = gpt::load_model(c.weights, vocab, meta, c.force_eval);
  // What --force-eval let through (load_model warned): eval.json says so beside a finite loss.
  const std::vector<std::string> suspicious = nn::suspicious_tensors(model->state_dict());
  c.context = model->cfg.block_size;
  const Device dev = gpt::run_device(c);
  model->to(dev);
  const gpt::Corpus corpus = gpt::read_corpus(c);
  const nn::TextDataset data = nn::TextDataset::from_text(corpus.text, c.context, corpus.name, &vocab);
  if (c.check) return check_done();
  const app::MixedPrecision mp(c.precision, dev.type);
  double v;
  {
    const AutocastGuard region = mp.region();
    v = nn::split_loss(*model, data.val, c.context, 64);
  }
  app::check_eval_loss(v, c.weights);
  nlohmann::ordered_json m = {
      {"weights", c.weights},
      {"data", corpus.description},
      {"final_val_loss", v},
      {"val_tokens", data.val.size()},
      {"precision", c.precision},
      {"suspicious_tensors", suspicious},
      {"recorded_final_val_loss",
       meta.count("final_val_loss")
           ? app::parse_stored_json(meta.at("final_val_loss"), c.weights, "metadata 'final_val_loss'")
           : nlohmann::json()}};
  app::write_json((fs::path(c.out) / "eval.json").string(), m);
  std::printf("gpt eval %s: validation loss %.4f over %zu tokens of %s\n", c.weights.c_str(), v, data.val.size(),
              corpus.name.c_str());
  gpt::export_onnx(c, *model, data.val, "Ember's character-level GPT (apps/gpt) from " + c.weights);
  return 0;
}

// --generate: the prompt and sample_tokens more, on stdout.
int generate(const gpt::Config& c) {
  app::apply_threads(c.threads);  // writes nothing to --out: no prepare_out_dir
  nn::CharTokenizer vocab;
  std::map<std::string, std::string> meta;
  std::unique_ptr<nn::GPT> model = gpt::load_model(c.weights, vocab, meta, c.force_eval);
  const Device dev = gpt::run_device(c);
  model->to(dev);
  // Without --prompt: a newline, or the vocabulary's first character where it has none.
  std::vector<int64_t> prompt = {0};
  if (!c.prompt.empty() || vocab.chars().find('\n') != std::string::npos) try {
      prompt = vocab.encode(c.prompt.empty() ? std::string("\n") : c.prompt);
    } catch (const ValueError& e) {
      throw ValueError(std::string("--prompt: ") + e.what() + " of " + c.weights);
    }
  if (c.check) return check_done();
  nn::SampleOptions so;
  so.temperature = c.temperature, so.top_k = c.top_k, so.top_p = c.top_p, so.seed = c.seed;
  so.cuda_graph = c.cuda_graph;
  const app::MixedPrecision mp(c.precision, dev.type);
  const app::Timer t;
  std::vector<int64_t> ids;
  {
    const AutocastGuard region = mp.region();
    ids = model->generate(prompt, c.sample_tokens, so);
  }
  const double seconds = t.seconds();
  std::printf("%s\n", vocab.decode(ids).c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "gpt: %lld tokens in %.2fs: %.1f tokens/s (KV cache, %lld-token prompt, %s, %d threads)\n",
               static_cast<long long>(c.sample_tokens), seconds,
               static_cast<double>(c.sample_tokens) / std::max(seconds, 1e-9), static_cast<long long>(prompt.size()),
               c.precision.c_str(), num_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gpt::Config c;
  CLI::App app{
      "A character-level GPT (nanoGPT's shakespeare_char) trained on a text file: by default the fortunes "
      "corpus, or --data FILE; or GPT-2 (--hf DIR, --init gpt2-124m) with its BPE tokenizer"};
  gpt::add_flags(app, c);
  return app::run_main("gpt", app, argc, argv, [&] {
    // A GPT-2 checkpoint resumes on the GPT-2 path (its tokenizer is GPT-2's).
    if (!c.resume.empty() && gpt::is_gpt2_checkpoint(c.resume)) {
      if (c.tokenizer == "char")
        throw app::UsageError("--resume " + c.resume + " is a GPT-2 checkpoint: --tokenizer char does not fit it");
      c.tokenizer = "gpt2";
    }
    gpt::finish_flags(app, c);
    if (c.gpt2()) return c.generate ? gpt::generate_gpt2(c) : gpt::train_gpt2(c, app);
    if (c.generate) return generate(c);
    if (c.eval_only) return eval_only(c);
    return train(c, app);
  });
}
