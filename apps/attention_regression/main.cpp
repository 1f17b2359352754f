// Attention used for regression, after the reference notes: learn
// y = 2 sin(x) + x^0.8 on [0, 5] from noisy samples.
//
//   nw           Nadaraya-Watson kernel regression (no training)
//   nw-param     the same pooling with a learned kernel width w, SGD
//   single-head  one scaled dot-product attention over 50 x-tokens
//   transformer  (default) embedding + learned positions, one pre-norm block
//   encoder      TransformerEncoder (3 layers) over sequences of 10 x-values
//
// Writes metrics.json, predictions.csv, prediction.png, attention.png,
// loss.png (trained models) and model.safetensors into --out. Deterministic
// for a given seed and thread count. --eval-only --weights FILE scores a
// saved model on the test grid again (eval.json); --export-onnx FILE writes
// the trained (or loaded) model as ONNX, x (batch, points) -> y.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <ember/ember.h>

#include "app.h"
#include "attention_models.h"
#include "graph_step.h"
#include "onnx_export.h"
#include "plot.h"
#include "precision.h"
#include "train.h"
#include "train_loop.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

Tensor f(const Tensor& x) { return add(mul(sin(x), 2.0), pow(x, 0.8)); }

std::vector<double> values(const Tensor& t) {
  const std::vector<float> v = t.to(kFloat32).contiguous().to_vector<float>();
  return {v.begin(), v.end()};
}

struct Config {
  std::string model = "transformer", out = "out/attention_regression", device = "cpu", precision = "fp32", weights;
  int epochs = 0;
  int64_t batch = 0;
  double lr = 0;
  int threads = 0;
  uint64_t seed = 4;  // see apps/attention_regression/README.md: the figures are quoted for this seed
  bool quiet = false, check = false, eval_only = false, force_eval = false, cuda_graph = false;
  app::OnnxExportFlags onnx;  // --export-onnx FILE [--export-onnx-check]
};

// The trained models by --model name (and by a saved file's "model").
std::unique_ptr<ar::AttentionModel> make_model(const std::string& kind) {
  if (kind == "single-head") return std::make_unique<ar::SingleHead>();
  if (kind == "transformer") return std::make_unique<ar::TokenTransformer>();
  return std::make_unique<ar::EncoderRegressor>();
}

// The test inputs: the grid for the 50-token models, sequences of 10
// consecutive x of arange(0, 10, 0.1) for the encoder.
Tensor test_inputs(const std::string& kind) {
  if (kind == "encoder") return arange(0, 10, 0.1, kFloat32).reshape({-1, 10});
  return linspace(0, 5, 50).unsqueeze(0);
}

// --export-onnx: x (batch, points) -> y (batch, points), both axes dynamic.
// Checked on the test inputs (for the 50-token models, the grid of each range
// the transformer trains on: [0, 5], [1.5, 3.5], [3, 5]); traced on 2
// sequences of half their length, so that the check runs other sizes.
void export_model(const Config& c, ar::AttentionModel& model, Device dev) {
  if (!c.onnx.enabled()) return;
  const Tensor check = c.model == "encoder" ? test_inputs(c.model)
                                            : stack({linspace(0, 5, 50), linspace(1.5, 3.5, 50), linspace(3, 5, 50)});
  const std::string positions = c.model == "transformer" ? "at most 50 (learned positions)"
                                : c.model == "encoder"   ? "at most 1000 (sinusoidal positions)"
                                                         : "any number";
  ember::app::export_onnx(
      "attention_regression", model, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model(in[0])}; },
      {.inputs = {"x"},
       .outputs = {"y"},
       .dynamic_axes = {{"x", {{0, "batch"}, {1, "points"}}}},
       .example = {check.narrow(0, 0, 2).narrow(1, 0, check.size(1) / 2).contiguous().to(dev)},
       .check = {check.to(dev)},
       .doc = "Ember's attention regression model '" + c.model +
              "' (apps/attention_regression), trained on y = 2 sin(x) + x^0.8 from noisy samples. Input x (batch, "
              "points) float32, points " +
              positions + "; output y (batch, points): the prediction at each x, attending over the sequence."},
      c.onnx);
}

// What every model hands to the outputs.
struct Result {
  ar::History history;
  Tensor test_x, test_pred;  // 1-D, sorted by x
  Tensor train_x, train_y;   // points shown on the prediction chart
  Tensor weights;            // (queries, keys) attention weights
  std::string weights_xlabel, weights_ylabel;
  double key_first = 0, key_last = 5, query_first = 0, query_last = 5;
  std::vector<std::string> key_labels;  // instead of key_first/last when set
  std::string test_grid = "linspace(0, 5, 50)";
  double test_mse = 0;
};

