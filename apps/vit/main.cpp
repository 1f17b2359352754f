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
// rollout over the patches of test images); --export-onnx FILE the final (or
// --eval-only's) model as ONNX (export.h). --resume continues a run exactly:
// batches are pure functions of (seed, epoch, index), so the resumed run
// equals an uninterrupted one bit for bit (same thread count and device).
// The steps run on app::run_loop (apps/common/train_loop.h), one batch each,
// an epoch ending with its evaluation; Ctrl-C is checked between them.
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
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include <ember/ember.h>
#include <ember/nn/checkpoint.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "app.h"
#include "evaluate.h"
#include "export.h"
#include "flags.h"
#include "graph_step.h"
#include "model.h"
#include "plot.h"
#include "progress.h"
#include "report.h"
#include "resume.h"
#include "student.h"
#include "train_loop.h"
#include "vit_run_config.h"

using namespace ember;
namespace fs = std::filesystem;
namespace data = ember::nn::data;
using json = nlohmann::ordered_json;
using ember::app::fmt;
using ember::app::UsageError;
using vit::augment_options;
using vit::check_model_size;
using vit::Config;
using vit::Datasets;
using vit::evaluate;
using vit::Evaluation;
using vit::load_data;
using vit::load_run;
using vit::Loaded;
using vit::make_model;
using vit::resume;
using vit::to_device;
using vit::to_json;
using vit::TrainState;
using vit::write_attention;

namespace {

// The teacher file's fingerprint, taken once at the start (student.h).
std::string teacher_fingerprint;

void save_checkpoint(const std::string& path, const Config& c, const nn::Module& model, const optim::Optimizer& opt,
                     const optim::LRScheduler& sched, const TrainState& s) {
  TrainState st = s;
  st.generator_seed = default_generator().seed();
  st.generator_offset = default_generator().offset();
  auto meta = vit::checkpoint_metadata(c, st);
  if (!teacher_fingerprint.empty()) meta[vit::kTeacherKey] = teacher_fingerprint;
  nn::save_training_checkpoint(path, model, opt, sched, meta);
}

// --eval-only: the weights scored on the test set (eval.json, confusion.png).
int evaluate_only(const Config& c, nn::VisionTransformer& model, const Loaded& l, const Datasets& d,
                  const data::DataLoader& test_loader, Device dev) {
  StateDict weights = nn::take_prefixed(l.tensors, "model.");
  try {
    model.load_state_dict(weights.empty() ? l.tensors : weights);
  } catch (const Error&) {
    nn::rethrow_with_context(c.weights + ": ");  // the same type, the file named
  }
  if (c.check) return app::kExitOk;
  const Evaluation ev = evaluate(model, test_loader, d.test.num_classes(), dev);
  app::check_eval_loss(ev.loss, c.weights);
  json m = {{"weights", c.weights},
            {"test_accuracy", ev.accuracy},
            {"test_loss", ev.loss},
            {"test_images", d.test.n},
            {"recorded_test_accuracy", l.recorded ? json(*l.recorded) : json()},
            {"suspicious_tensors", nn::suspicious_tensors(weights.empty() ? l.tensors : weights)},  // --force-eval's
            {"config", to_json(c)}};
  app::write_json((fs::path(c.out) / "eval.json").string(), m);
  vit::plot_confusion(ev.confusion, d.test.class_names, (fs::path(c.out) / "confusion.png").string(),
                      "ViT on " + c.data + ": confusion matrix (test)");
  std::printf("eval %s: test accuracy %.2f%% (%lld images), test loss %.4f%s\n", c.weights.c_str(), 100 * ev.accuracy,
              static_cast<long long>(d.test.n), ev.loss,
              l.recorded ? ("; recorded at save: " + fmt("%.2f%%", 100 * *l.recorded)).c_str() : "");
  return app::kExitOk;
}

// Everything a training run holds, so that the steps below read as the
// apps/vit/README.md describes them; built with designated initialisers (the
// references must be named, the rest start empty).
struct Trainer {
  const Config& c;
  const Datasets& d;
  std::shared_ptr<nn::VisionTransformer> model;
  Device dev;
  int world;
  bool lead;
  data::DataLoader& loader;
  const data::DataLoader& test_loader;
  optim::AdamW& opt;
  optim::WarmupCosineLR& sched;
  nn::DistributedDataParallel* ddp = nullptr;
  TrainState& s;
  int64_t steps_per_epoch, global_batch;
  std::string ckpt_path;
  app::ProgressBar bar;
  Evaluation last = {};  // the latest test-set evaluation
  vit::Student& student;
  const std::atomic<bool>& signalled;     // this process's Ctrl-C or SIGUSR1 (app::catch_interrupts)
  std::vector<double> ema_accuracy = {};  // per epoch of this process's run (--ema)
  // What run_loop checks after each step: any rank's signal, agreed on in the
  // step's all-reduce, so that every rank stops after the same step.
  std::atomic<bool> interrupted = false;
  bool epoch_open = false;      // the loader is positioned in the current epoch
  app::Timer epoch_clock = {};  // the epoch's wall time (its evaluation included)
  double wait_mark = 0;         // the loader's wait_seconds() when the epoch began
  // --cuda-graph: optimizer_step on a batch's images and labels, replayed as a CUDA graph.
  app::GraphStep graphed{c.cuda_graph, [this](const std::vector<Tensor>& in) {
                           data::Batch b;
                           b.images = in[0], b.labels = in[1];
                           return optimizer_step(b);
                         }};

