// Sequence to sequence with Bahdanau attention (nn/seq2seq.h), after the
// reference notes: learn to rewrite dates written in many human formats
// ("3 May 1999", "05/03/99", "Monday, May 3rd 1999") in ISO form
// ("1999-05-03"), character by character. The data are generated from the
// seed (apps/seq2seq/dates.h) and encoded as tensors (data.h); training uses teacher forcing, evaluation
// greedy decoding, and the score is exact match: the whole decoded string
// equals the target.
// --model transformer trains nn::Transformer instead (transformer_model.h);
// --beam K decodes either model with beam search (model.h).
//
// Writes into --out: metrics.json (test_exact_match, train_seconds, the
// curves), predictions.csv (every test example), attention_<k>.png and
// attention_longest.png (attention weights of test examples: output
// characters x source characters), loss.png,
// exact_match.png and model.safetensors (CPU tensors whatever the device,
// with the configuration in its metadata). --eval-only --weights FILE scores
// a saved model on the test split again (eval.json), on either device.
// --device cuda keeps the model, the optimizer state and the encoded splits
// on the GPU; batches are gathered there. --export-onnx FILE writes the
// trained (or --eval-only's) Transformer as ONNX (export.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include <ember/ember.h>

#include "app.h"
#include "data.h"  // the vocabularies, encoded splits and batches
#include "dates.h"
#include "export.h"  // --export-onnx
#include "model.h"   // --model gru|transformer, greedy or --beam K decoding
#include "plot.h"
#include "precision.h"
#include "progress.h"
#include "train_loop.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

// Bounds of the sizes, for the flags and for a saved model's metadata alike.
// Bounded well below the ~700,000 distinct strings the formats can give, so
// drawing distinct examples always ends quickly.
constexpr int64_t kMaxTrainSize = 400000, kMaxTestSize = 100000;
constexpr int64_t kMaxHidden = 4096, kMaxEmbed = 4096;  // a few hundred MB of parameters at most

struct Config {
  int epochs = 6;
  int64_t batch = 64;
  double lr = 3e-3;
  uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu", out = "out/seq2seq", weights;
  bool eval_only = false, force_eval = false;
  int64_t train_size = 12000, test_size = 2000;  // validation: test_size as well
  int64_t hidden = 64, embed = 32;
  int heatmaps = 4;
  bool quiet = false, check = false;
  std::string model = "gru";       // --model: gru (nn::Seq2Seq) or transformer (transformer_model.h)
  int64_t beam = 1;                // --beam: 1 = greedy decoding
  std::string precision = "fp32";  // --precision (apps/common/precision.h)
  app::OnnxExportFlags onnx;       // --export-onnx FILE [--export-onnx-check]
};

using seq2seq_app::Batch;
using seq2seq_app::bucketed_batches;
using seq2seq_app::Data;
using seq2seq_app::encode;
using seq2seq_app::gather_batch;
using seq2seq_app::kBos;
using seq2seq_app::kEos;
using seq2seq_app::kPad;
using seq2seq_app::kTargetChars;
using seq2seq_app::kTargetSteps;
using seq2seq_app::to_device;
using seq2seq_app::Vocab;

Tensor batch_loss(seq2seq_app::DatesModel& model, const Batch& b) {
  const Tensor logits = model.logits(b.src, b.lens, b.tgt_in);  // (B, 11, V)
  return cross_entropy(logits.reshape({-1, logits.size(2)}), b.tgt_out.reshape({-1}), Reduction::Mean, kPad);
}

struct Evaluation {
  double loss = 0, exact = 0;
  std::vector<std::string> predictions;
  std::map<int64_t, Tensor> weights;  // (11, S) for the examples asked for
};

