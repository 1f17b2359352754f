// Ember's flagship demo: a Vision Transformer trained from scratch on a real
// image data set (Fashion-MNIST by default, MNIST or CIFAR-10 from
// --data-dir), on the CPU or a CUDA GPU (--device cuda).
//
// Recipe (the defaults): patch 7, width 64, depth 4, 4 heads, MLP 128, no
// dropout; AdamW (weight decay on matrices only, none on biases, norms, [CLS]
// and position embeddings), peak lr 2e-3 after one epoch of linear warm-up,
// cosine decay; label smoothing 0.1; gradient clipping at norm 1;
// horizontal flips only (a random crop cripples a patch-7 ViT on 28x28).
//
// Writes into --out: checkpoint.safetensors (model, optimizer, scheduler,
// position in training, RNG; after every epoch, atomically, and on Ctrl-C),
// model.safetensors (weights and configuration), metrics.json, loss.png,
// accuracy.png, confusion.png and attention.png (the [CLS] token's attention
// rollout over the patches of test images). --resume continues a run exactly:
// batches are pure functions of (seed, epoch, index), so the resumed run
// equals an uninterrupted one bit for bit (same thread count and device).
// Checkpoints hold CPU tensors whatever the device (a run saved on cuda
// resumes on cpu and the other way round); with --device cuda the model, the
// optimizer state and every batch live on the GPU, and only the per-batch
// loss, evaluation counts and the rollout's weights come back to the host.
//
// --distributed trains data-parallel over the processes of mpirun or srun
// (docs/DISTRIBUTED.md): each rank takes its shard of every epoch
// (DistributedSampler) in batches of --batch-size, DistributedDataParallel
// averages the gradients, and rank 0 alone prints and writes the outputs;
// evaluation is split between the ranks and summed. With --device cuda each
// rank takes the GPU cuda:local_rank.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "plot.h"
#include "progress.h"
#include "report.h"
#include "run_config.h"

using namespace ember;
namespace fs = std::filesystem;
namespace data = ember::nn::data;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using vit::Config;
using vit::TrainState;
using vit::to_json;

namespace {

std::atomic<bool> g_interrupted{false};
// The first Ctrl-C (or SIGUSR1) asks the loop to save and stop after the
// current step; a second Ctrl-C, with the default handler back, ends the
// program at once.
extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // async-signal-safe
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A user error in the flags: reported with exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::shared_ptr<nn::VisionTransformer> make_model(const Config& c, const data::ImageSet& set) {
  if (set.height % c.patch != 0 || set.width % c.patch != 0)
    throw UsageError("--patch-size " + std::to_string(c.patch) + " does not divide the " + std::to_string(set.height) +
                     "x" + std::to_string(set.width) + " images of " + c.data);
  if (c.width % c.heads != 0)
    throw UsageError("--width " + std::to_string(c.width) + " is not divisible by --heads " + std::to_string(c.heads));
  nn::VisionTransformerOptions o;
  o.img_size = {set.height, set.width};
  o.patch_size = {c.patch, c.patch};
  o.in_channels = set.channels;
  o.num_classes = set.num_classes();
  o.embed_dim = c.width;
  o.depth = c.depth;
  o.num_heads = c.heads;
  o.mlp_dim = c.mlp;
  o.dropout = c.dropout;
  o.stem_channels = c.stem;
  return std::make_shared<nn::VisionTransformer>(o);
}

data::AugmentOptions augment_options(const Config& c) {
  data::AugmentOptions a;
  a.crop_padding = c.crop_padding;
  a.hflip = c.hflip == "on" || (c.hflip == "auto" && c.data != "mnist");
  a.erase_prob = c.erase;
  a.mixup_alpha = c.mixup;
  a.cutmix_alpha = c.cutmix;
  return a;
}

void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& in) {
  for (const auto& [n, t] : in) out.emplace_back(prefix + n, t);
}
StateDict take_prefixed(const StateDict& in, const std::string& prefix) {
  StateDict out;
  for (const auto& [n, t] : in)
    if (n.rfind(prefix, 0) == 0) out.emplace_back(n.substr(prefix.size()), t);
  return out;
}