  void write_metrics(bool finished) const {
    double train_seconds = 0, best = 0;
    int64_t best_epoch = 0;
    for (size_t i = 0; i < s.history.size(); ++i) {
      train_seconds += s.history[i].train_seconds;
      if (s.history[i].test_accuracy > best)
        best = s.history[i].test_accuracy, best_epoch = static_cast<int64_t>(i + 1);
    }
    const double images = static_cast<double>(s.history.size()) * static_cast<double>(steps_per_epoch * global_batch);
    json per = json::object();
    for (const char* key : {"train_loss", "test_loss", "test_accuracy", "train_seconds", "wall_seconds", "lr"}) {
      json a = json::array();
      for (const json& e : to_json(s.history)) a.push_back(e.at(key));
      per[key] = a;
    }
    if (!ema_accuracy.empty()) per["ema_test_accuracy"] = ema_accuracy;
    const double teacher_seconds = student.teacher ? student.teacher->config.train_seconds : 0.0;
    json m = {{"data", c.data},
              {"finished", finished},
              {"epochs_run", s.history.size()},
              {"final_test_accuracy", s.history.empty() ? 0.0 : s.history.back().test_accuracy},
              {"best_test_accuracy", best},
              {"best_epoch", best_epoch},
              {"final_test_loss", s.history.empty() ? 0.0 : s.history.back().test_loss},
              // With --teacher, the teacher's training counts too (the
              // recipe's time budget); the student's alone is student_train_seconds.
              {"train_seconds", train_seconds + teacher_seconds},
              {"student_train_seconds", train_seconds},
              {"teacher_train_seconds", teacher_seconds},
              {"teacher_test_accuracy", student.teacher ? json(student.teacher->config.test_accuracy) : json()},
              {"precision", c.precision},
              {"ema_final_test_accuracy", ema_accuracy.empty() ? json() : json(ema_accuracy.back())},
              {"ema_best_test_accuracy",
               ema_accuracy.empty() ? json() : json(*std::max_element(ema_accuracy.begin(), ema_accuracy.end()))},
              {"images_per_second", train_seconds > 0 ? images / train_seconds : 0.0},
              // CPU time of the whole process (all threads) so far: on a shared
              // machine, wall-clock train_seconds depend on the load.
              {"process_cpu_seconds", app::process_cpu_seconds()},
              {"data_wait_seconds", s.data_wait_seconds},
              {"eval_seconds", s.eval_seconds},
              {"data_load_seconds", d.load_seconds},
              {"train_images", d.train.n},
              {"test_images", d.test.n},
              {"parameters", model->num_parameters()},
              {"threads", num_threads()},
              {"processes", world},
              {"global_batch_size", global_batch},
              {"device", c.device},
              {"config", to_json(c)},
              {"per_epoch", per}};
    if (c.cuda_graph) m["cuda_graph_replays"] = graphed.replays();  // this process's steps replayed
    app::write_json((fs::path(c.out) / "metrics.json").string(), m);
  }