// Teacher-forced loss and greedy exact match over a split, in batches.
Evaluation evaluate(seq2seq_app::DatesModel& model, const Data& d, const Vocab& v, const app::MixedPrecision& mp,
                    const std::set<int64_t>& keep_weights = {}) {
  NoGradGuard ng;
  const AutocastGuard region = mp.region();  // evaluated in the precision it trains in
  model.module().eval();
  Evaluation e;
  const int64_t n = d.size(), bs = 500;
  // In order of source length (batches of similar lengths step through
  // little padding); results go back to their examples' places.
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  const std::vector<int64_t> lens = d.lens.to_vector<int64_t>();
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lens[a] < lens[b]; });
  e.predictions.resize(static_cast<size_t>(n));
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += bs) {
    const int64_t m = std::min(bs, n - start);
    const std::vector<int64_t> idx(order.begin() + start, order.begin() + start + m);
    const Batch b = gather_batch(d, from_vector(idx));
    e.loss += batch_loss(model, b).item() * static_cast<double>(m);
    auto [tokens, w] = model.decode(b.src, b.lens, kBos, kTargetSteps);  // greedy or beam (--beam)
    const std::vector<int64_t> tv = tokens.contiguous().to_vector<int64_t>();
    for (int64_t i = 0; i < m; ++i) {
      const std::vector<int64_t> row(tv.begin() + i * kTargetSteps, tv.begin() + (i + 1) * kTargetSteps);
      const size_t k = static_cast<size_t>(idx[static_cast<size_t>(i)]);
      e.predictions[k] = v.decode(row);
      correct += e.predictions[k] == d.examples[k].target;
      if (keep_weights.count(static_cast<int64_t>(k))) e.weights[static_cast<int64_t>(k)] = w[i].contiguous();
    }
  }
  e.loss /= static_cast<double>(n);
  e.exact = static_cast<double>(correct) / static_cast<double>(n);
  model.module().train();
  return e;
}

std::vector<double> as_doubles(const Tensor& t) {
  const std::vector<float> f = t.to(kFloat32).contiguous().to_vector<float>();
  return {f.begin(), f.end()};
}

// A heatmap of one test example as PNG bytes: rows are the output characters
// (up to and including <eos>), columns the source characters.
std::string heatmap_png(const Tensor& w, const dates::Example& ex, const std::string& pred, const std::string& path) {
  const int64_t rows = std::min<int64_t>(static_cast<int64_t>(pred.size()) + 1, kTargetSteps);
  const int64_t cols = static_cast<int64_t>(ex.source.size());
  plot::Heatmap hm;
  hm.title = "\"" + ex.source + "\" -> " + pred;
  hm.xlabel = "source characters (keys)";
  hm.ylabel = "";  // the rows are labelled with the output characters; the title says the rest
  hm.rows = static_cast<int>(rows);
  hm.cols = static_cast<int>(cols);
  hm.values = as_doubles(w.narrow(0, 0, rows).narrow(1, 0, cols));
  for (char c : ex.source) hm.col_labels.push_back(c == ' ' ? "_" : std::string(1, c));
  for (int64_t r = 0; r < rows; ++r)
    hm.row_labels.push_back(r < static_cast<int64_t>(pred.size()) ? std::string(1, pred[r]) : "<eos>");
  hm.label_every = 1;
  const int width = std::max(560, 110 + 150 + 22 * static_cast<int>(cols));
  return plot::render(hm, width, 560).png(path);
}

// --check: everything is validated and built; stop before the work.
int check_done() {
  std::printf("seq2seq: check ok\n");
  return 0;
}

// A saved model.safetensors and what it recorded; --eval-only takes the
// model size and the splits (seed, sizes) from its metadata. Every field is
// read like a flag: the whole string a number, within the flag's bounds, so
// a damaged or hostile file ends in a message naming the field (a size of
// -1 or 10^9 would hang the data generation, 10^9 hidden units abort in
// bad_alloc, "16abc" must not read as 16).
struct Saved {
  StateDict weights;
  std::optional<double> recorded_exact;
};

template <class T>
T parse_field(const std::map<std::string, std::string>& meta, const std::string& file, const char* key, T lo, T hi) {
  const auto it = meta.find(key);
  if (it == meta.end()) throw IOError(file + ": not a seq2seq model.safetensors (no '" + key + "' in its metadata)");
  const std::string& v = it->second;
  T x{};
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    // from_chars for double needs GCC 11; strtod with a whole-string check is the same rule.
    char* end = nullptr;
    x = std::strtod(v.c_str(), &end);
    ok = !v.empty() && end == v.c_str() + v.size() && std::isfinite(x);
  } else {
    const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
    ok = r.ec == std::errc() && r.ptr == v.data() + v.size();
  }
  if (!ok) throw IOError(file + ": metadata '" + key + "' is not a number: '" + v + "'");
  if (x < lo || x > hi) {
    std::ostringstream os;
    os << file << ": metadata '" << key << "' = " << v << " is outside [" << lo << ", " << hi << "]";
    throw IOError(os.str());
  }
  return x;
}

