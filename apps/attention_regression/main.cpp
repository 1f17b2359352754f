// Attention used for regression, after the reference notes: learn
// y = 2 sin(x) + x^0.8 on [0, 5] from noisy samples.
//
//   nw           Nadaraya-Watson kernel regression (no training)
//   nw-param     the same pooling with a learned kernel width w, SGD
//   transformer  (default) tokens are 50 x-values; Linear(1,64) embedding +
//                learned positions, one pre-norm block (4-head attention,
//                GELU MLP 256), Linear(64,1) per token; Adam, clipping,
//                ReduceLROnPlateau, early stopping keeping the best weights
//
// Writes metrics.json, predictions.csv and (transformer) model.safetensors
// into --out. Deterministic for a given seed and thread count.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include <ember/ember.h>

using namespace ember;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kTokens = 50;

Tensor f(const Tensor& x) { return add(mul(sin(x), 2.0), pow(x, 0.8)); }

// n sequences of kTokens uniform x-values in [lo, hi), unsorted as in the notes.
Tensor sequences(int64_t n, double lo, double hi, Generator& g) {
  return uniform({n, kTokens}, lo, hi, TensorOptions(kFloat32), &g);
}

struct Config {
  std::string model = "transformer", out = "out/attention_regression", device = "cpu";
  int epochs = 200, batch = 32, threads = 0;
  double lr = 1e-3;
  uint64_t seed = 0;
  bool quiet = false;
};

// The default model: (N, 50) x-values -> (N, 50) predictions.
struct TokenTransformer : nn::Module {
  std::shared_ptr<nn::Linear> embed, out;
  std::shared_ptr<nn::LearnedPositionalEncoding> pos;
  std::shared_ptr<nn::TransformerEncoderLayer> block;
  TokenTransformer() {
    embed = register_module("embed", std::make_shared<nn::Linear>(1, 64));
    pos = register_module("pos", std::make_shared<nn::LearnedPositionalEncoding>(64, kTokens));
    block = register_module("block", std::make_shared<nn::TransformerEncoderLayer>(
                                         nn::TransformerEncoderLayerOptions{64, 4, 256, 0.1, "gelu", 1e-5, true, true}));
    out = register_module("out", std::make_shared<nn::Linear>(64, 1));
    // Xavier-uniform weights and zero biases for every Linear, as in the
    // recipe; LayerNorms keep their ones and zeros.
    for (auto& [name, p] : named_parameters()) {
      if (name.find("norm") != std::string::npos) continue;
      if (name == "pos.weight") {
        nn::init::normal_(p, 0.0, 1.0);  // nn.Embedding's N(0, 1), as in the notes
      } else if (name == "block.self_attn.in_proj_weight") {
        // The notes project q, k and v with three Linear(64, 64): Xavier per block.
        for (int i = 0; i < 3; ++i) {
          Tensor block = p.narrow(0, i * 64, 64);
          nn::init::xavier_uniform_(block);
        }
      } else if (p.dim() >= 2) {
        nn::init::xavier_uniform_(p);
      } else {
        nn::init::zeros_(p);
      }
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*pos)((*embed)(x.unsqueeze(-1)));
    return (*out)(block->forward(h)).squeeze(-1);
  }
};

StateDict clone_state(const nn::Module& m) {
  StateDict s;
  for (auto& [n, t] : m.state_dict()) s.emplace_back(n, t.detach().clone());
  return s;
}

struct Result {
  double train_loss = 0, val_loss = 0, test_mse = 0, seconds = 0;
  int epochs_run = 0, best_epoch = 0;
  Tensor test_x, test_pred;
};

Result run_transformer(const Config& c, Generator& g) {
  // 250 sequences over [0,5], 125 over [1.5,3.5], 125 over [3,5].
  const Tensor x_train = cat({sequences(250, 0, 5, g), sequences(125, 1.5, 3.5, g), sequences(125, 3, 5, g)});
  const Tensor y_train = add(f(x_train), mul(randn(x_train.shape(), kFloat32, &g), 0.01));
  const Tensor x_val = linspace(0, 5, kTokens).unsqueeze(0).expand({100, kTokens}).contiguous();
  const Tensor y_val = add(f(x_val), mul(randn(x_val.shape(), kFloat32, &g), 0.01));
  const Tensor x_test = linspace(0, 5, kTokens).unsqueeze(0);

  TokenTransformer model;
  optim::Adam opt(model.parameters(), optim::AdamOptions{c.lr, 0.9, 0.999, 1e-8, 1e-6});
  optim::ReduceLROnPlateau::Options po;
  po.factor = 0.5;
  po.patience = 10;
  po.min_lr = 1e-6;
  optim::ReduceLROnPlateau plateau(opt, po);

  Result r;
  double best = INFINITY;
  StateDict best_state;
  int since_best = 0;
  const int64_t n = x_train.size(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= c.epochs; ++epoch) {
    model.train();
    const Tensor perm = randperm(n, &g);
    double total = 0;
    int batches = 0;
    for (int64_t s = 0; s < n; s += c.batch) {
      const Tensor idx = perm.narrow(0, s, std::min<int64_t>(c.batch, n - s));
      const Tensor xb = index_select(x_train, 0, idx), yb = index_select(y_train, 0, idx);
      opt.zero_grad();
      Tensor loss = mse_loss(model(xb), yb);
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      total += loss.item();
      ++batches;
    }
    model.eval();
    double val;
    {
      NoGradGuard ng;
      val = mse_loss(model(x_val), y_val).item();
    }
    plateau.step(val);
    r.train_loss = total / batches;
    r.val_loss = val;
    r.epochs_run = epoch;
    if (val < best) {
      best = val;
      r.best_epoch = epoch;
      best_state = clone_state(model);
      since_best = 0;
    } else if (++since_best >= 20) {
      if (!c.quiet) std::printf("early stop at epoch %d (best %d)\n", epoch, r.best_epoch);
      break;
    }
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!c.quiet && (epoch % 10 == 0 || epoch == 1))
      std::printf("epoch %3d  train %.6f  val %.6f  lr %.2e  %.1fs\n", epoch, r.train_loss, val,
                  opt.param_groups()[0].lr, el);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  model.load_state_dict(best_state);
  model.eval();
  NoGradGuard ng;
  r.test_x = x_test.squeeze(0);
  r.test_pred = model(x_test).squeeze(0);
  r.test_mse = mse_loss(r.test_pred, f(r.test_x)).item();
  fs::create_directories(c.out);
  nn::save(model, (fs::path(c.out) / "model.safetensors").string(), {{"model", "transformer"}});
  return r;
}