  // The batch's loss: cross-entropy on the labels (mixed under mixup/cutmix)
  // and, with a teacher, DeiT's distillation loss on the second head; forward
  // and loss under autocast with --precision bf16/fp16.
  Tensor step_loss(const data::Batch& b) {
    const Tensor teacher_logits = student.teacher ? student.teacher_logits(b.images) : Tensor();
    std::optional<AutocastGuard> autocast;
    if (student.autocast) autocast.emplace(dev.type, student.amp_dtype);
    nn::ViTHeads h;
    if (student.teacher)
      h = model->forward_heads(b.images);
    else
      h.cls = (*model)(b.images);
    Tensor loss = cross_entropy(h.cls, b.labels, Reduction::Mean, -100, c.label_smoothing);
    if (b.labels_mix.defined())  // mixup/cutmix: the same mixture of the two targets' losses
      loss = add(mul(loss, b.lam),
                 mul(cross_entropy(h.cls, b.labels_mix, Reduction::Mean, -100, c.label_smoothing), 1.0 - b.lam));
    if (student.teacher)
      loss = nn::distillation_loss(loss, h.dist, teacher_logits, student.type, c.distill_alpha, c.distill_temperature);
    return loss;
  }

  // One optimizer step on a batch (on the device): forward and loss, backward
  // (scaled for fp16), the gradients' all-reduce, clipping, the optimizer.
  // Returns the loss. With --cuda-graph it is captured once (apps/common/graph_step.h).
  Tensor optimizer_step(const data::Batch& b) {
    Tensor loss = step_loss(b);
    opt.zero_grad();
    if (student.scaler) {  // fp16: scaled backward, unscaled before clipping
      student.scaler->scale(loss).backward();
      if (ddp) ddp->synchronize();
      student.scaler->unscale_(opt);
      if (c.clip > 0) optim::clip_grad_norm_(model->parameters(), c.clip);
      student.scaler->step(opt);
      student.scaler->update();
    } else {
      loss.backward();
      if (ddp) ddp->synchronize();
      if (c.clip > 0) optim::clip_grad_norm_(model->parameters(), c.clip);
      opt.step();
    }
    return loss;
  }

  // Step `step` of the run (0-based, steps_per_epoch to an epoch): one batch
  // of epoch s.epoch, the loader opened at its first batch or, in a resumed
  // run, at the stored position. Returns the step's mean loss over the ranks.
  double train_step(int64_t step) {
    if (!epoch_open) {
      epoch_clock.reset();
      wait_mark = loader.wait_seconds();
      loader.start_epoch(step / steps_per_epoch, s.batch);
      epoch_open = true;
    }
    data::Batch b;
    if (!loader.next(b)) throw std::logic_error("vit: the loader ran out of batches before the end of the epoch");
    const app::Timer t_step;
    to_device(b, dev);
    const Tensor loss = c.cuda_graph ? graphed({b.images, b.labels}) : optimizer_step(b);
    if (student.ema) student.ema->update(*model);
    // Stepped here rather than by run_loop, so that the bar below shows the
    // rate the next step will use.
    sched.step();
    // The step's loss and images over all ranks, and whether any was interrupted.
    Tensor sums_t = tensor({loss.item() * static_cast<double>(b.images.size(0)), static_cast<double>(b.images.size(0)),
                            signalled ? 1.0 : 0.0},
                           kFloat64);
    if (c.distributed) distributed::all_reduce(sums_t);
    const std::vector<double> sums = sums_t.to_vector<double>();
    interrupted = sums[2] > 0;
    s.step_seconds += t_step.seconds();
    s.loss_sum += sums[0];
    s.seen += std::llround(sums[1]);
    s.batch = b.index + 1;
    if (s.batch % 8 == 0 || s.batch == steps_per_epoch) {
      const double ips = static_cast<double>(s.seen) / std::max(1e-9, s.step_seconds);
      const double eta = static_cast<double>((steps_per_epoch - s.batch) * global_batch) / ips;
      bar.update(fmt("epoch %3lld", static_cast<long long>(s.epoch + 1)) + "/" + std::to_string(c.epochs), s.batch,
                 steps_per_epoch,
                 fmt("loss %.4f", s.loss_sum / static_cast<double>(s.seen)) + fmt("  lr %.2e", sched.get_last_lr()[0]) +
                     fmt("  %.0f img/s", ips) + fmt("  ETA %.0fs", eta));
    }
    return sums[0] / sums[1];
  }