// --eval-only: the model, seed and split sizes from the file's metadata
// into c. Those flags, given again, must name the file's values; training's
// (and --heatmaps, drawn after training) would do nothing and are refused.
Saved load_saved(Config& c, const CLI::App& cli) {
  app::refuse_training_flags(cli, {"--epochs", "--batch-size", "--lr", "--heatmaps"});
  const Config given = c;
  std::map<std::string, std::string> meta;
  Saved s{load_safetensors(c.weights, &meta), std::nullopt};
  if (meta.count("model")) {  // files from before --model are GRU models
    c.model = meta.at("model");
    if (c.model != "gru" && c.model != "transformer")
      throw IOError(c.weights + ": metadata 'model' is '" + c.model + "', not gru or transformer");
  }
  c.embed = parse_field<int64_t>(meta, c.weights, "embed_size", 1, kMaxEmbed);
  c.hidden = parse_field<int64_t>(meta, c.weights, "num_hiddens", 2, kMaxHidden);
  if (c.hidden % 2 != 0)
    throw IOError(c.weights + ": metadata 'num_hiddens' = " + std::to_string(c.hidden) + " is odd");
  c.seed = parse_field<uint64_t>(meta, c.weights, "seed", 0, std::numeric_limits<uint64_t>::max());
  c.train_size = parse_field<int64_t>(meta, c.weights, "train_size", 1, kMaxTrainSize);
  c.test_size = parse_field<int64_t>(meta, c.weights, "test_size", 1, kMaxTestSize);
  app::refuse_changed_flag(cli, "--model", "'" + given.model + "'", "'" + c.model + "'", c.weights);
  app::refuse_changed_flag(cli, "--hidden", std::to_string(given.hidden), std::to_string(c.hidden), c.weights);
  app::refuse_changed_flag(cli, "--seed", std::to_string(given.seed), std::to_string(c.seed), c.weights);
  app::refuse_changed_flag(cli, "--train-size", std::to_string(given.train_size), std::to_string(c.train_size),
                           c.weights);
  app::refuse_changed_flag(cli, "--test-size", std::to_string(given.test_size), std::to_string(c.test_size), c.weights);
  if (meta.count("test_exact_match"))
    s.recorded_exact = parse_field<double>(meta, c.weights, "test_exact_match", 0.0, 1.0);
  // The tensors must hold what the metadata's model has (and not more): the
  // model is built from the metadata and then loaded strictly.
  int64_t stored = 0;
  for (const auto& [name, t] : s.weights) stored += t.numel();
  // The largest tensors: for the GRU model the encoder's and decoder's GRU
  // weights, 3 gates of hidden x (embed + hidden) each way; for the
  // Transformer each layer's packed in-projection, 3 hidden x hidden. A model
  // needs at least that many values.
  const int64_t at_least = c.model == "gru" ? 3 * (c.hidden / 2) * (c.embed + c.hidden / 2) : 3 * c.hidden * c.hidden;
  if (stored < at_least)
    throw IOError(c.weights + ": its " + std::to_string(stored) +
                  " stored values cannot hold the model its metadata "
                  "describes (embed_size " +
                  std::to_string(c.embed) + ", num_hiddens " + std::to_string(c.hidden) + ")");
  return s;
}

