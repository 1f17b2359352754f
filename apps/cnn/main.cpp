// The CNN teacher of the DeiT recipe: a small nn::ResNet trained on
// Fashion-MNIST (MNIST, CIFAR-10) with SGD (Nesterov momentum), one-cycle
// learning rate, label smoothing and flips (random crops optional), saved as
// model.safetensors with its configuration in the metadata
// (apps/common/cnn_teacher.h), which `vit --teacher` reads.
//
// An app of its own rather than a --model of vit: vit's configuration,
// checkpoint and resume machinery (apps/common/vit_run_config) describe a
// ViT and an AdamW run, while the teacher needs another model, optimizer and
// schedule, and a file that vit reads back as a frozen model; this stays a
// short, separate loop. Writes into --out: model.safetensors, metrics.json.
// --eval-only --weights FILE scores a saved teacher on the test split again
// (eval.json); --export-onnx FILE writes the trained (or loaded) ResNet as
// an ONNX file (apps/common/onnx_export.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/nn/checkpoint.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "app.h"
#include "cnn_teacher.h"
#include "onnx_export.h"
#include "progress.h"
#include "train_loop.h"

using namespace ember;
namespace fs = std::filesystem;
namespace data = ember::nn::data;
using json = nlohmann::ordered_json;
using app::fmt;
using app::UsageError;

namespace {

struct Config {
  std::string data = "fashion-mnist", data_dir, out = "out/cnn", widths = "16,32,64", blocks = "1,1,1", weights;
  // Defaults: the best of the configurations measured for the ViT at CNN level
  // (apps/vit/README.md, "The ViT at CNN level"): 91.05% in 279 s on 2 Zen 4 cores.
  int epochs = 6;
  int64_t batch_size = 128, crop_padding = 0, limit_train = 0, limit_test = 0, eval_batch = 1000;
  double lr = 0.05, momentum = 0.9, weight_decay = 5e-4, label_smoothing = 0.1, pct_start = 0.25;
  std::string hflip = "on";
  uint64_t seed = 0;
  int threads = 0;
  bool quiet = false, check = false, eval_only = false, force_eval = false;
  app::OnnxExportFlags onnx;  // --export-onnx FILE [--export-onnx-check]
};

// Accuracy and mean loss of model over a loader's batches (eval mode).
std::pair<double, double> evaluate(nn::Module& model, const data::DataLoader& loader) {
  NoGradGuard ng;
  model.eval();
  int64_t n = 0, correct = 0;
  double loss = 0;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const data::Batch b = loader.batch(0, i);
    const Tensor logits = model(b.images);
    loss += cross_entropy(logits, b.labels, Reduction::Sum).item();
    const std::vector<int64_t> p = argmax(logits, 1).to_vector<int64_t>(), y = b.labels.to_vector<int64_t>();
    for (size_t k = 0; k < p.size(); ++k) correct += p[k] == y[k];
    n += static_cast<int64_t>(y.size());
  }
  model.train();
  return {static_cast<double>(correct) / static_cast<double>(n), loss / static_cast<double>(n)};
}

// The first test batch (normalised) and the ResNet as an ONNX graph.
void export_resnet(const Config& c, nn::ResNet& model, const data::DataLoader& test_loader,
                   const app::TeacherConfig& tc) {
  if (!c.onnx.enabled()) return;
  if (test_loader.num_batches() == 0) throw UsageError("--export-onnx needs a test image to trace the model on");
  const Tensor images = test_loader.batch(0, 0).images;
  app::export_onnx(
      "cnn", model, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model(in[0])}; },
      app::image_classifier_graph(images, "Ember's ResNet (apps/cnn) trained on " + tc.data, tc.mean, tc.std), c.onnx);
}