  // Ctrl-C (any rank's): the checkpoint at this step, mid-epoch, and metrics
  // marked unfinished (rank 0).
  void save_interrupted() {
    bar.clear();
    s.data_wait_seconds += loader.wait_seconds() - wait_mark;
    if (lead) {
      save_checkpoint(ckpt_path, c, *model, opt, sched, s);
      write_metrics(false);
      std::printf("interrupted: saved %s at epoch %lld, batch %lld; continue with --resume %s\n", ckpt_path.c_str(),
                  static_cast<long long>(s.epoch + 1), static_cast<long long>(s.batch), ckpt_path.c_str());
    }
  }

  // The end of epoch s.epoch: its test-set evaluation (and the EMA's), its
  // record, then the files of save_epoch().
  void end_epoch() {
    s.data_wait_seconds += loader.wait_seconds() - wait_mark;
    const app::Timer t_eval;
    last = evaluate(*model, test_loader, d.test.num_classes(), dev);
    if (student.ema) {
      ema_accuracy.push_back(evaluate(*student.ema_model, test_loader, d.test.num_classes(), dev).accuracy);
      student.ema_model->eval();  // evaluate() leaves a model in training mode
    }
    s.eval_seconds += t_eval.seconds();
    s.history.push_back({.train_loss = s.loss_sum / static_cast<double>(std::max<int64_t>(1, s.seen)),
                         .test_loss = last.loss,
                         .test_accuracy = last.accuracy,
                         .train_seconds = s.step_seconds,
                         .wall_seconds = epoch_clock.seconds(),
                         .lr = sched.get_last_lr()[0]});
    s.epoch += 1;
    s.batch = 0, s.loss_sum = 0, s.step_seconds = 0, s.seen = 0;
    epoch_open = false;
    save_epoch();
  }

  // After an epoch: the checkpoint, model.safetensors, metrics and curves
  // (rank 0), and the epoch's line.
  void save_epoch() {
    if (lead) {
      save_checkpoint(ckpt_path, c, *model, opt, sched, s);
      nn::save(*model, (fs::path(c.out) / "model.safetensors").string(),
               {{"config", to_json(c).dump()},
                {"epoch", std::to_string(s.epoch)},
                {"test_accuracy", fmt("%.6f", last.accuracy)}});
      if (student.ema)
        nn::save(*student.ema_model, (fs::path(c.out) / "model_ema.safetensors").string(),
                 {{"config", to_json(c).dump()},
                  {"epoch", std::to_string(s.epoch)},
                  {"test_accuracy", fmt("%.6f", ema_accuracy.back())}});
      write_metrics(s.epoch == c.epochs);
      vit::plot_curves(s.history, c.out, "ViT on " + c.data);
    }
    const vit::EpochRecord& e = s.history.back();
    bar.clear();
    if (!c.quiet)
      std::printf("epoch %2lld/%d  train loss %.4f  test loss %.4f  test acc %.2f%%%s  %.1fs (%.0f img/s)  lr %.2e\n",
                  static_cast<long long>(s.epoch), c.epochs, e.train_loss, e.test_loss, 100 * e.test_accuracy,
                  ema_accuracy.empty() ? "" : fmt(" (EMA %.2f%%)", 100 * ema_accuracy.back()).c_str(), e.train_seconds,
                  static_cast<double>(steps_per_epoch * global_batch) / e.train_seconds, e.lr);
    std::fflush(stdout);
  }