// --eval-only: the saved weights (CPU tensors) copied into the model on its
// device, scored on the test split.
int evaluate_saved(const Config& c, seq2seq_app::DatesModel& model, const Saved& saved, const Data& test,
                   const Vocab& v) {
  try {
    model.module().load_state_dict(saved.weights);
  } catch (const Error& e) {
    throw IOError(c.weights + ": its tensors do not match the model its metadata describes (embed_size " +
                  std::to_string(c.embed) + ", num_hiddens " + std::to_string(c.hidden) + "): " + e.what());
  }
  app::check_eval_weights("seq2seq", saved.weights, c.weights, c.force_eval);
  if (c.check) return check_done();
  const Evaluation e = evaluate(model, test, v, app::MixedPrecision(c.precision, Device(c.device).type));
  app::check_eval_loss(e.loss, c.weights);
  nlohmann::ordered_json m = {
      {"weights", c.weights},
      {"device", c.device},
      {"test_exact_match", e.exact},
      {"test_loss", e.loss},
      {"test_size", test.size()},
      {"recorded_test_exact_match", saved.recorded_exact ? nlohmann::json(*saved.recorded_exact) : nlohmann::json()}};
  app::write_json((fs::path(c.out) / "eval.json").string(), m);
  std::printf("seq2seq eval %s on %s: test exact match %.4f (%lld dates), test loss %.4f%s\n", c.weights.c_str(),
              c.device.c_str(), e.exact, static_cast<long long>(test.size()), e.loss,
              saved.recorded_exact ? app::fmt("; recorded at save: %.4f", *saved.recorded_exact).c_str() : "");
  seq2seq_app::export_onnx(c.onnx, c.model, model, test, v);
  return 0;
}

// The three splits, generated from the seed and encoded on the device.
struct Splits {
  dates::Splits raw;
  Data train, val, test;
};
Splits make_data(const Config& c, const Vocab& v, Device dev) {
  Splits s;
  s.raw = dates::make_splits(c.seed, static_cast<size_t>(c.train_size), static_cast<size_t>(c.test_size),
                             static_cast<size_t>(c.test_size));
  const int64_t max_len = static_cast<int64_t>(dates::max_source_length());
  s.train = to_device(encode(s.raw.train, v, max_len), dev);
  s.val = to_device(encode(s.raw.val, v, max_len), dev);
  s.test = to_device(encode(s.raw.test, v, max_len), dev);
  return s;
}

// What training records, epoch by epoch.
struct History {
  std::vector<double> train_loss, val_loss, val_exact;
  // train_seconds counts the training steps only; the validation passes
  // after each epoch are timed apart (validation_seconds).
  double train_seconds = 0, validation_seconds = 0;
};

// One pass over the training split in bucketed batches; the mean batch loss.
double train_one_epoch(seq2seq_app::DatesModel& model, optim::Optimizer& opt, optim::LRScheduler& sched,
                       const Data& train, int64_t batch_size, Generator& g, app::ProgressBar& bar,
                       app::MixedPrecision& mp, int epoch, int epochs) {
  model.module().train();
  const std::vector<Tensor> batches = bucketed_batches(train, batch_size, g);
  const auto nb = static_cast<int64_t>(batches.size());
  double total = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const Batch batch = gather_batch(train, batches[static_cast<size_t>(b)]);
    opt.zero_grad();
    Tensor loss;
    {
      const AutocastGuard region = mp.region();
      loss = batch_loss(model, batch);
    }
    mp.backward_step(loss, opt, model.module().parameters(), 1.0);
    sched.step();
    total += loss.item();
    bar.update(app::fmt("epoch %2d/%d", epoch, epochs), b + 1, nb,
               app::fmt("loss %.4f", total / static_cast<double>(b + 1)));
  }
  bar.clear();
  return total / static_cast<double>(nb);
}

// Heatmaps: the first --heatmaps test dates, and the one with the longest
// source (the most words to align), as attention_longest.png.
std::set<int64_t> heatmap_examples(const Config& c, const Data& test, int64_t& longest) {
  std::set<int64_t> shown;
  for (int64_t k = 0; k < std::min<int64_t>(c.heatmaps, test.size()); ++k) shown.insert(k);
  longest = 0;
  for (int64_t k = 0; k < test.size(); ++k)
    if (test.examples[static_cast<size_t>(k)].source.size() > test.examples[static_cast<size_t>(longest)].source.size())
      longest = k;
  if (c.heatmaps > 0) shown.insert(longest);
  return shown;
}