void save_checkpoint(const std::string& path, const Config& c, const nn::Module& model, const optim::Optimizer& opt,
                     const optim::LRScheduler& sched, const TrainState& s) {
  StateDict all;
  add_prefixed(all, "model.", model.state_dict());
  add_prefixed(all, "optimizer.", opt.state_dict());
  add_prefixed(all, "scheduler.", sched.state_dict());
  TrainState st = s;
  st.generator_seed = default_generator().seed();
  st.generator_offset = default_generator().offset();
  save_safetensors(path, all, vit::checkpoint_metadata(c, st));
}

struct Evaluation {
  double loss = 0, accuracy = 0;
  std::vector<int64_t> confusion;  // true * C + predicted
};

// A batch from the loader (built on the CPU by its thread) moved to dev.
data::Batch& to_device(data::Batch& b, Device dev) {
  b.images = b.images.to(dev);
  b.labels = b.labels.to(dev);
  if (b.labels_mix.defined()) b.labels_mix = b.labels_mix.to(dev);
  return b;
}

// Rank r of N evaluates batches r, r + N, ...; the sums are then added up
// across the ranks.
Evaluation evaluate(nn::VisionTransformer& model, const data::DataLoader& loader, int64_t num_classes, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation ev;
  ev.confusion.assign(static_cast<size_t>(num_classes * num_classes), 0);
  int64_t n = 0, correct = 0;
  for (int64_t i = distributed::rank(); i < loader.num_batches(); i += distributed::world_size()) {
    data::Batch b = loader.batch(0, i);
    to_device(b, dev);
    const Tensor logits = model(b.images);
    ev.loss += cross_entropy(logits, b.labels, Reduction::Sum).item();
    const std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>(), y = b.labels.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) {
      correct += pred[i] == y[i];
      ++ev.confusion[static_cast<size_t>(y[i] * num_classes + pred[i])];
    }
    n += static_cast<int64_t>(y.size());
  }
  if (distributed::world_size() > 1) {
    Tensor sums = tensor({ev.loss, static_cast<double>(correct), static_cast<double>(n)}, kFloat64);
    Tensor confusion = from_vector(ev.confusion);
    distributed::all_reduce(sums);
    distributed::all_reduce(confusion);
    const std::vector<double> v = sums.to_vector<double>();
    ev.loss = v[0], correct = std::llround(v[1]), n = std::llround(v[2]);
    ev.confusion = confusion.to_vector<int64_t>();
  }
  model.train();
  ev.loss /= static_cast<double>(n);
  ev.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return ev;
}