  // The final confusion matrix, attention rollout and summary line.
  void report() {
    if (last.confusion.empty()) last = evaluate(*model, test_loader, d.test.num_classes(), dev);
    if (!lead) return;
    vit::plot_confusion(last.confusion, d.test.class_names, (fs::path(c.out) / "confusion.png").string(),
                        "ViT on " + c.data + ": confusion matrix (test)");
    write_attention(*model, d.test, d.norm, c, (fs::path(c.out) / "attention.png").string(), dev);
    double train_seconds = 0, best = 0;
    for (const auto& e : s.history) train_seconds += e.train_seconds, best = std::max(best, e.test_accuracy);
    std::printf(
        "vit: %s test accuracy %.2f%% (best %.2f%%) after %zu epochs, %.1fs training (%.0f img/s, %d threads%s) -> "
        "%s\n",
        c.data.c_str(), 100 * s.history.back().test_accuracy, 100 * best, s.history.size(), train_seconds,
        static_cast<double>(s.history.size() * steps_per_epoch * global_batch) / train_seconds, num_threads(),
        c.distributed ? (" x " + std::to_string(world) + " processes").c_str() : "", c.out.c_str());
  }
};

// Load (a checkpoint, the data), build (model, loaders, optimizer,
// schedule), resume, then train (run_loop) and report.
int run(Config c, const CLI::App& cli, const app::OnnxExportFlags& onnx) {
  app::apply_threads(c.threads);
  if (c.distributed) distributed::init();
  // Rank 0 prints and writes; the others train silently (world: 1 without --distributed).
  const int world = distributed::world_size();
  const bool lead = distributed::rank() == 0;
  if (!lead) c.quiet = true;
  if (lead) {
    app::prepare_out_dir(c.out);
    app::check_export_onnx(onnx);  // a bad --export-onnx path fails now, not after training
  }
  check_model_size(c);

  // The flag, checked before the checkpoint's configuration replaces c.
  if (c.ema > 0 && !c.resume.empty())
    throw UsageError("--ema does not resume: the average is not in " + c.resume + " (run without --ema)");
  const Loaded loaded = load_run(c, cli);
  vit::check_cuda_graph(c);  // flags.h: on the run's configuration, a resumed one's included
  check_model_size(c);       // the file's configuration, too
  if (c.ema > 0 && !c.resume.empty())
    throw UsageError(c.resume + " was written by a run with --ema " + fmt("%g", c.ema) +
                     ": the average is not in the checkpoint, so the run does not resume");
  teacher_fingerprint = vit::check_teacher_file(c, loaded.meta);
  const Datasets d = load_data(c);
  manual_seed(c.seed);  // initialisation, then dropout
  auto model = make_model(c, d.train);
  // A distributed run on "cuda" puts each rank on its own GPU.
  const Device dev =
      c.distributed && c.device == "cuda" ? Device(DeviceType::CUDA, distributed::local_rank()) : Device(c.device);
  model->to(dev);  // before the optimizer takes its handles; checkpoints load into it across devices
  data::LoaderOptions eo;
  eo.batch_size = c.eval_batch;
  eo.shuffle = false;
  eo.normalize = d.norm;
  data::DataLoader test_loader(d.test, eo);
  if (c.eval_only) {
    const int rc = evaluate_only(c, *model, loaded, d, test_loader, dev);
    if (c.check)
      std::printf("vit: check ok\n");
    else
      vit::export_onnx(onnx, c, *model, test_loader, d.norm, dev);
    return rc;
  }

  data::LoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.shuffle = true;
  lo.drop_last = true;  // equal-sized steps; the few left-over images come back shuffled next epoch
  lo.seed = c.seed;
  lo.augment = augment_options(c);
  lo.normalize = d.norm;
  lo.num_replicas = world;  // each rank's shard of every epoch
  lo.rank = distributed::rank();
  data::DataLoader loader(d.train, lo);
  const int64_t steps_per_epoch = loader.num_batches();
  if (steps_per_epoch == 0)
    vit::refuse_setting(c, vit::setting_name(c, "--batch-size", "batch_size") + " " + std::to_string(c.batch_size) +
                               " is larger than the " + std::to_string(d.train.n) + " training images");
  optim::AdamWOptions ao;
  ao.lr = c.lr;
  ao.weight_decay = c.weight_decay;
  optim::AdamW opt(
      optim::weight_decay_groups(model->named_parameters(), c.weight_decay, {"cls_token", "dist_token", "pos_embed"}),
      ao);
  const int64_t total_steps = steps_per_epoch * c.epochs;
  const auto warmup = std::clamp<int64_t>(std::llround(c.warmup_epochs * static_cast<double>(steps_per_epoch)), 0,
                                          std::max<int64_t>(0, total_steps - 1));
  optim::WarmupCosineLR sched(opt, warmup, total_steps, c.min_lr);
  TrainState s;
  if (!c.resume.empty()) s = resume(c, loaded, *model, opt, sched, steps_per_epoch, world);
  vit::Student student = vit::make_student(c, d.train, d.norm, dev, *model, [&] { return make_model(c, d.train); });
  if (c.check) {
    std::printf("vit: check ok\n");
    return app::kExitOk;
  }

  // Every rank starts from rank 0's weights; backward averages the gradients.
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (c.distributed) ddp = std::make_unique<nn::DistributedDataParallel>(model);
  const int64_t global_batch = c.batch_size * world;
  s.world_size = world;

  if (!c.quiet)
    std::printf(
        "ViT on %s: %lld training / %lld test images %lldx%lldx%lld, %lld parameters, %d epochs of %lld steps, "
        "%d threads, %s%s (data loaded in %.1fs; channel mean %.4f std %.4f)\n",
        c.data.c_str(), static_cast<long long>(d.train.n), static_cast<long long>(d.test.n),
        static_cast<long long>(d.train.channels), static_cast<long long>(d.train.height),
        static_cast<long long>(d.train.width), static_cast<long long>(model->num_parameters()), c.epochs,
        static_cast<long long>(steps_per_epoch), num_threads(), dev.str().c_str(),
        c.distributed
            ? (", " + std::to_string(world) + " processes of " + std::to_string(c.batch_size) + " images per step each")
                  .c_str()
            : "",
        d.load_seconds, d.norm.mean[0], d.norm.std[0]);

  Trainer t{.c = c,
            .d = d,
            .model = model,
            .dev = dev,
            .world = world,
            .lead = lead,
            .loader = loader,
            .test_loader = test_loader,
            .opt = opt,
            .sched = sched,
            .ddp = ddp.get(),
            .s = s,
            .steps_per_epoch = steps_per_epoch,
            .global_batch = global_batch,
            .ckpt_path = (fs::path(c.out) / "checkpoint.safetensors").string(),
            .bar = app::ProgressBar(!c.quiet),
            .student = student,
            .signalled = app::catch_interrupts()};
  // A step is a batch and an epoch ends with its evaluation. --stop-after
  // counts epochs and stops after the first epoch of this run at or past it.
  // A run interrupted after an epoch's last batch resumes with that epoch's
  // evaluation still to do.
  app::Stopwatch clock;  // unused by the figures: train_seconds leaves out the waits for the loader
  const app::LoopEnd end = app::run_loop(
      {.start = s.epoch * steps_per_epoch + s.batch,
       .total = c.epochs * steps_per_epoch,
       .eval_every = steps_per_epoch,
       .stop_after = c.stop_after > 0 ? std::max<int64_t>(c.stop_after, s.epoch + 1) * steps_per_epoch : 0,
       .progress = false,
       .interrupt = &t.interrupted,
       .evaluation_due = s.batch == steps_per_epoch && s.epoch < c.epochs},
      {.train_step = [&](int64_t step) { return t.train_step(step); },
       .evaluate = [&](const app::LoopStatus&) { t.end_epoch(); },
       .save_and_stop =
           [&](const app::LoopStatus& ls) {
             if (ls.interrupted)
               t.save_interrupted();
             else if (lead)
               std::printf("stopped after epoch %lld (--stop-after); continue with --resume %s\n",
                           static_cast<long long>(s.epoch), t.ckpt_path.c_str());
           }},
      clock);
  if (end == app::LoopEnd::Interrupted) return app::kExitInterrupted;
  if (end == app::LoopEnd::Stopped) return app::kExitOk;
  if (s.history.empty())
    throw UsageError("nothing to train: the checkpoint has finished all " + std::to_string(c.epochs) + " epochs");
  t.report();
  if (lead) vit::export_onnx(onnx, c, *model, test_loader, d.norm, dev);
  return app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App cli{"Train a Vision Transformer on Fashion-MNIST (default), MNIST or CIFAR-10"};
  std::string randaugment;
  vit::add_flags(cli, c, randaugment);
  app::OnnxExportFlags onnx;
  app::add_export_onnx(cli, onnx, "images (batch, channels, height, width), normalised as in training -> logits");
  const int rc = app::run_main("vit", cli, argc, argv, [&] {
    if (c.eval_only && c.weights.empty()) throw UsageError("--eval-only needs --weights CHECKPOINT");
    if (!c.eval_only && !c.weights.empty())
      throw UsageError("--weights is for --eval-only (use --resume to continue training)");
    if (c.eval_only && !c.resume.empty()) throw UsageError("--eval-only and --resume do not go together");
    if (c.eval_only && c.distributed) throw UsageError("--eval-only runs in one process; drop --distributed");
    if (!randaugment.empty()) vit::parse_randaugment(randaugment, c.randaug_n, c.randaug_m);
    if (c.distill != "none" && c.teacher.empty()) throw UsageError("--distill " + c.distill + " needs --teacher");
    if (!c.teacher.empty() && c.distill == "none") throw UsageError("--teacher needs --distill hard or --distill soft");

    return run(c, cli, onnx);
  });
  if (rc == app::kExitOk || rc == app::kExitInterrupted)
    distributed::finalize();  // before exit, while the CUDA runtime is still up (NCCL)
  return rc;
}