// model.safetensors: the weights, with what --eval-only needs in the metadata.
void save_model(const Config& c, nn::Module& model, const Vocab& v, const Evaluation& te, const fs::path& out) {
  nn::save(model, (out / "model.safetensors").string(),
           {{"task", "dates -> ISO"},
            {"model", c.model},
            {"alphabet", v.alphabet},
            {"target_chars", kTargetChars},
            {"embed_size", std::to_string(c.embed)},
            {"num_hiddens", std::to_string(c.hidden)},
            {"seed", std::to_string(c.seed)},
            {"train_size", std::to_string(c.train_size)},
            {"test_size", std::to_string(c.test_size)},
            {"test_exact_match", nlohmann::json(te.exact).dump()}});
}

// The model, metrics.json, predictions.csv, each written atomically, then
// the heatmaps and the curves as one set (app::write_files_together: on a
// full disk none of them appears, and the message says so). The model comes
// first: whatever fails after it, the run's work is kept.
void write_report(const Config& c, nn::Module& model, const Vocab& v, const Splits& sp, const History& h,
                  const Evaluation& te, int64_t longest) {
  const Data& test = sp.test;
  const fs::path out(c.out);
  save_model(c, model, v, te, out);
  nlohmann::ordered_json examples = nlohmann::json::array();
  for (int64_t i = 0; i < std::min<int64_t>(10, test.size()); ++i)
    examples.push_back({{"source", test.examples[static_cast<size_t>(i)].source},
                        {"target", test.examples[static_cast<size_t>(i)].target},
                        {"prediction", te.predictions[static_cast<size_t>(i)]}});
  nlohmann::ordered_json m = {{"task", "dates in human formats -> ISO 8601, character level"},
                              {"model", c.model},
                              {"beam", c.beam},
                              {"precision", c.precision},
                              {"test_exact_match", te.exact},
                              {"test_loss", te.loss},
                              {"train_seconds", h.train_seconds},
                              {"seconds_per_epoch", c.epochs ? h.train_seconds / c.epochs : 0.0},
                              {"validation_seconds", h.validation_seconds},
                              {"epochs", c.epochs},
                              {"batch_size", c.batch},
                              {"lr", c.lr},
                              {"seed", c.seed},
                              {"threads", num_threads()},
                              {"train_size", sp.train.size()},
                              {"val_size", sp.val.size()},
                              {"test_size", test.size()},
                              {"embed_size", c.embed},
                              {"num_hiddens", c.hidden},
                              {"parameters", model.num_parameters()},
                              {"train_loss", h.train_loss},
                              {"val_loss", h.val_loss},
                              {"val_exact_match", h.val_exact},
                              {"test_examples", examples}};
  app::write_json((out / "metrics.json").string(), m);
  std::string csv = "source,target,prediction,correct\n";
  for (int64_t i = 0; i < test.size(); ++i) {
    const auto& ex = test.examples[static_cast<size_t>(i)];
    const std::string& p = te.predictions[static_cast<size_t>(i)];
    csv += '"' + ex.source + "\"," + ex.target + ',' + p + ',' + (p == ex.target ? '1' : '0') + '\n';
  }
  app::write_text((out / "predictions.csv").string(), csv);
  std::vector<std::pair<std::string, std::string>> charts;
  for (const auto& [k, w] : te.weights) {
    const std::string name = k < c.heatmaps ? "attention_" + std::to_string(k) + ".png" : "attention_longest.png";
    charts.emplace_back((out / name).string(), heatmap_png(w, test.examples[static_cast<size_t>(k)],
                                                           te.predictions[static_cast<size_t>(k)], name));
  }
  if (c.heatmaps > 0 && longest < c.heatmaps)  // the longest is also among the first: save it under both names
    charts.emplace_back((out / "attention_longest.png").string(),
                        heatmap_png(te.weights.at(longest), test.examples[static_cast<size_t>(longest)],
                                    te.predictions[static_cast<size_t>(longest)], "attention_longest.png"));
  std::vector<double> ep;
  for (int e = 1; e <= c.epochs; ++e) ep.push_back(e);
  plot::LineChart lc;
  lc.title = "seq2seq: cross-entropy per character";
  lc.xlabel = "epoch";
  lc.ylabel = "loss (log scale)";
  lc.log_y = true;
  lc.series = {{.x = ep, .y = h.train_loss, .label = "train", .color = 0, .line = true, .marker_radius = 3},
               {.x = ep,
                .y = h.val_loss,
                .label = "validation (teacher forcing)",
                .color = 1,
                .line = true,
                .marker_radius = 3}};
  charts.emplace_back((out / "loss.png").string(), plot::render(lc).png("loss.png"));
  plot::LineChart ac;
  ac.title = "seq2seq: validation exact match (greedy)";
  ac.xlabel = "epoch";
  ac.ylabel = "fraction of dates exactly right";
  ac.series = {{.x = ep, .y = h.val_exact, .label = "validation", .color = 2, .line = true, .marker_radius = 3}};
  charts.emplace_back((out / "exact_match.png").string(), plot::render(ac).png("exact_match.png"));
  app::write_files_together(charts);
}