// Nadaraya-Watson: weights softmax(-((x - x_i) w)^2 / 2) over 50 training points.
Result run_nw(const Config& c, Generator& g, bool learn_w) {
  std::vector<float> xs = uniform({50}, 0, 5, TensorOptions(kFloat32), &g).to_vector<float>();
  std::sort(xs.begin(), xs.end());  // sorted keys: the heatmap shows the diagonal band
  const Tensor x_train = from_vector(xs, {50});
  const Tensor y_train = add(f(x_train), mul(randn({50}, kFloat32, &g), 0.5));
  const Tensor x_test = arange(0, 5, 0.1, kFloat32);
  Tensor w = ones({1}).requires_grad_(learn_w);
  auto weights = [&](const Tensor& q, const Tensor& keys, const Tensor& mask) {
    const Tensor s = mul(square(mul(sub(q.unsqueeze(1), keys.unsqueeze(0)), w)), -0.5);
    return mask.defined() ? masked_softmax(s, mask) : softmax(s, -1);
  };
  Result r;
  const app::Timer clock;
  if (learn_w) {
    // Each training point attends to the others (itself masked out); SGD on
    // 1/2 sum (y - yhat)^2.
    optim::SGD opt({w}, optim::SGDOptions{.lr = 0.5});
    const Tensor self = eye(50, TensorOptions(kBool));
    app::Stopwatch steps;
    app::run_loop({.total = c.epochs, .eval_every = 1, .unit = "epoch", .progress = false},
                  {.train_step =
                       [&](int64_t) {
                         opt.zero_grad();
                         Tensor loss =
                             mul(sum(square(sub(matmul(weights(x_train, x_train, self), y_train), y_train))), 0.5);
                         loss.backward();
                         opt.step();
                         return loss.item();
                       },
                   .evaluate =
                       [&](const app::LoopStatus& s) {
                         const int epoch = static_cast<int>(s.done);
                         r.history.train.push_back(s.loss / 50);  // per point, comparable with MSE
                         r.history.val.push_back(r.history.train.back());
                         r.history.lr.push_back(0.5);
                         r.history.epochs_run = r.history.best_epoch = epoch;
                         if (!c.quiet && (epoch % 10 == 0 || epoch == 1))
                           std::printf("epoch %3d  loss %.6f  w %.4f\n", epoch, s.loss, w.item());
                       }},
                  steps);
  }
  r.history.seconds = clock.seconds();
  NoGradGuard ng;
  r.weights = weights(x_test, x_train, Tensor());
  r.test_x = x_test;
  r.test_pred = matmul(r.weights, y_train);
  r.test_mse = mse_loss(r.test_pred, f(x_test)).item();
  r.train_x = x_train;
  r.train_y = y_train;
  r.test_grid = "arange(0, 5, 0.1)";
  r.weights_xlabel = "training x (keys, sorted)";
  r.weights_ylabel = "query x";
  for (float k : xs) {  // the keys are not evenly spaced: label the cells by value
    char b[16];
    std::snprintf(b, sizeof b, "%.1f", k);
    r.key_labels.push_back(b);
  }
  r.query_last = 4.9;
  return r;
}

