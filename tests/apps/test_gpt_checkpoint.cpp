// The GPT app's checkpoints (apps/gpt/config.h): the shared layout
// (nn/checkpoint.h) round trips exactly and refuses a state that would load
// differently; a file in the older GPT layout, written here as the app wrote
// it, is read once into the same state; model files and both checkpoint
// layouts serve --weights.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <ember/ember.h>
#include <ember/nn/checkpoint.h>

#include "../test_util.h"
#include "config.h"

using namespace ember;
using test::contains;
using test::error_of;
namespace fs = std::filesystem;

namespace {

// A tiny model after two training steps: model, AdamW in two groups (as the app builds it), schedule, batches.
struct Run {
  gpt::Config c;
  nn::CharTokenizer vocab = nn::CharTokenizer::from_text("to be or not to be, that is the question\n");
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::NanoGPTCosineLR> sched;
  Generator batches{7};
  explicit Run(int64_t steps) {
    c.layers = 1, c.heads = 2, c.width = 8, c.context = 6, c.batch = 2, c.iters = 10, c.warmup = 3;
    manual_seed(5);
    model = std::make_unique<nn::GPT>(gpt::model_config(c, vocab.size()));
    std::vector<Tensor> decay, no_decay;
    for (auto& [n, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    opt = std::make_unique<optim::AdamW>(
        std::vector<optim::ParamGroup>{optim::ParamGroup{decay, -1, c.weight_decay},
                                       optim::ParamGroup{no_decay, -1, 0.0}},
        optim::AdamWOptions{.lr = c.lr, .beta2 = c.beta2, .weight_decay = c.weight_decay});
    sched = std::make_unique<optim::NanoGPTCosineLR>(*opt, c.warmup, c.iters, c.min_lr);
    const std::vector<int64_t> tokens = vocab.encode("to be or not to be, that is the question\nto be");
    for (int64_t i = 0; i < steps; ++i) {
      auto [x, y] = nn::random_batch(tokens, c.batch, c.context, batches);
      Tensor loss = model->loss(x, y);
      opt->zero_grad();
      loss.backward();
      opt->step();
      sched->step();
    }
  }
};

std::map<std::string, std::string> metadata(const Run& r, int64_t iter) {
  std::vector<int> bytes;
  for (char ch : r.vocab.chars()) bytes.push_back(static_cast<unsigned char>(ch));
  return {{"format", "ember gpt"},
          {"config", gpt::config_json(r.c).dump()},
          {"vocab", nlohmann::json(bytes).dump()},
          {"iter", std::to_string(iter)},
          {"batch_generator_offset", std::to_string(r.batches.offset())},
          {"dropout_generator_offset", "0"},
          {"train_seconds", "1.5"},
          {"history", R"({"iters":[2.0],"train_loss":[3.25],"val_loss":[3.5]})"}};
}

void check_same_state(const StateDict& a, const StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second.to_vector<double>() == b[i].second.to_vector<double>());
  }
}

}  // namespace

TEST_CASE("gpt checkpoint: the shared layout round trips, the older layout is read once into the same state") {
  const fs::path dir = fs::temp_directory_path() / "ember_test_gpt_checkpoint";
  fs::create_directories(dir);
  Run trained(2);
  const Generator dropout_before = default_generator();
  app::MetricsHistory hist = gpt::make_history();
  hist.record(2, {{"train_loss", 3.25}, {"val_loss", 3.5}});

  // The older layout, as the app wrote it: the model unprefixed, AdamW under "optimizer.", no schedule.
  const std::string older = (dir / "older.safetensors").string();
  {
    StateDict sd = trained.model->state_dict();
    for (auto& [k, t] : trained.opt->state_dict()) sd.emplace_back("optimizer." + k, t);
    save_safetensors(older, sd, metadata(trained, 2));
  }
  const std::string shared = (dir / "shared.safetensors").string();
  gpt::save_checkpoint(shared, trained.c, trained.vocab, *trained.model, *trained.opt, *trained.sched, trained.batches,
                       2, 1.5, hist, "1 bytes, fnv1a64 0");

  for (const std::string& file : {shared, older}) {
    CAPTURE(file);
    std::map<std::string, std::string> meta;
    const StateDict ckpt = load_safetensors(file, &meta);
    Run fresh(0);
    double seconds = 0;
    app::MetricsHistory back = gpt::make_history();
    const int64_t iter = gpt::restore(ckpt, meta, file, *fresh.model, *fresh.opt, *fresh.sched, fresh.batches, seconds,
                                      back, trained.c.iters);
    CHECK(iter == 2);
    CHECK(seconds == 1.5);
    CHECK(back.to_json() == hist.to_json());
    CHECK(fresh.batches.offset() == trained.batches.offset());
    CHECK(fresh.sched->last_epoch() == 2);
    CHECK(fresh.opt->param_groups()[0].lr == trained.opt->param_groups()[0].lr);  // the rate of iteration 2
    check_same_state(fresh.model->state_dict(), trained.model->state_dict());
    // The moments; the groups' rates differ in the older file (it stored the previous iteration's).
    StateDict a, b;
    for (auto& [k, t] : fresh.opt->state_dict())
      if (k.rfind("param_groups.", 0) != 0) a.emplace_back(k, t);
    for (auto& [k, t] : trained.opt->state_dict())
      if (k.rfind("param_groups.", 0) != 0) b.emplace_back(k, t);
    check_same_state(a, b);
    // --weights reads either layout.
    nn::CharTokenizer vocab;
    std::map<std::string, std::string> m;
    check_same_state(gpt::load_model(file, vocab, m)->state_dict(), trained.model->state_dict());
    CHECK(vocab.chars() == trained.vocab.chars());
  }
  default_generator() = dropout_before;

  // A state that would not load back as stored is refused, naming the file and the entry.
  std::map<std::string, std::string> meta;
  StateDict ckpt = load_safetensors(shared, &meta);
  for (auto& [k, t] : ckpt)
    if (k == "scheduler.last_epoch") t = scalar_tensor(2.5, kFloat64);
  Run fresh(0);
  double seconds = 0;
  app::MetricsHistory back = gpt::make_history();
  const std::string err = error_of<IOError>([&] {
    gpt::restore(ckpt, meta, shared, *fresh.model, *fresh.opt, *fresh.sched, fresh.batches, seconds, back, 10);
  });
  CHECK(contains(err, shared));
  CHECK(contains(err, "last_epoch"));
  fs::remove_all(dir);
}
