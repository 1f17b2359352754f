// The ViT demo's command line: every flag with its range (apps/common/app.h
// turns them into the table of bad invocations). Kept apart from main.cpp,
// which holds the training.
#pragma once

#include <CLI/CLI.hpp>
#include <limits>
#include <string>
#include <vector>

#include "app.h"
#include "graph_step.h"
#include "precision.h"
#include "vit_run_config.h"

namespace vit {

// "N,M": N in [0, 64] operations, M in [0, 30] (of 31 bins).
inline bool parse_randaugment(const std::string& s, int64_t& n, int64_t& m) {
  const size_t comma = s.find(',');
  if (comma == std::string::npos || s.find(',', comma + 1) != std::string::npos) return false;
  const auto num = [](const std::string& t, int64_t hi, int64_t& out) {
    if (t.empty() || t.size() > 3 || t.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoll(t);
    return out <= hi;
  };
  return num(s.substr(0, comma), 64, n) && num(s.substr(comma + 1), 30, m);
}
inline CLI::Validator randaugment_validator() {
  return CLI::Validator(
      [](std::string& s) {
        int64_t n = 0, m = 0;
        return parse_randaugment(s, n, m) ? std::string()
                                          : "expected N,M with N from 0 to 64 and M from 0 to 30, got '" + s + "'";
      },
      "N,M");
}

// The flags, into c; --randaugment's text into randaugment (split by the caller).
inline void add_flags(CLI::App& cli, Config& c, std::string& randaugment) {
  using ember::app::fmt;
  namespace app = ember::app;
  cli.add_option("--data", c.data, "data set: fashion-mnist (default), mnist or cifar10")
      ->check(CLI::IsMember({"fashion-mnist", "mnist", "cifar10"}));
  app::input_dir(
      cli.add_option("--data-dir", c.data_dir,
                     "directory of the data files (default: /usr/share/datasets/fashion-mnist for "
                     "fashion-mnist, data/<name> otherwise; IDX files plain or .gz, CIFAR-10 binary batches)"));
  cli.add_option("--epochs", c.epochs, "training epochs (default 8, at most 100000)")->check(app::int_range(1, 100000));
  cli.add_option("--batch-size", c.batch_size,
                 "images per step (default 128, at most 65536); with --distributed, per process: a step of N "
                 "processes sees N times as many")
      ->check(app::int_range(1, 65536));
  cli.add_option("--lr", c.lr, "peak learning rate of AdamW (default 2e-3)")->check(app::finite_range(1e-12, 1e3));
  cli.add_option("--weight-decay", c.weight_decay,
                 "AdamW weight decay on weight matrices; none on biases, norms, [CLS], positions (default 0.05)")
      ->check(app::finite_range(0.0, 1e3));
  cli.add_option("--warmup-epochs", c.warmup_epochs, "linear warm-up length in epochs, then cosine decay (default 1)")
      ->check(app::finite_range(0.0, 1e5));
  cli.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine (default 1e-5)")
      ->check(app::finite_range(0.0, 1e3));
  cli.add_option("--label-smoothing", c.label_smoothing, "label smoothing of the training loss (default 0.1)")
      ->check(app::finite_range(0.0, 0.99));
  cli.add_option("--clip", c.clip, "gradient clipping: max global norm, 0 = off (default 1)")
      ->check(app::finite_range(0.0, 1e9));
  app::add_seed(cli, c.seed, "random seed (default 0); runs are deterministic for a seed and thread count");
  app::add_threads(cli, c.threads);
  app::add_device(cli, c.device,
                  "cpu (default) or cuda / cuda:N (a build with the CUDA backend and a GPU); checkpoints move between "
                  "devices");
  app::add_out(cli, c.out);
  app::input_file(cli.add_option(
      "--resume", c.resume,
      "continue the run saved in this checkpoint (its configuration is used; --epochs may extend it); a checkpoint "
      "that would not resume exactly is refused, NaN/Inf in it are reported as a warning"));
  CLI::Option* eval_only = cli.add_flag("--eval-only", c.eval_only, "evaluate --weights on the test set and exit");
  app::input_file(cli.add_option("--weights", c.weights,
                                 "checkpoint.safetensors or model.safetensors for --eval-only (NaN, Inf or "
                                 "overflowing weights in it are refused unless --force-eval)"))
      ->needs(eval_only);
  app::add_force_eval(cli, c.force_eval)->needs(eval_only);
  app::add_quiet(cli, c.quiet);
  app::add_check(cli, c.check);
  cli.add_flag("--distributed", c.distributed,
               "data-parallel over the processes of mpirun/srun (mpirun -np N build/bin/vit --distributed): each "
               "trains on its shard of every epoch, gradients are averaged, rank 0 prints and writes the outputs "
               "(docs/DISTRIBUTED.md)");
  // Model sizes: each bounded, and their product by kMaxParameters (check_model_size).
  cli.add_option("--patch-size", c.patch, "patch side in pixels; must divide the image size (default 7)")
      ->check(app::int_range(1, 1024));
  cli.add_option("--width", c.width, "embedding width (default 64, at most 65536)")->check(app::int_range(1, 65536));
  cli.add_option("--depth", c.depth, "encoder blocks (default 4, at most 1024)")->check(app::int_range(1, 1024));
  cli.add_option("--heads", c.heads, "attention heads; must divide --width (default 4)")
      ->check(app::int_range(1, 65536));
  cli.add_option("--mlp", c.mlp, "MLP hidden width (default 128, at most 262144)")->check(app::int_range(1, 262144));
  cli.add_option("--dropout", c.dropout, "dropout in the encoder (default 0)")->check(app::finite_range(0.0, 0.95));
  cli.add_option(
         "--hybrid", c.stem,
         "hybrid ViT: a 3x3 conv stem with this many channels before the patches (default 0: off, at most 4096)")
      ->check(app::int_range(0, 4096));
  cli.add_option("--crop-padding", c.crop_padding,
                 "random crop with this zero padding, 0 = off (default 0, at most 64)")
      ->check(app::int_range(0, 64));
  cli.add_option("--hflip", c.hflip, "random horizontal flip: auto (default: on except for mnist), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cli.add_option("--erase", c.erase, "random erasing probability (default 0)")->check(app::finite_range(0.0, 1.0));
  cli.add_option("--mixup", c.mixup, "mixup Beta(alpha, alpha), 0 = off (default 0)")
      ->check(app::finite_range(0.0, 1e3));
  cli.add_option("--cutmix", c.cutmix, "cutmix Beta(alpha, alpha), 0 = off (default 0)")
      ->check(app::finite_range(0.0, 1e3));
  cli.add_option("--limit-train", c.limit_train, "use only the first N training images (smoke runs; 0 = all)")
      ->check(app::int_range(0, std::numeric_limits<int64_t>::max()));
  cli.add_option("--limit-test", c.limit_test, "use only the first N test images (smoke runs; 0 = all)")
      ->check(app::int_range(0, std::numeric_limits<int64_t>::max()));
  cli.add_option("--stop-after", c.stop_after, "stop (with a checkpoint) after this many epochs, as if interrupted")
      ->check(app::int_range(0, 100000));
  cli.add_option("--eval-batch-size", c.eval_batch, "images per evaluation batch (default 1000, at most 65536)")
      ->check(app::int_range(1, 65536));
  // The DeiT recipe.
  app::input_file(cli.add_option("--teacher", c.teacher,
                                 "CNN teacher for distillation (model.safetensors written by build/bin/cnn); its "
                                 "logits are computed on the fly for every augmented batch"));
  cli.add_option("--distill", c.distill,
                 "distillation through a distillation token and head (DeiT): none (default), hard (the teacher's "
                 "argmax) or soft (KL at --distill-temperature); needs --teacher")
      ->check(CLI::IsMember({"none", "hard", "soft"}));
  cli.add_option("--distill-temperature", c.distill_temperature, "temperature of --distill soft (default 1)")
      ->check(app::finite_range(1e-3, 1e3));
  cli.add_option("--distill-alpha", c.distill_alpha,
                 "weight of the distillation loss against the label loss (default 0.5, DeiT's)")
      ->check(app::finite_range(0.0, 1.0));
  cli.add_option("--randaugment", randaugment,
                 "RandAugment N,M: N operations per image at magnitude M of 31 bins (e.g. 2,9; default off)")
      ->check(randaugment_validator());
  cli.add_option("--drop-path", c.drop_path,
                 "stochastic depth: drop rate of the last block, rising linearly from 0 at the first (default 0)")
      ->check(app::finite_range(0.0, 0.95));
  cli.add_option("--ema", c.ema,
                 "keep an exponential moving average of the weights with this decay (e.g. 0.999; default 0: off) "
                 "and evaluate it beside the raw weights every epoch")
      ->check(app::finite_range(0.0, 1.0));
  app::add_precision(cli, c.precision);                                                // apps/common/precision.h
  app::add_cuda_graph(cli, c.cuda_graph, "forward, loss, backward, clipping, AdamW");  // apps/common/graph_step.h
}

// --cuda-graph against the run's configuration (a resumed run's is its
// checkpoint's): what a graph cannot hold is refused with a UsageError.
inline void check_cuda_graph(const Config& c) {
  if (!c.cuda_graph) return;
  if (c.eval_only) throw ember::app::UsageError("--cuda-graph is for training, not --eval-only");
  ember::app::check_cuda_graph(true, c.device, c.precision);
  if (c.distributed)
    throw ember::app::UsageError("--cuda-graph: not with --distributed (the gradients' all-reduce runs eagerly)");
  if (c.mixup > 0 || c.cutmix > 0)
    throw ember::app::UsageError(
        "--cuda-graph: not with --mixup or --cutmix (each batch's mixing weight is a host number the graph would "
        "freeze)");
}

// The flags whose values a checkpoint's configuration stores (to_json's
// keys), other than those resumed_config honours.
struct StoredFlag {
  const char* flag;
  std::vector<const char*> keys;
};
inline const std::vector<StoredFlag>& stored_flags() {
  static const std::vector<StoredFlag> flags = {{"--data", {"data"}},
                                                {"--batch-size", {"batch_size"}},
                                                {"--lr", {"lr"}},
                                                {"--weight-decay", {"weight_decay"}},
                                                {"--warmup-epochs", {"warmup_epochs"}},
                                                {"--min-lr", {"min_lr"}},
                                                {"--label-smoothing", {"label_smoothing"}},
                                                {"--clip", {"clip"}},
                                                {"--seed", {"seed"}},
                                                {"--patch-size", {"patch_size"}},
                                                {"--width", {"width"}},
                                                {"--depth", {"depth"}},
                                                {"--heads", {"heads"}},
                                                {"--mlp", {"mlp"}},
                                                {"--hybrid", {"stem_channels"}},
                                                {"--dropout", {"dropout"}},
                                                {"--crop-padding", {"crop_padding"}},
                                                {"--hflip", {"hflip"}},
                                                {"--erase", {"erase_prob"}},
                                                {"--mixup", {"mixup_alpha"}},
                                                {"--cutmix", {"cutmix_alpha"}},
                                                {"--randaugment", {"randaugment_ops", "randaugment_magnitude"}},
                                                {"--drop-path", {"drop_path"}},
                                                {"--ema", {"ema_decay"}},
                                                {"--distill", {"distill"}},
                                                {"--distill-temperature", {"distill_temperature"}},
                                                {"--distill-alpha", {"distill_alpha"}},
                                                {"--precision", {"precision"}},
                                                {"--limit-train", {"limit_train"}}};
  return flags;
}

// --resume and --eval-only: the checkpoint's configuration `saved` (read
// from `file`) with what this invocation says about the run itself. Honoured: --epochs (the
// run's length; the cosine is stretched over the new total, README.md), and
// --limit-test (how it is scored), beside the flags no checkpoint stores
// (--out, --data-dir, --threads, --device, --stop-after, --eval-batch-size,
// --quiet, --check); --teacher names where the teacher file is now (its
// fingerprint is still checked). Every flag of the model, the data or the
// recipe (stored_flags) comes from the checkpoint, and one given with another
// value than the stored one is a UsageError naming the flag, both values and
// the file; so is --epochs below the epochs already trained.
inline Config resumed_config(const CLI::App& cli, const Config& given, Config saved, const std::string& file,
                             const Metadata& meta) {
  namespace app = ember::app;
  const nlohmann::ordered_json now = to_json(given), stored = to_json(saved);
  const std::string why = saved.eval_only ? "--eval-only scores the file's model on its data set"
                                          : "a resumed run keeps its checkpoint's model, data and recipe";
  const auto spelled = [](const nlohmann::ordered_json& j, const std::vector<const char*>& keys) {
    std::string s;
    for (const char* k : keys) {
      const nlohmann::ordered_json& v = j.at(k);
      s += (s.empty() ? "" : ",") + (v.is_string() ? "'" + v.get<std::string>() + "'" : v.dump());
    }
    return s;
  };
  for (const StoredFlag& f : stored_flags()) {
    if (!cli.count(f.flag)) continue;
    for (const char* k : f.keys)
      if (now.at(k) != stored.at(k))
        throw app::UsageError(std::string(f.flag) + " " + spelled(now, f.keys) + " differs from the " +
                              spelled(stored, f.keys) + " that " + file + " was trained with: " + why + " (leave " +
                              f.flag + " out" + (saved.eval_only ? ")" : ", or start a new run)"));
  }
  if (cli.count("--epochs") && saved.eval_only) throw app::UsageError("--epochs is for training, not --eval-only");
  if (cli.count("--epochs")) {
    const int64_t done = read_train_state(meta, file).epoch;
    if (given.epochs < done)
      throw app::UsageError("--epochs " + std::to_string(given.epochs) + " is fewer than the " + std::to_string(done) +
                            " epochs " + file + " has trained (give at least " + std::to_string(done) + ")");
    saved.epochs = given.epochs;
  }
  if (cli.count("--limit-test")) saved.limit_test = given.limit_test;
  if (cli.count("--teacher")) saved.teacher = given.teacher;  // moved: check_teacher_file compares its bytes
  return saved;
}

}  // namespace vit
