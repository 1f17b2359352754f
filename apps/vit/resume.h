// vit's --resume and --eval-only inputs, apart from main.cpp: the file's
// tensors and the run's configuration read back from its metadata
// (load_run), and a training run's model, optimizer, scheduler, position and
// generator restored from its checkpoint (resume).
#pragma once

#include <map>
#include <optional>
#include <string>

#include <ember/ember.h>
#include <ember/nn/checkpoint.h>
#include <CLI/CLI.hpp>

#include "app.h"
#include "flags.h"
#include "vit_run_config.h"

namespace vit {

using namespace ember;

// What --resume or --eval-only read: the file's tensors, and the run's
// configuration taken from its metadata (every field checked, vit_run_config.h).
struct Loaded {
  StateDict tensors;
  std::map<std::string, std::string> meta;
  std::optional<double> recorded;  // --eval-only: the accuracy the file recorded
};
inline Loaded load_run(Config& c, const CLI::App& cli) {
  Loaded l;
  const std::string from = c.eval_only ? c.weights : c.resume;
  if (from.empty()) return l;
  l.tensors = load_safetensors(from, &l.meta);
  // On --resume, Optimizer::load_state_dict refuses broken optimizer entries and
  // broken weights are a warning; --eval-only refuses them unless --force-eval.
  StateDict warn;
  for (const auto& kv : l.tensors)
    if (c.eval_only || kv.first.rfind("optimizer.", 0) != 0) warn.push_back(kv);
  app::check_eval_weights("vit", warn, from, /*force=*/c.force_eval || !c.eval_only);
  // A model larger than the file's tensors is refused before it is built.
  if (l.meta.count("config") || !c.eval_only) {
    int64_t stored_values = 0;
    for (const auto& [name, t] : l.tensors) stored_values += t.numel();
    const Config given = c;
    c = vit::read_config(l.meta, from, stored_values, c);
    c = vit::resumed_config(cli, given, c, from, l.meta);  // flags.h: which flags are honoured, which refused
  }
  if (c.eval_only) l.recorded = vit::recorded_accuracy(l.meta, from);
  return l;
}

// --resume: model, optimizer and scheduler exactly as saved (or an error
// naming what would differ), the position in training and the RNG.
inline TrainState resume(const Config& c, const Loaded& l, nn::Module& model, optim::Optimizer& opt,
                         optim::LRScheduler& sched, int64_t steps_per_epoch, int world) {
  nn::load_training_checkpoint(l.tensors, c.resume, model, opt, sched);  // its errors name the file and the part
  TrainState s = vit::read_train_state(l.meta, c.resume);
  // Every parameter of the ViT trains: after a step each has both Adam
  // moments (a parameter with neither would silently restart from zero).
  if (s.epoch > 0 || s.batch > 0) {
    size_t moments = 0;
    for (const auto& [name, t] : opt.state_dict())
      moments += name.size() > 10 && name.rfind("exp_avg_sq") == name.size() - 10;
    if (moments != model.parameters().size())
      throw IOError(c.resume + ": the optimizer state holds Adam moments for " + std::to_string(moments) + " of the " +
                    std::to_string(model.parameters().size()) + " parameters");
  }
  // The shards, the steps per epoch and so the schedule depend on the number of processes.
  if (s.world_size != world)
    throw app::UsageError(c.resume + " was written by a run of " + std::to_string(s.world_size) +
                          " process(es); resume it with as many (this run has " + std::to_string(world) + ")");
  if (s.batch > steps_per_epoch)
    throw IOError(c.resume + ": stored training state: batch " + std::to_string(s.batch) + " is beyond the " +
                  std::to_string(steps_per_epoch) + " batches of an epoch");
  default_generator().manual_seed(s.generator_seed);
  default_generator().set_offset(s.generator_offset);
  if (!c.quiet)
    std::printf("resuming %s at epoch %lld, batch %lld of %lld\n", c.resume.c_str(),
                static_cast<long long>(s.epoch + 1), static_cast<long long>(s.batch),
                static_cast<long long>(steps_per_epoch));
  return s;
}

}  // namespace vit