Result run_trained(const Config& c, Generator& g) {
  Result r;
  std::unique_ptr<ar::AttentionModel> model;
  ar::Recipe rc;
  rc.quiet = c.quiet;
  Tensor x, y, x_val, y_val, x_test;
  const Tensor grid = linspace(0, 5, 50);
  if (c.model == "single-head") {
    // The notes' SimpleTransformer: 10,000 sequences of 50 x ~ U[0,5), noise
    // 0.02; Adam (weight decay 1e-3), plateau on the training loss.
    model = std::make_unique<ar::SingleHead>();
    x = uniform({10000, 50}, 0, 5, TensorOptions(kFloat32), &g);
    y = add(f(x), mul(randn(x.shape(), kFloat32, &g), 0.02));
    rc.epochs = 50, rc.batch = 200, rc.weight_decay = 1e-3, rc.plateau_patience = 5, rc.plateau_on_train = true;
    rc.print_every = 5;
    x_test = grid.unsqueeze(0);
  } else if (c.model == "transformer") {
    // 250 sequences of 50 x over [0,5), 125 over [1.5,3.5), 125 over [3,5);
    // noise 0.01. Validation: the grid 100 times with noise 0.01.
    model = std::make_unique<ar::TokenTransformer>();
    x = cat({uniform({250, 50}, 0, 5, TensorOptions(kFloat32), &g),
             uniform({125, 50}, 1.5, 3.5, TensorOptions(kFloat32), &g),
             uniform({125, 50}, 3, 5, TensorOptions(kFloat32), &g)});
    y = add(f(x), mul(randn(x.shape(), kFloat32, &g), 0.01));
    x_val = grid.unsqueeze(0).expand({100, 50}).contiguous();
    y_val = add(f(x_val), mul(randn(x_val.shape(), kFloat32, &g), 0.01));
    rc.epochs = 200, rc.batch = 32, rc.weight_decay = 1e-6, rc.clip = 1.0, rc.min_lr = 1e-6, rc.early_stop = 20;
    x_test = grid.unsqueeze(0);
  } else {
    // encoder: the notes' BuiltInTransformer on sequences of 10 consecutive x
    // from arange(0, 10, 0.05), noise 0.1; validated on the training set as
    // in the notes; tested on arange(0, 10, 0.1).
    model = std::make_unique<ar::EncoderRegressor>();
    x = arange(0, 10, 0.05, kFloat32).reshape({-1, 10});
    y = add(f(x), mul(randn(x.shape(), kFloat32, &g), 0.1));
    x_val = x, y_val = y;
    rc.epochs = 1500, rc.batch = 32, rc.clip = 1.0, rc.min_lr = 1e-6, rc.early_stop = 50, rc.print_every = 100;
    x_test = arange(0, 10, 0.1, kFloat32).reshape({-1, 10});
    r.test_grid = "arange(0, 10, 0.1) in sequences of 10";
  }
  if (c.epochs > 0) rc.epochs = c.epochs;
  if (c.batch > 0) rc.batch = c.batch;
  if (c.lr > 0) rc.lr = c.lr;
  rc.precision = c.precision;
  rc.cuda_graph = c.cuda_graph;
  // --device cuda: the model and the data move once; the loop runs there.
  const Device dev(c.device);
  model->to(dev);
  x = x.to(dev), y = y.to(dev), x_test = x_test.to(dev);
  if (x_val.defined()) x_val = x_val.to(dev), y_val = y_val.to(dev);
  r.history = ar::fit(*model, x, y, x_val, y_val, rc, g);

  NoGradGuard ng;
  r.test_x = x_test.reshape({-1});
  {
    const AutocastGuard region = ember::app::MixedPrecision(c.precision, dev.type).region();  // tested as trained
    r.test_pred = (*model)(x_test).reshape({-1}).to(kFloat32);
  }
  r.test_mse = mse_loss(r.test_pred, f(r.test_x)).item();
  // At most 2000 training points on the chart.
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(x.size(0), 2000 / x.size(1)));
  r.train_x = x.narrow(0, 0, rows).reshape({-1});
  r.train_y = y.narrow(0, 0, rows).reshape({-1});
  // The attention of one test sequence: the grid for the 50-token models, the
  // third sequence (x in [2, 3)) for the encoder.
  const Tensor probe = c.model == "encoder" ? x_test.narrow(0, 2, 1) : x_test;
  r.weights = model->attention(probe);
  r.weights_xlabel = "key x";
  r.weights_ylabel = "query x";
  r.key_first = r.query_first = probe.to_vector<float>().front();
  r.key_last = r.query_last = probe.to_vector<float>().back();
  nn::save(*model, (fs::path(c.out) / "model.safetensors").string(), {{"model", c.model}});
  export_model(c, *model, dev);
  return r;
}

// --eval-only: a saved model (its kind from the file's "model") scored on
// its test inputs again. --model, given again, must name the file's kind;
// training's flags (the seed draws the training data and the initialisation)
// would do nothing.
int eval_only(Config c, const CLI::App& cli) {
  app::refuse_training_flags(cli, {"--epochs", "--batch-size", "--lr", "--seed"});
  const std::string given = c.model;
  std::map<std::string, std::string> meta;
  const StateDict sd = load_safetensors(c.weights, &meta);
  const auto kind = meta.find("model");
  if (kind == meta.end() ||
      (kind->second != "single-head" && kind->second != "transformer" && kind->second != "encoder"))
    throw IOError(c.weights +
                  ": not a model.safetensors of attention_regression's trained models (its metadata "
                  "\"model\" is not single-head, transformer or encoder)");
  c.model = kind->second;
  app::refuse_changed_flag(cli, "--model", "'" + given + "'", "'" + c.model + "'", c.weights);
  app::check_eval_weights("attention_regression", sd, c.weights, c.force_eval);
  const std::unique_ptr<ar::AttentionModel> model = make_model(c.model);
  try {
    model->load_state_dict(sd, /*strict=*/true);
  } catch (const Error& e) {
    throw IOError(c.weights + ": its tensors do not fit the " + c.model + " model: " + e.what());
  }
  if (c.check) {
    std::printf("attention_regression: check ok\n");
    return 0;
  }
  const Device dev(c.device);
  model->to(dev);
  model->eval();
  NoGradGuard ng;
  const Tensor x = test_inputs(c.model).to(dev);
  Tensor pred;
  {
    const AutocastGuard region = app::MixedPrecision(c.precision, dev.type).region();  // as it was trained
    pred = (*model)(x).to(kFloat32);
  }
  const double mse = mse_loss(pred.reshape({-1}), f(x.reshape({-1}))).item();
  app::check_eval_loss(mse, c.weights);
  app::write_json((fs::path(c.out) / "eval.json").string(),
                  {{"weights", c.weights}, {"model", c.model}, {"test_mse", mse}, {"precision", c.precision}});
  std::printf("attention_regression eval %s (%s): test_mse %.6f\n", c.weights.c_str(), c.model.c_str(), mse);
  export_model(c, *model, dev);
  return 0;
}