// The attention rollout of the first 8 test images.
void write_attention(nn::VisionTransformer& model, const data::ImageSet& test, const data::ChannelStats& norm,
                     const Config& c, const std::string& path, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  data::LoaderOptions lo;
  lo.batch_size = std::min<int64_t>(8, test.n);
  lo.shuffle = false;
  lo.normalize = norm;
  lo.background = false;
  data::Batch b = data::DataLoader(test, lo).batch(0, 0);
  to_device(b, dev);
  for (size_t i = 0; i < model.blocks->size(); ++i) model.blocks->at<nn::TransformerEncoderLayer>(i).keep_attention_weights = true;
  const std::vector<int64_t> pred = argmax(model(b.images), 1).to_vector<int64_t>();
  std::vector<Tensor> weights;
  for (size_t i = 0; i < model.blocks->size(); ++i) {
    auto& layer = model.blocks->at<nn::TransformerEncoderLayer>(i);
    weights.push_back(layer.attention_weights);
    layer.keep_attention_weights = false;
    layer.attention_weights = Tensor();
  }
  const int64_t gh = test.height / c.patch, gw = test.width / c.patch;
  std::vector<plot::ImageTile> tiles;
  for (int64_t i = 0; i < b.images.size(0); ++i) {
    const int64_t y = test.labels[static_cast<size_t>(i)], p = pred[static_cast<size_t>(i)];
    const std::string caption =
        p == y ? test.class_names[static_cast<size_t>(p)]
               : test.class_names[static_cast<size_t>(p)] + " (" + test.class_names[static_cast<size_t>(y)] + ")";
    vit::rollout_tiles(test, i, vit::rollout(weights, i, gh, gw), gh, gw, caption,
                       p == y ? plot::Color{0, 130, 0} : plot::Color{200, 0, 0}, tiles);
  }
  plot::render_grid(tiles, 4, 5, c.data + ": [CLS] attention rollout").save_png(path);
  model.train();
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

int run(Config c, const CLI::App& app) {
  if (c.threads > 0) set_num_threads(c.threads);
  if (c.distributed) distributed::init();
  // Rank 0 prints and writes; the others train silently (world: 1 without --distributed).
  const int world = distributed::world_size();
  const bool lead = distributed::rank() == 0;
  if (!lead) c.quiet = true;
  if (lead) fs::create_directories(c.out);
  const std::string out = c.out;

  // --resume and --eval-only take the run's configuration from the file.
  StateDict ckpt;
  std::map<std::string, std::string> meta;
  std::optional<double> recorded;  // --eval-only: the accuracy the file recorded
  const std::string from = c.eval_only ? c.weights : c.resume;
  if (!from.empty()) {
    ckpt = load_safetensors(from, &meta);
    // Every stored field is checked (run_config.h); a model larger than the
    // file's tensors is refused before it is built.
    if (meta.count("config") || !c.eval_only) {
      int64_t stored_values = 0;
      for (const auto& [name, t] : ckpt) stored_values += t.numel();
      const int epochs = c.epochs;
      c = vit::read_config(meta, from, stored_values, c);
      if (app.count("--epochs") && !c.eval_only) c.epochs = epochs;  // extending a run: the schedule stretches
    }
    if (c.eval_only) recorded = vit::recorded_accuracy(meta, from);
  }
  if (c.data_dir.empty()) c.data_dir = data::default_data_dir(c.data);

  // ---- data --------------------------------------------------------------
  const auto t_load = Clock::now();
  const data::ImageSet train = data::load_dataset(c.data, c.data_dir, true).head(c.limit_train);
  const data::ImageSet test = data::load_dataset(c.data, c.data_dir, false).head(c.limit_test);
  const data::ChannelStats norm = data::channel_stats(train);  // training-set statistics only
  const double load_seconds = seconds_since(t_load);

  manual_seed(c.seed);  // initialisation, then dropout
  auto model = make_model(c, train);
  // A distributed run on "cuda" puts each rank on its own GPU.
  const Device dev = c.distributed && c.device == "cuda" ? Device(DeviceType::CUDA, distributed::local_rank())
                                                          : Device(c.device);
  model->to(dev);  // before the optimizer takes its handles; checkpoints load into it across devices
  data::LoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.shuffle = true;
  lo.drop_last = true;  // equal-sized steps; the few left-over images come back shuffled next epoch
  lo.seed = c.seed;
  lo.augment = augment_options(c);
  lo.normalize = norm;
  lo.num_replicas = world;  // each rank's shard of every epoch
  lo.rank = distributed::rank();
  data::LoaderOptions eo;
  eo.batch_size = c.eval_batch;
  eo.shuffle = false;
  eo.normalize = norm;
  data::DataLoader test_loader(test, eo);

  if (c.eval_only) {
    StateDict weights = take_prefixed(ckpt, "model.");
    model->load_state_dict(weights.empty() ? ckpt : weights);
    const Evaluation ev = evaluate(*model, test_loader, test.num_classes(), dev);
    json m = {{"weights", c.weights}, {"test_accuracy", ev.accuracy}, {"test_loss", ev.loss}, {"test_images", test.n},
              {"recorded_test_accuracy", recorded ? json(*recorded) : json()}, {"config", to_json(c)}};
    std::ofstream(fs::path(out) / "eval.json") << m.dump(2) << "\n";
    vit::plot_confusion(ev.confusion, test.class_names, (fs::path(out) / "confusion.png").string(),
                        "ViT on " + c.data + ": confusion matrix (test)");
    std::printf("eval %s: test accuracy %.2f%% (%lld images), test loss %.4f%s\n", c.weights.c_str(),
                100 * ev.accuracy, static_cast<long long>(test.n), ev.loss,
                recorded ? ("; recorded at save: " + fmt("%.2f%%", 100 * *recorded)).c_str() : "");
    return 0;
  }

  data::DataLoader loader(train, lo);
  const int64_t steps_per_epoch = loader.num_batches();
  if (steps_per_epoch == 0)
    throw UsageError("--batch-size " + std::to_string(c.batch_size) + " is larger than the " +
                     std::to_string(train.n) + " training images");
  optim::AdamOptions ao = optim::AdamW::defaults();
  ao.lr = c.lr;
  ao.weight_decay = c.weight_decay;
  optim::AdamW opt(optim::weight_decay_groups(model->named_parameters(), c.weight_decay), ao);
  const int64_t total_steps = steps_per_epoch * c.epochs;
  const auto warmup = std::clamp<int64_t>(std::llround(c.warmup_epochs * static_cast<double>(steps_per_epoch)), 0,
                                          std::max<int64_t>(0, total_steps - 1));
  optim::WarmupCosineLR sched(opt, warmup, total_steps, c.min_lr);

  TrainState s;
  if (!c.resume.empty()) {
    model->load_state_dict(take_prefixed(ckpt, "model."));
    opt.load_state_dict(take_prefixed(ckpt, "optimizer."));
    sched.load_state_dict(take_prefixed(ckpt, "scheduler."));
    s = vit::read_train_state(meta, c.resume);
    // The shards, the steps per epoch and so the schedule depend on the number of processes.
    if (s.world_size != world)
      throw UsageError(c.resume + " was written by a run of " + std::to_string(s.world_size) +
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
  }

  // Every rank starts from rank 0's weights; backward averages the gradients.
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (c.distributed) ddp = std::make_unique<nn::DistributedDataParallel>(model);
  const int64_t global_batch = c.batch_size * world;
  s.world_size = world;

  if (!c.quiet)
    std::printf("ViT on %s: %lld training / %lld test images %lldx%lldx%lld, %lld parameters, %d epochs of %lld steps, "
                "%d threads, %s%s (data loaded in %.1fs; channel mean %.4f std %.4f)\n",
                c.data.c_str(), static_cast<long long>(train.n), static_cast<long long>(test.n),
                static_cast<long long>(train.channels), static_cast<long long>(train.height),
                static_cast<long long>(train.width), static_cast<long long>(model->num_parameters()), c.epochs,
                static_cast<long long>(steps_per_epoch), num_threads(), dev.str().c_str(),
                c.distributed ? (", " + std::to_string(world) + " processes of " + std::to_string(c.batch_size) +
                                 " images per step each").c_str()
                              : "",
                load_seconds, norm.mean[0], norm.std[0]);

  const std::string ckpt_path = (fs::path(out) / "checkpoint.safetensors").string();
  std::signal(SIGINT, on_sigint);
  // mpirun ends the job on Ctrl-C but forwards SIGUSR1 to every rank:
  // `kill -USR1 <mpirun's pid>` saves and stops a distributed run.
  std::signal(SIGUSR1, on_sigint);
  app::ProgressBar bar(!c.quiet);
  Evaluation last;

  auto write_metrics = [&](bool finished) {
    double train_seconds = 0, best = 0;
    int64_t best_epoch = 0;
    for (size_t i = 0; i < s.history.size(); ++i) {
      train_seconds += s.history[i].train_seconds;
      if (s.history[i].test_accuracy > best) best = s.history[i].test_accuracy, best_epoch = static_cast<int64_t>(i + 1);
    }
    const double images = static_cast<double>(s.history.size()) * static_cast<double>(steps_per_epoch * global_batch);
    json per = json::object();
    for (const char* key : {"train_loss", "test_loss", "test_accuracy", "train_seconds", "wall_seconds", "lr"}) {
      json a = json::array();
      for (const json& e : to_json(s.history)) a.push_back(e.at(key));
      per[key] = a;
    }
    json m = {{"data", c.data},
              {"finished", finished},
              {"epochs_run", s.history.size()},
              {"final_test_accuracy", s.history.empty() ? 0.0 : s.history.back().test_accuracy},
              {"best_test_accuracy", best},
              {"best_epoch", best_epoch},
              {"final_test_loss", s.history.empty() ? 0.0 : s.history.back().test_loss},
              {"train_seconds", train_seconds},
              {"images_per_second", train_seconds > 0 ? images / train_seconds : 0.0},
              {"data_wait_seconds", s.data_wait_seconds},
              {"eval_seconds", s.eval_seconds},
              {"data_load_seconds", load_seconds},
              {"train_images", train.n},
              {"test_images", test.n},
              {"parameters", model->num_parameters()},
              {"threads", num_threads()},
              {"processes", world},
              {"global_batch_size", global_batch},
              {"device", c.device},
              {"config", to_json(c)},
              {"per_epoch", per}};
    std::ofstream(fs::path(out) / "metrics.json") << m.dump(2) << "\n";
  };

  for (int64_t epoch = s.epoch; epoch < c.epochs; ++epoch) {
    const auto t_epoch = Clock::now();
    const double wait_before = loader.wait_seconds();
    loader.start_epoch(epoch, s.batch);
    data::Batch b;
    while (loader.next(b)) {
      const auto t0 = Clock::now();
      to_device(b, dev);
      const Tensor logits = (*model)(b.images);
      Tensor loss = cross_entropy(logits, b.labels, Reduction::Mean, -100, c.label_smoothing);
      if (b.labels_mix.defined())  // mixup/cutmix: the same mixture of the two targets' losses
        loss = add(mul(loss, b.lam),
                   mul(cross_entropy(logits, b.labels_mix, Reduction::Mean, -100, c.label_smoothing), 1.0 - b.lam));
      opt.zero_grad();
      loss.backward();
      if (ddp) ddp->synchronize();
      if (c.clip > 0) optim::clip_grad_norm_(model->parameters(), c.clip);
      opt.step();
      sched.step();
      // The step's loss and images over all ranks, and whether any was interrupted.
      Tensor step = tensor({loss.item() * static_cast<double>(b.images.size(0)), static_cast<double>(b.images.size(0)),
                            g_interrupted ? 1.0 : 0.0},
                           kFloat64);
      if (c.distributed) distributed::all_reduce(step);
      const std::vector<double> sums = step.to_vector<double>();
      const bool interrupted = sums[2] > 0;
      s.step_seconds += seconds_since(t0);
      s.loss_sum += sums[0];
      s.seen += std::llround(sums[1]);
      s.batch = b.index + 1;
      if (s.batch % 8 == 0 || s.batch == steps_per_epoch) {
        const double ips = static_cast<double>(s.seen) / std::max(1e-9, s.step_seconds);
        const double eta = static_cast<double>((steps_per_epoch - s.batch) * global_batch) / ips;
        bar.update(fmt("epoch %3.0f", static_cast<double>(epoch + 1)) + "/" + std::to_string(c.epochs), s.batch,
                   steps_per_epoch,
                   fmt("loss %.4f", s.loss_sum / static_cast<double>(s.seen)) + fmt("  lr %.2e", sched.get_last_lr()[0]) +
                       fmt("  %.0f img/s", ips) + fmt("  ETA %.0fs", eta));
      }
      if (interrupted) {
        bar.clear();
        s.data_wait_seconds += loader.wait_seconds() - wait_before;
        s.epoch = epoch;
        if (lead) {
          save_checkpoint(ckpt_path, c, *model, opt, sched, s);
          write_metrics(false);
          std::printf("interrupted: saved %s at epoch %lld, batch %lld; continue with --resume %s\n", ckpt_path.c_str(),
                      static_cast<long long>(epoch + 1), static_cast<long long>(s.batch), ckpt_path.c_str());
        }
        return 130;
      }
    }
    s.data_wait_seconds += loader.wait_seconds() - wait_before;
    const auto t_eval = Clock::now();
    last = evaluate(*model, test_loader, test.num_classes(), dev);
    s.eval_seconds += seconds_since(t_eval);
    s.history.push_back({s.loss_sum / static_cast<double>(std::max<int64_t>(1, s.seen)), last.loss, last.accuracy,
                         s.step_seconds, seconds_since(t_epoch), sched.get_last_lr()[0]});
    s.epoch = epoch + 1;
    s.batch = 0, s.loss_sum = 0, s.step_seconds = 0, s.seen = 0;
    if (lead) {
      save_checkpoint(ckpt_path, c, *model, opt, sched, s);
      nn::save(*model, (fs::path(out) / "model.safetensors").string(),
               {{"config", to_json(c).dump()}, {"epoch", std::to_string(s.epoch)},
                {"test_accuracy", fmt("%.6f", last.accuracy)}});
      write_metrics(s.epoch == c.epochs);
      vit::plot_curves(s.history, out, "ViT on " + c.data);
    }
    const vit::EpochRecord& e = s.history.back();
    bar.clear();
    if (!c.quiet)
      std::printf("epoch %2lld/%d  train loss %.4f  test loss %.4f  test acc %.2f%%  %.1fs (%.0f img/s)  lr %.2e\n",
                  static_cast<long long>(s.epoch), c.epochs, e.train_loss, e.test_loss, 100 * e.test_accuracy,
                  e.train_seconds, static_cast<double>(steps_per_epoch * global_batch) / e.train_seconds, e.lr);
    std::fflush(stdout);
    if (c.stop_after > 0 && s.epoch >= c.stop_after && s.epoch < c.epochs) {
      if (lead)
        std::printf("stopped after epoch %lld (--stop-after); continue with --resume %s\n",
                    static_cast<long long>(s.epoch), ckpt_path.c_str());
      return 0;
    }
  }
  if (s.history.empty()) throw UsageError("nothing to train: the checkpoint has finished all " + std::to_string(c.epochs) + " epochs");
  if (last.confusion.empty()) last = evaluate(*model, test_loader, test.num_classes(), dev);
  if (!lead) return 0;
  vit::plot_confusion(last.confusion, test.class_names, (fs::path(out) / "confusion.png").string(),
                      "ViT on " + c.data + ": confusion matrix (test)");
  write_attention(*model, test, norm, c, (fs::path(out) / "attention.png").string(), dev);
  double train_seconds = 0, best = 0;
  for (const auto& e : s.history) train_seconds += e.train_seconds, best = std::max(best, e.test_accuracy);
  std::printf("vit: %s test accuracy %.2f%% (best %.2f%%) after %zu epochs, %.1fs training (%.0f img/s, %d threads%s) -> %s\n",
              c.data.c_str(), 100 * s.history.back().test_accuracy, 100 * best, s.history.size(), train_seconds,
              static_cast<double>(s.history.size() * steps_per_epoch * global_batch) / train_seconds, num_threads(),
              c.distributed ? (" x " + std::to_string(world) + " processes").c_str() : "", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Train a Vision Transformer on Fashion-MNIST (default), MNIST or CIFAR-10"};
  app.add_option("--data", c.data, "data set: fashion-mnist (default), mnist or cifar10")
      ->check(CLI::IsMember({"fashion-mnist", "mnist", "cifar10"}));
  app.add_option("--data-dir", c.data_dir,
                 "directory of the data files (default: /usr/share/datasets/fashion-mnist for fashion-mnist, "
                 "data/<name> otherwise; IDX files plain or .gz, CIFAR-10 binary batches)");
  app.add_option("--epochs", c.epochs, "training epochs (default 8)")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.batch_size,
                 "images per step (default 128); with --distributed, per process: a step of N processes sees N times "
                 "as many")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr, "peak learning rate of AdamW (default 2e-3)")->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", c.weight_decay,
                 "AdamW weight decay on weight matrices; none on biases, norms, [CLS], positions (default 0.05)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-epochs", c.warmup_epochs, "linear warm-up length in epochs, then cosine decay (default 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine (default 1e-5)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--label-smoothing", c.label_smoothing, "label smoothing of the training loss (default 0.1)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--clip", c.clip, "gradient clipping: max global norm, 0 = off (default 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", c.seed, "random seed (default 0); runs are deterministic for a seed and thread count");
  app.add_option("--threads", c.threads, "threads (default: all cores, or EMBER_NUM_THREADS)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", c.device,
                 "cpu (default) or cuda / cuda:N (a build with the CUDA backend and a GPU); checkpoints move "
                 "between devices")
      ->check(CLI::IsMember({"cpu", "cuda", "cuda:0", "cuda:1", "cuda:2", "cuda:3"}));
  app.add_option("--out", c.out, "output directory (default out/vit)");
  app.add_option("--resume", c.resume,
                 "continue the run saved in this checkpoint (its configuration is used; --epochs may extend it)");
  app.add_flag("--eval-only", c.eval_only, "evaluate --weights on the test set and exit");
  app.add_option("--weights", c.weights, "checkpoint.safetensors or model.safetensors for --eval-only");
  app.add_flag("--quiet", c.quiet, "print only the summary line");
  app.add_flag("--distributed", c.distributed,
               "data-parallel over the processes of mpirun/srun (mpirun -np N build/bin/vit --distributed): each "
               "trains on its shard of every epoch, gradients are averaged, rank 0 prints and writes the outputs "
               "(docs/DISTRIBUTED.md)");
  app.add_option("--patch-size", c.patch, "patch side in pixels; must divide the image size (default 7)")
      ->check(CLI::PositiveNumber);
  app.add_option("--width", c.width, "embedding width (default 64)")->check(CLI::PositiveNumber);
  app.add_option("--depth", c.depth, "encoder blocks (default 4)")->check(CLI::PositiveNumber);
  app.add_option("--heads", c.heads, "attention heads; must divide --width (default 4)")->check(CLI::PositiveNumber);
  app.add_option("--mlp", c.mlp, "MLP hidden width (default 128)")->check(CLI::PositiveNumber);
  app.add_option("--dropout", c.dropout, "dropout in the encoder (default 0)")->check(CLI::Range(0.0, 0.95));
  app.add_option("--hybrid", c.stem, "hybrid ViT: a 3x3 conv stem with this many channels before the patches (default 0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--crop-padding", c.crop_padding, "random crop with this zero padding, 0 = off (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hflip", c.hflip, "random horizontal flip: auto (default: on except for mnist), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--erase", c.erase, "random erasing probability (default 0)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--mixup", c.mixup, "mixup Beta(alpha, alpha), 0 = off (default 0)")->check(CLI::NonNegativeNumber);
  app.add_option("--cutmix", c.cutmix, "cutmix Beta(alpha, alpha), 0 = off (default 0)")->check(CLI::NonNegativeNumber);
  app.add_option("--limit-train", c.limit_train, "use only the first N training images (smoke runs)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--limit-test", c.limit_test, "use only the first N test images (smoke runs)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stop-after", c.stop_after, "stop (with a checkpoint) after this many epochs, as if interrupted")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-batch-size", c.eval_batch, "images per evaluation batch (default 1000)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "vit: %s\n", msg.c_str());
    return 2;
  };
  if (c.eval_only && c.weights.empty()) return usage("--eval-only needs --weights CHECKPOINT");
  if (!c.eval_only && !c.weights.empty()) return usage("--weights is for --eval-only (use --resume to continue training)");
  if (c.eval_only && !c.resume.empty()) return usage("--eval-only and --resume do not go together");
  if (c.eval_only && c.distributed) return usage("--eval-only runs in one process; drop --distributed");
  // In a distributed run a rank that fails ends the job: its peers may be
  // waiting for it in a collective.
  auto fail = [](int code) {
    if (distributed::world_size() > 1) distributed::abort(code);
    return code;
  };
  try {
    const int rc = run(c, app);
    distributed::finalize();  // before exit, while the CUDA runtime is still up (NCCL)
    return rc;
  } catch (const UsageError& e) {
    return fail(usage(e.what()));
  } catch (const Error& e) {
    std::fprintf(stderr, "vit: %s\n", e.what());
    return fail(1);
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "vit: bad checkpoint metadata: %s\n", e.what());
    return fail(1);
  }
}