// "16,32,64", as --widths and --blocks spell a list.
std::string joined(const std::vector<int64_t>& v) {
  std::string s;
  for (const int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// --eval-only: a saved teacher (its sizes and normalisation from the file)
// scored on the test split of the data set it was trained on. The model's
// flags, given again, must name the file's model; training's do nothing.
int eval_only(Config c, const CLI::App& cli) {
  app::refuse_training_flags(cli, {"--epochs", "--batch-size", "--lr", "--momentum", "--weight-decay", "--pct-start",
                                   "--label-smoothing", "--crop-padding", "--hflip", "--limit-train", "--seed"});
  app::Teacher t = app::load_teacher(c.weights, "cnn", c.force_eval);
  if (cli.count("--data") && c.data != t.config.data)
    throw UsageError("--data " + c.data + ": " + c.weights + " was trained on " + t.config.data);
  if (cli.count("--widths"))
    app::refuse_changed_flag(cli, "--widths", joined(app::parse_int_list(c.widths, "--widths", 1, 1024)),
                             joined(t.config.resnet.widths), c.weights);
  if (cli.count("--blocks"))
    app::refuse_changed_flag(cli, "--blocks", joined(app::parse_int_list(c.blocks, "--blocks", 1, 16)),
                             joined(t.config.resnet.blocks), c.weights);
  c.data = t.config.data;
  if (c.data_dir.empty()) c.data_dir = data::default_data_dir(c.data);
  const data::ImageSet test = data::load_dataset(c.data, c.data_dir, false).head(c.limit_test);
  if (test.channels != t.config.resnet.in_channels)
    throw IOError(c.data_dir + ": the test images have " + std::to_string(test.channels) + " channels, " + c.weights +
                  " takes " + std::to_string(t.config.resnet.in_channels));
  data::LoaderOptions eo;
  eo.batch_size = c.eval_batch;
  eo.shuffle = false;
  eo.normalize = data::ChannelStats{t.config.mean, t.config.std};
  data::DataLoader test_loader(test, eo);
  if (c.check) {
    std::printf("cnn: check ok\n");
    return app::kExitOk;
  }
  const auto [acc, loss] = evaluate(*t.model, test_loader);
  app::check_eval_loss(loss, c.weights);
  app::write_json((fs::path(c.out) / "eval.json").string(), {{"weights", c.weights},
                                                             {"data", c.data},
                                                             {"test_accuracy", acc},
                                                             {"test_loss", loss},
                                                             {"test_images", test.n},
                                                             {"recorded_test_accuracy", t.config.test_accuracy}});
  std::printf("cnn eval %s: %s test accuracy %.2f%% (%lld images), test loss %.4f; recorded at save: %.2f%%\n",
              c.weights.c_str(), c.data.c_str(), 100 * acc, static_cast<long long>(test.n), loss,
              100 * t.config.test_accuracy);
  t.model->eval();  // evaluate() leaves a model in training mode
  export_resnet(c, *t.model, test_loader, t.config);
  return app::kExitOk;
}

int run(Config c, const CLI::App& cli) {
  app::apply_threads(c.threads);
  app::prepare_out_dir(c.out);
  app::check_export_onnx(c.onnx);
  if (c.eval_only) return eval_only(c, cli);
  app::TeacherConfig tc;
  tc.resnet.widths = app::parse_int_list(c.widths, "--widths", 1, 1024);
  tc.resnet.blocks = app::parse_int_list(c.blocks, "--blocks", 1, 16);
  if (tc.resnet.widths.size() != tc.resnet.blocks.size())
    throw UsageError("--widths " + c.widths + " and --blocks " + c.blocks + " must name as many stages");
  if (c.data_dir.empty()) c.data_dir = data::default_data_dir(c.data);
  const app::Timer t_load;
  const data::ImageSet train = data::load_dataset(c.data, c.data_dir, true).head(c.limit_train);
  const data::ImageSet test = data::load_dataset(c.data, c.data_dir, false).head(c.limit_test);
  const data::ChannelStats norm = data::channel_stats(train);
  // The ResNet would take other sizes (it pools globally), but a teacher is
  // scored and used on images of its training size; a test split of another
  // size is a mixed-up data directory.
  if (test.n > 0 && (test.channels != train.channels || test.height != train.height || test.width != train.width))
    throw IOError(c.data_dir + ": the test images are " + std::to_string(test.channels) + "x" +
                  std::to_string(test.height) + "x" + std::to_string(test.width) + " but the training images are " +
                  std::to_string(train.channels) + "x" + std::to_string(train.height) + "x" +
                  std::to_string(train.width));
  if (c.crop_padding >= std::min(train.height, train.width))
    throw UsageError("--crop-padding " + std::to_string(c.crop_padding) + " is not smaller than the images");
  tc.resnet.in_channels = train.channels;
  tc.resnet.num_classes = train.num_classes();
  tc.data = c.data;
  tc.mean = norm.mean;
  tc.std = norm.std;
  manual_seed(c.seed);
  auto model = std::make_shared<nn::ResNet>(tc.resnet);

  data::LoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.drop_last = true;
  lo.seed = c.seed;
  lo.normalize = norm;
  lo.augment.crop_padding = c.crop_padding;
  lo.augment.hflip = c.hflip == "on";
  data::DataLoader loader(train, lo);
  data::LoaderOptions eo;
  eo.batch_size = c.eval_batch;
  eo.shuffle = false;
  eo.normalize = norm;
  data::DataLoader test_loader(test, eo);
  const int64_t steps = loader.num_batches();
  if (steps == 0)
    throw UsageError("--batch-size " + std::to_string(c.batch_size) + " is larger than the " + std::to_string(train.n) +
                     " training images");
  // Weight decay on conv and linear weights only (not on batch-norm weights or biases).
  optim::SGD opt(optim::weight_decay_groups(model->named_parameters(), c.weight_decay, {}),
                 optim::SGDOptions{
                     .lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay, .nesterov = c.momentum > 0});
  optim::OneCycleLR sched(opt, c.lr, steps * c.epochs, c.pct_start);
  if (c.check) {
    std::printf("cnn: check ok\n");
    return app::kExitOk;
  }
  if (!c.quiet)
    std::printf(
        "ResNet teacher on %s: %lld training / %lld test images, %lld parameters, %d epochs of %lld steps, "
        "%d threads\n",
        c.data.c_str(), static_cast<long long>(train.n), static_cast<long long>(test.n),
        static_cast<long long>(model->num_parameters()), c.epochs, static_cast<long long>(steps), num_threads());
  app::ProgressBar bar(!c.quiet);  // the batches of an epoch; the loop's steps are epochs
  json per = json::array();
  double acc = 0, best = 0, loss_sum = 0;
  int64_t seen = 0;
  app::Stopwatch clock;
  app::run_loop(
      {.total = c.epochs, .eval_every = 1, .unit = "epoch", .progress = false},
      {.train_step =
           [&](int64_t epoch) {
             const app::Timer t;
             loader.start_epoch(epoch);
             data::Batch b;
             loss_sum = 0, seen = 0;
             while (loader.next(b)) {
               Tensor loss = cross_entropy((*model)(b.images), b.labels, Reduction::Mean, -100, c.label_smoothing);
               opt.zero_grad();
               loss.backward();
               opt.step();
               sched.step();
               loss_sum += loss.item() * static_cast<double>(b.images.size(0));
               seen += b.images.size(0);
               if ((b.index + 1) % 8 == 0)
                 bar.update(fmt("epoch %2lld/%d", static_cast<long long>(epoch + 1), c.epochs), b.index + 1, steps,
                            fmt("loss %.4f  %.0f img/s", loss_sum / static_cast<double>(seen),
                                static_cast<double>(seen) / t.seconds()));
             }
             return loss_sum / static_cast<double>(seen);
           },
       .evaluate =
           [&](const app::LoopStatus& s) {
             const double secs = s.clock->lap_seconds();
             const auto [a, test_loss] = evaluate(*model, test_loader);
             acc = a;
             best = std::max(best, a);
             bar.clear();
             per.push_back(
                 {{"train_loss", s.loss}, {"test_loss", test_loss}, {"test_accuracy", a}, {"train_seconds", secs}});
             if (!c.quiet)
               std::printf("epoch %2lld/%d  train loss %.4f  test loss %.4f  test acc %.2f%%  %.1fs (%.0f img/s)\n",
                           static_cast<long long>(s.done), c.epochs, s.loss, test_loss, 100 * a, secs,
                           static_cast<double>(seen) / secs);
             std::fflush(stdout);
           }},
      clock);
  const double train_seconds = clock.seconds();
  tc.test_accuracy = acc;
  tc.train_seconds = train_seconds;
  nn::save(*model, (fs::path(c.out) / "model.safetensors").string(), app::teacher_metadata(tc));
  const json m = {{"data", c.data},
                  {"model", "resnet"},
                  {"widths", tc.resnet.widths},
                  {"blocks", tc.resnet.blocks},
                  {"parameters", model->num_parameters()},
                  {"epochs", c.epochs},
                  {"batch_size", c.batch_size},
                  {"lr", c.lr},
                  {"momentum", c.momentum},
                  {"weight_decay", c.weight_decay},
                  {"label_smoothing", c.label_smoothing},
                  {"crop_padding", c.crop_padding},
                  {"hflip", c.hflip},
                  {"seed", c.seed},
                  {"threads", num_threads()},
                  {"final_test_accuracy", acc},
                  {"best_test_accuracy", best},
                  {"train_seconds", train_seconds},
                  {"data_load_seconds", t_load.seconds() - train_seconds},
                  // CPU time of the whole process (all threads): on a shared
                  // machine, wall-clock train_seconds depend on the load.
                  {"process_cpu_seconds", app::process_cpu_seconds()},
                  {"per_epoch", per}};
  app::write_json((fs::path(c.out) / "metrics.json").string(), m);
  std::printf("cnn: %s test accuracy %.2f%% (best %.2f%%) after %d epochs, %.1fs training -> %s\n", c.data.c_str(),
              100 * acc, 100 * best, c.epochs, train_seconds, (fs::path(c.out) / "model.safetensors").c_str());
  export_resnet(c, *model, test_loader, tc);
  return app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App cli{"Train a small ResNet on Fashion-MNIST (default), MNIST or CIFAR-10: the teacher of vit --teacher"};
  cli.add_option("--data", c.data, "data set: fashion-mnist (default), mnist or cifar10")
      ->check(CLI::IsMember({"fashion-mnist", "mnist", "cifar10"}));
  app::input_dir(
      cli.add_option("--data-dir", c.data_dir, "directory of the data files (default: as vit's --data-dir)"));
  cli.add_option("--epochs", c.epochs, "training epochs (default 6, at most 10000)")->check(app::int_range(1, 10000));
  cli.add_option("--batch-size", c.batch_size, "images per step (default 128, at most 65536)")
      ->check(app::int_range(1, 65536));
  cli.add_option("--lr", c.lr, "peak learning rate of the one-cycle schedule (default 0.05)")
      ->check(app::finite_range(1e-9, 100));
  cli.add_option("--momentum", c.momentum, "SGD momentum, Nesterov when > 0 (default 0.9)")
      ->check(app::finite_range(0, 0.999));
  cli.add_option("--weight-decay", c.weight_decay, "L2 on conv and linear weights (default 5e-4)")
      ->check(app::finite_range(0, 1));
  cli.add_option("--pct-start", c.pct_start, "share of the steps spent warming up (default 0.25)")
      ->check(app::finite_range(0, 1));
  cli.add_option("--label-smoothing", c.label_smoothing, "label smoothing (default 0.1)")
      ->check(app::finite_range(0, 0.99));
  cli.add_option("--widths", c.widths, "channels of each stage, comma-separated (default 16,32,64)");
  cli.add_option("--blocks", c.blocks, "BasicBlocks per stage, comma-separated (default 1,1,1)");
  cli.add_option("--crop-padding", c.crop_padding, "random crop with this zero padding, 0 = off (default)")
      ->check(app::int_range(0, 64));
  cli.add_option("--hflip", c.hflip, "random horizontal flip: on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
  cli.add_option("--limit-train", c.limit_train, "use only the first N training images (smoke runs; 0 = all)")
      ->check(app::int_range(0, std::numeric_limits<int64_t>::max()));
  cli.add_option("--limit-test", c.limit_test, "use only the first N test images (smoke runs; 0 = all)")
      ->check(app::int_range(0, std::numeric_limits<int64_t>::max()));
  cli.add_option("--eval-batch-size", c.eval_batch, "images per evaluation batch (default 1000)")
      ->check(app::int_range(1, 65536));
  app::add_seed(cli, c.seed);
  app::add_threads(cli, c.threads);
  app::add_out(cli, c.out);
  app::add_quiet(cli, c.quiet);
  app::add_check(cli, c.check);
  CLI::Option* eval_only =
      cli.add_flag("--eval-only", c.eval_only,
                   "score --weights on the test split of its data set again and exit (writes eval.json)");
  app::input_file(cli.add_option("--weights", c.weights,
                                 "model.safetensors written by cnn, for --eval-only (its sizes, data set and "
                                 "normalisation come from its metadata)"))
      ->needs(eval_only);
  app::add_force_eval(cli, c.force_eval)->needs(eval_only);
  app::add_export_onnx(cli, c.onnx, "images (batch, channels, height, width), normalised as in training -> logits");
  return app::run_main("cnn", cli, argc, argv, [&] {
    if (c.eval_only && c.weights.empty()) throw UsageError("--eval-only needs --weights MODEL");
    return run(c, cli);
  });
}