// Nadaraya-Watson: weights softmax(-((x - x_i) w)^2 / 2) over 50 training points.
Result run_nw(const Config& c, Generator& g, bool learn_w) {
  std::vector<float> xs = sequences(1, 0, 5, g).to_vector<float>();
  std::sort(xs.begin(), xs.end());  // sorted keys, so the heatmap shows the diagonal band
  const Tensor x_train = from_vector(xs, {kTokens});
  const Tensor y_train = add(f(x_train), mul(randn({kTokens}, kFloat32, &g), 0.5));
  const Tensor x_test = arange(0, 5, 0.1, kFloat32);
  Tensor w = ones({1}).requires_grad_(learn_w);
  auto predict = [&](const Tensor& q, const Tensor& keys, const Tensor& vals, const Tensor& mask) {
    const Tensor d = mul(sub(q.unsqueeze(1), keys.unsqueeze(0)), w);
    const Tensor s = mul(square(d), -0.5);
    const Tensor a = mask.defined() ? masked_softmax(s, mask) : softmax(s, -1);
    return matmul(a, vals);
  };
  Result r;
  const auto t0 = std::chrono::steady_clock::now();
  if (learn_w) {
    // Each training point attends to the others (itself masked out).
    optim::SGD opt({w}, optim::SGDOptions{0.5});
    const Tensor self = eye(kTokens, TensorOptions(kBool));
    for (int epoch = 1; epoch <= c.epochs; ++epoch) {
      opt.zero_grad();
      Tensor loss = mul(sum(square(sub(predict(x_train, x_train, y_train, self), y_train))), 0.5);
      loss.backward();
      opt.step();
      r.train_loss = loss.item();
      r.epochs_run = epoch;
      if (!c.quiet && (epoch % 10 == 0 || epoch == 1))
        std::printf("epoch %3d  loss %.6f  w %.4f\n", epoch, r.train_loss, w.item());
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NoGradGuard ng;
  r.test_x = x_test;
  r.test_pred = predict(x_test, x_train, y_train, Tensor());
  r.test_mse = mse_loss(r.test_pred, f(x_test)).item();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Attention for regression: learn y = 2 sin(x) + x^0.8 on [0, 5]"};
  app.add_option("--model", c.model, "nw, nw-param or transformer")
      ->check(CLI::IsMember({"nw", "nw-param", "transformer"}));
  app.add_option("--epochs", c.epochs, "training epochs (transformer: early stopping may end sooner)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", c.seed, "random seed; runs are deterministic for a seed and thread count");
  app.add_option("--threads", c.threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--device", c.device, "cpu (cuda arrives with the CUDA backend)")->check(CLI::IsMember({"cpu"}));
  app.add_option("--out", c.out, "output directory");
  app.add_flag("--quiet", c.quiet, "print only the summary");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (c.model != "transformer" && app.count("--epochs") == 0) c.epochs = c.model == "nw-param" ? 50 : 0;
  try {
    if (c.threads > 0) set_num_threads(c.threads);
    Generator g(c.seed);
    manual_seed(c.seed + 1);  // dropout and initialisation
    const Result r = c.model == "transformer" ? run_transformer(c, g) : run_nw(c, g, c.model == "nw-param");
    fs::create_directories(c.out);
    nlohmann::ordered_json m = {{"model", c.model},           {"epochs_run", r.epochs_run},
                                {"best_epoch", r.best_epoch}, {"final_train_loss", r.train_loss},
                                {"final_val_loss", r.val_loss}, {"test_mse", r.test_mse},
                                {"train_seconds", r.seconds},
                                {"seconds_per_epoch", r.epochs_run ? r.seconds / r.epochs_run : 0.0},
                                {"threads", num_threads()},   {"seed", c.seed}};
    std::ofstream(fs::path(c.out) / "metrics.json") << m.dump(2) << "\n";
    std::ofstream csv(fs::path(c.out) / "predictions.csv");
    csv << "x,y_true,y_pred\n";
    const std::vector<float> xs = r.test_x.to_vector<float>(), ps = r.test_pred.to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const double x = xs[i];
      csv << x << ',' << 2 * std::sin(x) + std::pow(x, 0.8) << ',' << ps[i] << '\n';
    }
    std::printf("%s: test_mse %.6f  (%d epochs, %.2fs, %d threads) -> %s\n", c.model.c_str(), r.test_mse, r.epochs_run,
                r.seconds, num_threads(), c.out.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "attention_regression: %s\n", e.what());
    return 1;
  }
  return 0;
}
