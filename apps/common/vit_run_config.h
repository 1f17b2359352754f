// The ViT demo's run configuration and training state, and their round trip
// through a checkpoint's __metadata__ (JSON in strings). --resume and
// --eval-only read them back from files anyone may have written or damaged,
// so the reading side checks every field (type, range, consistency with the
// tensors stored beside it) and throws IOError naming the file and the
// field: a bad file can neither crash the app (a zero patch size divided by,
// a string where a number was, a number too large for its int) nor make it
// build a model larger than the file's own tensors. Kept apart from main.cpp
// so that tests/apps/test_vit_config.cpp and the vit_config fuzz target
// (tests/fuzz) can call it; it needs only the core library and nlohmann-json.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vit {

using Metadata = std::map<std::string, std::string>;

// Everything that defines a run; stored in checkpoints so --resume and
// --eval-only rebuild the same model and recipe.
struct Config {
  std::string data = "fashion-mnist", data_dir, out = "out/vit", device = "cpu", resume, weights;
  int epochs = 8;  // apps/vit/README.md's recorded Fashion-MNIST run (accuracy and time there)
  int64_t batch_size = 128;
  double lr = 2e-3, weight_decay = 0.05, warmup_epochs = 1, min_lr = 1e-5, label_smoothing = 0.1, clip = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  bool eval_only = false, quiet = false;
  bool check = false;        // --check: validate and build, then exit (not stored)
  bool force_eval = false;   // --force-eval: evaluate weights that hold NaN, Inf or overflow (not stored)
  bool distributed = false;  // data-parallel over the launcher's processes (not stored)
  bool cuda_graph = false;   // --cuda-graph: each step replayed as a CUDA graph (not stored)
  // model
  int64_t patch = 7, width = 64, depth = 4, heads = 4, mlp = 128, stem = 0;
  double dropout = 0;
  // augmentation
  int64_t crop_padding = 0;
  std::string hflip = "auto";  // on for fashion-mnist and cifar10, off for mnist (digits are not symmetric)
  double erase = 0, mixup = 0, cutmix = 0;
  int64_t randaug_n = 0, randaug_m = 9;  // --randaugment N,M (N = 0: off)
  // The DeiT recipe: stochastic depth, EMA, distillation, precision.
  double drop_path = 0, ema = 0;  // --drop-path rate of the last block; --ema decay (0: off)
  std::string teacher;            // --teacher CNN.safetensors (apps/cnn)
  std::string distill = "none";   // none, hard, soft
  double distill_temperature = 1.0, distill_alpha = 0.5;
  std::string precision = "fp32";  // fp32, bf16, fp16 (autocast in forward and loss)
  // smoke runs and tests
  int64_t limit_train = 0, limit_test = 0;
  int stop_after = 0;
  int64_t eval_batch = 1000;
  // The file read_config read the model and recipe from ("": the flags), so
  // that a value that does not fit is blamed on where it came from (not stored).
  std::string config_from;
};

struct EpochRecord {
  double train_loss = 0, test_loss = 0, test_accuracy = 0, train_seconds = 0, wall_seconds = 0, lr = 0;
};

// Where training stands; stored in the checkpoint next to the tensors.
struct TrainState {
  int64_t epoch = 0;                      // epochs completed
  int64_t batch = 0;                      // batches of the current epoch completed (non-zero only after Ctrl-C)
  double loss_sum = 0, step_seconds = 0;  // of the current, partial epoch
  int64_t seen = 0;
  std::vector<EpochRecord> history;  // one per completed epoch
  double data_wait_seconds = 0, eval_seconds = 0;
  uint64_t generator_seed = 0, generator_offset = 0;  // the default generator's, at the save
  int world_size = 1;                                 // processes of a --distributed run (absent in older files: 1)
};

// A lower bound of the model's parameter count (nn::VisionTransformer), from
// the sizes alone: a file must hold at least that many values, and the app
// refuses to build more than kMaxParameters (a width of 10^6 would end in
// bad_alloc, or in hours of swapping, instead of a message).
double parameter_lower_bound(const Config& c);
inline constexpr double kMaxParameters = double(int64_t{1} << 30);  // 4 GiB of float32 weights

// The recipe and model fields (what read_config restores); also metrics.json's "config".
nlohmann::ordered_json to_json(const Config& c);
nlohmann::ordered_json to_json(const std::vector<EpochRecord>& history);
// A training checkpoint's metadata: format, config and state.
Metadata checkpoint_metadata(const Config& c, const TrainState& s);

// The stored configuration ("config") over c: the recipe and model fields
// are replaced, the run's paths, threads and verbosity stay as given.
// stored_values is the number of elements in the file's tensors: a
// configuration whose model needs more parameters than that is rejected
// before anything is built. Throws IOError naming `file` when "config" is
// missing, not JSON, or any field is absent, of the wrong type or out of range.
Config read_config(const Metadata& meta, const std::string& file, int64_t stored_values, Config c);
// The stored training state ("state"), every field checked likewise.
TrainState read_train_state(const Metadata& meta, const std::string& file);
// The test accuracy recorded when the file was saved: the last epoch of its
// "state", or its "test_accuracy" (model.safetensors); none if it has neither.
std::optional<double> recorded_accuracy(const Metadata& meta, const std::string& file);

}  // namespace vit