// Load (--eval-only), generate the data, build the model; then train epoch
// by epoch with a validation pass after each, evaluate on the test split,
// and report.
int run(Config c, const CLI::App& cli) {
  app::apply_threads(c.threads);
  app::prepare_out_dir(c.out);
  app::check_export_onnx(c.onnx);
  const Saved saved = c.eval_only ? load_saved(c, cli) : Saved{};
  // Before any work: the model (--model, or the file's) must be one that exports.
  if (c.onnx.enabled() && !seq2seq_app::onnx_refusal(c.model).empty())
    throw app::UsageError(seq2seq_app::onnx_refusal(c.model));
  const Device dev(c.device);
  manual_seed(c.seed + 1);  // initialisation
  Generator g(c.seed + 2);  // shuffling
  const Vocab v;
  const Splits sp = make_data(c, v, dev);
  if (!c.quiet) {
    std::printf("dates -> ISO: %lld train / %lld val / %lld test examples, %lld source characters, e.g. \"%s\" -> %s\n",
                static_cast<long long>(sp.train.size()), static_cast<long long>(sp.val.size()),
                static_cast<long long>(sp.test.size()), static_cast<long long>(v.src_size() - 1),
                sp.raw.train[0].source.c_str(), sp.raw.train[0].target.c_str());
  }
  // ---- the model (--model, --beam): model.h; the rest of run() sees nn::Module and DatesModel
  const std::unique_ptr<seq2seq_app::DatesModel> dates_model =
      seq2seq_app::make_model(c.model, {v.src_size(), v.tgt_size(), c.embed, c.hidden});
  dates_model->beam_size = c.beam;
  dates_model->eos = kEos;
  nn::Module& model = dates_model->module();
  // ----
  model.to(dev);  // initialised on the CPU (the same weights on every device), then moved
  if (!c.quiet)
    std::printf("model: %lld parameters, %d threads, %s\n", static_cast<long long>(model.num_parameters()),
                num_threads(), dev.str().c_str());
  if (c.eval_only) return evaluate_saved(c, *dates_model, saved, sp.test, v);

  optim::Adam opt(model.parameters(), optim::AdamOptions{.lr = c.lr});
  // Cosine decay to zero over the run, stepped per batch (a batch larger
  // than the training split is the whole split).
  const int64_t batch = std::min(c.batch, sp.train.size());
  const int64_t nb = (sp.train.size() + batch - 1) / batch;
  optim::CosineAnnealingLR sched(opt, std::max<int64_t>(1, nb * c.epochs));
  if (c.check) return check_done();
  app::ProgressBar bar(!c.quiet);
  app::MixedPrecision mp(c.precision, dev.type);
  History h;
  // The loop's steps are epochs; train_seconds counts the training passes only.
  app::Stopwatch clock;
  app::run_loop({.total = c.epochs, .eval_every = 1, .unit = "epoch", .progress = false},
                {.train_step =
                     [&](int64_t step) {
                       const int epoch = static_cast<int>(step) + 1;
                       h.train_loss.push_back(
                           train_one_epoch(*dates_model, opt, sched, sp.train, batch, g, bar, mp, epoch, c.epochs));
                       return h.train_loss.back();
                     },
                 .evaluate =
                     [&](const app::LoopStatus& s) {
                       h.train_seconds = s.clock->seconds();
                       const app::Timer t_val;
                       const Evaluation ev = evaluate(*dates_model, sp.val, v, mp);
                       h.validation_seconds += t_val.seconds();
                       h.val_loss.push_back(ev.loss);
                       h.val_exact.push_back(ev.exact);
                       if (!c.quiet)
                         std::printf(
                             "epoch %2lld  train loss %.4f  val loss %.4f  val exact match %.4f  trained %5.1fs\n",
                             static_cast<long long>(s.done), s.loss, ev.loss, ev.exact, h.train_seconds);
                       std::fflush(stdout);  // progress shows in logs too
                     }},
                clock);
  int64_t longest = 0;
  const std::set<int64_t> shown = heatmap_examples(c, sp.test, longest);
  const Evaluation te = evaluate(*dates_model, sp.test, v, mp, shown);
  write_report(c, model, v, sp, h, te, longest);
  std::printf("seq2seq: test exact match %.4f (%lld dates), %.1fs training (%d epochs, %d threads) -> %s\n", te.exact,
              static_cast<long long>(sp.test.size()), h.train_seconds, c.epochs, num_threads(), c.out.c_str());
  seq2seq_app::export_onnx(c.onnx, c.model, *dates_model, sp.test, v);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App cli{
      "Sequence to sequence with Bahdanau attention: rewrite dates written in many human formats as ISO "
      "dates (\"Monday, May 3rd 1999\" -> 1999-05-03), character by character"};
  cli.add_option("--epochs", c.epochs, "training epochs (default 6)")->check(app::int_range(1, 100000));
  cli.add_option("--batch-size", c.batch, "examples per batch (default 64; at most the training examples)")
      ->check(app::int_range(1, kMaxTrainSize));
  cli.add_option("--lr", c.lr, "Adam's peak learning rate, decayed to 0 by a cosine (default 3e-3)")
      ->check(app::finite_range(1e-12, 1e3));
  app::add_seed(cli, c.seed, "random seed for the data, the initialisation and the shuffling (default 0)");
  app::add_threads(cli, c.threads);
  app::add_device(cli, c.device, "cpu (default) or cuda / cuda:N (a build with the CUDA backend and a GPU)");
  app::add_precision(cli, c.precision);
  app::add_out(cli, c.out);
  cli.add_option("--train-size", c.train_size, "training examples (default 12000, at most 400000)")
      ->check(app::int_range(1, kMaxTrainSize));
  cli.add_option("--test-size", c.test_size, "validation and test examples each (default 2000, at most 100000)")
      ->check(app::int_range(1, kMaxTestSize));
  cli.add_option("--hidden", c.hidden,
                 "decoder state size, even; the encoder runs half per direction (default 64, at most 4096)")
      ->check(app::int_range(2, kMaxHidden));
  cli.add_option("--heatmaps", c.heatmaps,
                 "attention heatmaps of the first test examples, plus the longest source (default 4)")
      ->check(app::int_range(0, 1000));
  CLI::Option* eval_only =
      cli.add_flag("--eval-only", c.eval_only, "score --weights on the test split again and exit (writes eval.json)");
  app::input_file(cli.add_option("--weights", c.weights,
                                 "model.safetensors for --eval-only (its metadata gives the model size, seed and split "
                                 "sizes); NaN, Inf or overflowing weights in it are refused unless --force-eval"))
      ->needs(eval_only);
  app::add_force_eval(cli, c.force_eval)->needs(eval_only);
  app::add_quiet(cli, c.quiet);
  cli.add_option("--model", c.model,
                 "gru (default: Bahdanau attention) or transformer (nn::Transformer; --hidden is d_model)")
      ->check(CLI::IsMember({"gru", "transformer"}));
  cli.add_option("--beam", c.beam, "beam width for decoding; 1 (default) is greedy; GNMT length penalty, alpha 0.6")
      ->check(app::int_range(1, 64));
  app::add_check(cli, c.check);
  app::add_export_onnx(cli, c.onnx,
                       "--model transformer's encoder and one decoder pass, source, source_lengths and target_prefix "
                       "-> logits of the next token at every prefix position (apps/seq2seq/README.md)");
  return app::run_main("seq2seq", cli, argc, argv, [&] {
    if (c.eval_only != !c.weights.empty()) throw app::UsageError("--eval-only and --weights FILE go together");
    if (c.hidden % 2 != 0)
      throw app::UsageError("--hidden must be even (the bidirectional encoder runs half per direction), got " +
                            std::to_string(c.hidden));
    return run(c, cli);
  });
}