void write_outputs(const Config& c, const Result& r) {
  const fs::path out(c.out);
  const ar::History& h = r.history;
  nlohmann::ordered_json m = {{"model", c.model},
                              {"epochs_run", h.epochs_run},
                              {"best_epoch", h.best_epoch},
                              {"final_train_loss", h.train.empty() ? 0.0 : h.train.back()},
                              {"final_val_loss", h.val.empty() ? 0.0 : h.val.back()},
                              {"test_mse", r.test_mse},
                              {"test_grid", r.test_grid},
                              {"precision", c.precision},
                              {"train_seconds", h.seconds},
                              {"seconds_per_epoch", h.epochs_run ? h.seconds / h.epochs_run : 0.0},
                              {"threads", num_threads()},
                              {"seed", c.seed},
                              {"train_loss", h.train},
                              {"val_loss", h.val},
                              {"lr", h.lr}};
  if (c.cuda_graph) m["cuda_graph_replays"] = h.graph_replays;
  app::write_json((out / "metrics.json").string(), m);

  const std::vector<double> xs = values(r.test_x), ps = values(r.test_pred);
  std::ostringstream csv;
  csv << "x,y_true,y_pred\n";
  for (size_t i = 0; i < xs.size(); ++i)
    csv << xs[i] << ',' << 2 * std::sin(xs[i]) + std::pow(xs[i], 0.8) << ',' << ps[i] << '\n';
  app::write_text((out / "predictions.csv").string(), csv.str());

  // Truth (dense), prediction, training points.
  plot::LineChart pc;
  pc.title = c.model + ": y = 2 sin(x) + x^0.8";
  pc.xlabel = "x";
  pc.ylabel = "y";
  plot::Series train{values(r.train_x), values(r.train_y), "training points", 7, false, 1};
  plot::Series truth, pred{xs, ps, "prediction", 1, true, 3};
  const double hi = xs.back();
  for (int i = 0; i <= 400; ++i) {
    const double x = hi * i / 400.0;
    truth.x.push_back(x);
    truth.y.push_back(2 * std::sin(x) + std::pow(x, 0.8));
  }
  truth.label = "truth";
  truth.color = 0;
  pc.series = {train, truth, pred};
  plot::render(pc).save_png((out / "prediction.png").string());

  plot::Heatmap hm;
  hm.title = c.model + ": attention weights";
  hm.xlabel = r.weights_xlabel;
  hm.ylabel = r.weights_ylabel;
  hm.rows = static_cast<int>(r.weights.size(0));
  hm.cols = static_cast<int>(r.weights.size(1));
  hm.values = values(r.weights);
  hm.x_first = r.key_first, hm.x_last = r.key_last, hm.y_first = r.query_first, hm.y_last = r.query_last;
  hm.col_labels = r.key_labels;
  plot::render(hm).save_png((out / "attention.png").string());

  if (!h.train.empty()) {
    plot::LineChart lc;
    lc.title = c.model + ": loss";
    lc.xlabel = "epoch";
    lc.ylabel = "MSE (log scale)";
    lc.log_y = true;
    std::vector<double> ep;
    for (size_t i = 0; i < h.train.size(); ++i) ep.push_back(static_cast<double>(i + 1));
    lc.series = {{.x = ep, .y = h.train, .label = "train", .color = 0, .line = true, .marker_radius = 0},
                 {.x = ep, .y = h.val, .label = "validation", .color = 1, .line = true, .marker_radius = 0}};
    plot::render(lc).save_png((out / "loss.png").string());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App cli{"Attention for regression: learn y = 2 sin(x) + x^0.8 on [0, 5] from noisy samples"};
  cli.add_option("--model", c.model, "nw, nw-param, single-head, transformer (default) or encoder")
      ->check(CLI::IsMember({"nw", "nw-param", "single-head", "transformer", "encoder"}));
  cli.add_option("--epochs", c.epochs,
                 "training epochs (defaults: nw-param 50, single-head 50, transformer 200, encoder 1500; "
                 "early stopping may end sooner; at most 1000000)")
      ->check(ember::app::int_range(1, 1000000));
  cli.add_option("--batch-size", c.batch, "sequences per batch (defaults: single-head 200, others 32; at most 100000)")
      ->check(ember::app::int_range(1, 100000));
  // Up to 1e15: the non-finite-loss test (cmake/nonfinite_attention_regression.cmake) diverges on purpose at 1e12.
  cli.add_option("--lr", c.lr, "learning rate (default 1e-3; nw-param's SGD 0.5; at most 1e15)")
      ->check(ember::app::finite_range(1e-12, 1e15));
  ember::app::add_seed(cli, c.seed, "random seed (default 4); runs are deterministic for a seed and thread count");
  ember::app::add_threads(cli, c.threads);
  ember::app::add_device(cli, c.device,
                         "cpu (default) or cuda / cuda:N for single-head, transformer and encoder (needs a build with "
                         "the CUDA backend and a GPU)");
  ember::app::add_precision(cli, c.precision);
  ember::app::add_cuda_graph(cli, c.cuda_graph, "zero_grad, forward, loss, backward, clipping, Adam");
  ember::app::add_out(cli, c.out);
  ember::app::add_quiet(cli, c.quiet);
  ember::app::add_check(cli, c.check);
  CLI::Option* eval_only_flag =
      cli.add_flag("--eval-only", c.eval_only, "score --weights on the test inputs again and exit (writes eval.json)");
  ember::app::input_file(cli.add_option("--weights", c.weights,
                                        "model.safetensors of a single-head, transformer or encoder run, for "
                                        "--eval-only (the model comes from its metadata)"))
      ->needs(eval_only_flag);
  ember::app::add_force_eval(cli, c.force_eval)->needs(eval_only_flag);
  ember::app::add_export_onnx(cli, c.onnx, "x (batch, points) -> y (batch, points); the trained models only");
  return ember::app::run_main("attention_regression", cli, argc, argv, [&] {
    if (c.eval_only && c.weights.empty()) throw ember::app::UsageError("--eval-only needs --weights MODEL");
    if (c.onnx.enabled() && !c.eval_only && (c.model == "nw" || c.model == "nw-param"))
      throw ember::app::UsageError("--export-onnx: --model " + c.model +
                                   " is kernel regression over its training points, not a trained network; export "
                                   "single-head, transformer or encoder");
    if (c.model == "nw-param" && c.epochs == 0) c.epochs = 50;
    if (!c.eval_only && (c.model == "nw" || c.model == "nw-param") && c.device != "cpu")
      throw ember::app::UsageError("--device " + c.device + ": the nw models run on the cpu only");
    if (!c.eval_only && (c.model == "nw" || c.model == "nw-param") && c.precision != "fp32")
      throw ember::app::UsageError("--precision " + c.precision + ": the nw models run in fp32 only");
    if (c.cuda_graph && (c.eval_only || c.model == "nw" || c.model == "nw-param"))
      throw ember::app::UsageError("--cuda-graph: for training single-head, transformer or encoder");
    ember::app::check_cuda_graph(c.cuda_graph, c.device, c.precision);
    ember::app::apply_threads(c.threads);
    ember::app::prepare_out_dir(c.out);
    ember::app::check_export_onnx(c.onnx);
    if (c.eval_only) return eval_only(c, cli);
    if (c.check) {  // the models are small: the flags and --out are what can go wrong
      std::printf("attention_regression: check ok\n");
      return 0;
    }
    Generator g(c.seed);
    manual_seed(c.seed + 1);  // dropout and initialisation
    const Result r = c.model == "nw" || c.model == "nw-param" ? run_nw(c, g, c.model == "nw-param") : run_trained(c, g);
    write_outputs(c, r);
    std::printf("%s: test_mse %.6f on %s  (%d epochs, best %d, %.2fs, %.3fs/epoch, %d threads) -> %s\n",
                c.model.c_str(), r.test_mse, r.test_grid.c_str(), r.history.epochs_run, r.history.best_epoch,
                r.history.seconds, r.history.epochs_run ? r.history.seconds / r.history.epochs_run : 0.0, num_threads(),
                c.out.c_str());
    return 0;
  });
}
