// The GPT demo's --resume (config.h): the configuration a resumed run takes
// (the checkpoint's, with this invocation's length and reporting), the
// corpus it trains on, and its state put back exactly: model, AdamW,
// schedule, iteration, generators, clock and curves. Both paths use it, the
// character-level one (main.cpp) and GPT-2's (gpt2_run.cpp).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <ember/nn/checkpoint.h>

#include "app.h"
#include "config.h"

namespace gpt {
using namespace ember;

std::map<std::string, std::string> training_metadata(const Generator& batches, int64_t iter, double train_seconds,
                                                     const app::MetricsHistory& hist,
                                                     const std::string& data_fingerprint) {
  return {{kDataKey, data_fingerprint},
          {"iter", std::to_string(iter)},
          {"batch_generator_offset", std::to_string(batches.offset())},
          {"dropout_generator_offset", std::to_string(default_generator().offset())},
          {"train_seconds", nlohmann::json(train_seconds).dump()},
          {"history", hist.to_json().dump()}};
}

void check_resume_data(const Config& c, const std::map<std::string, std::string>& meta, const Corpus& corpus,
                       const std::string& now) {
  const auto it = meta.find(kDataKey);
  if (it == meta.end() || it->second == now) return;
  const std::string what = "the corpus (" + corpus.description + ") changed since " + c.resume +
                           " was written: it is now " + now + ", the checkpoint recorded " + it->second.substr(0, 80);
  if (!c.allow_data_change) throw app::UsageError(what + " (--allow-data-change trains on it anyway)");
  std::fprintf(stderr, "gpt: note: %s; training on it (--allow-data-change)\n", what.c_str());
}

int64_t restore(const StateDict& ckpt, const std::map<std::string, std::string>& meta, const std::string& path,
                nn::GPT& model, optim::AdamW& opt, optim::LRScheduler& sched, Generator& batches, double& train_seconds,
                app::MetricsHistory& hist, int64_t total_iters) {
  bool has_optimizer = false;
  for (auto& [k, t] : ckpt) has_optimizer = has_optimizer || k.rfind("optimizer.", 0) == 0;
  if (!has_optimizer || !meta.count("iter"))
    throw IOError(path + ": not a checkpoint (no optimizer state or iteration; a model.safetensors is for --weights)");
  // Counts as the whole string, in range ("4abc" is not 4).
  const auto count = [&](const char* key, const CLI::Validator& v) {
    const auto it = meta.find(key);
    if (it == meta.end()) throw IOError(path + ": no '" + key + "' in its metadata");
    std::string text = it->second.substr(0, 64);
    const std::string err = v(text);
    if (!err.empty()) throw IOError(path + ": metadata '" + key + "': " + err);
    return text;
  };
  const int64_t iter = std::stoll(count("iter", app::int_range(0, total_iters)));
  const uint64_t batch_offset = std::stoull(count("batch_generator_offset", app::uint64_any()));
  const uint64_t dropout_offset = std::stoull(count("dropout_generator_offset", app::uint64_any()));
  try {
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
    batches.set_offset(batch_offset);
    default_generator().set_offset(dropout_offset);
    const nlohmann::json seconds = app::parse_stored_json(meta.at("train_seconds"), path, "metadata 'train_seconds'");
    if (!seconds.is_number() || !std::isfinite(seconds.get<double>()) || seconds.get<double>() < 0)
      throw IOError(path + ": metadata 'train_seconds': " + stored_text(seconds) + " is not a number of seconds");
    train_seconds = seconds.get<double>();
    hist.from_json(app::parse_stored_json(meta.at("history"), path, "metadata 'history'"), {"train_loss", "val_loss"});
    return iter;
  } catch (const Error&) {
    throw;  // parse_stored_json's and load_training_checkpoint's, which name the file already
  } catch (const std::exception& e) {
    throw IOError(path + ": bad checkpoint metadata: " + e.what());
  }
}

}  // namespace gpt
