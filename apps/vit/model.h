// The ViT demo's data, model and augmentations as the flags define them:
// the data sets read, the sizes checked against a documented maximum before
// anything is built, the VisionTransformer, and the training set's
// augmentations. Kept apart from main.cpp, which holds the training.
#pragma once

#include <memory>
#include <string>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>
#include <ember/nn/data_readers.h>

#include "app.h"
#include "vit_run_config.h"

namespace vit {

using namespace ember;
namespace data = ember::nn::data;

// A setting that does not fit, named where it came from: the flag (a
// UsageError), or, once read_config has read the run's configuration from a
// checkpoint, that file's stored field (an IOError naming the file): the
// value was not given on this command line.
inline std::string setting_name(const Config& c, const char* flag, const char* key) {
  return c.config_from.empty() ? flag : key;
}
[[noreturn]] inline void refuse_setting(const Config& c, const std::string& why) {
  if (c.config_from.empty()) throw ember::app::UsageError(why);
  throw ember::IOError(c.config_from + ": stored configuration: " + why);
}

// The model's sizes, before anything is built: a documented maximum
// instead of bad_alloc.
inline void check_model_size(const Config& c) {
  if (c.width % c.heads != 0)
    refuse_setting(c, setting_name(c, "--width", "width") + " " + std::to_string(c.width) + " is not divisible by " +
                          setting_name(c, "--heads", "heads") + " " + std::to_string(c.heads));
  const double params = vit::parameter_lower_bound(c);
  if (params > vit::kMaxParameters)
    refuse_setting(
        c, ember::app::fmt("%s %lld, %s %lld, %s %lld, %s %lld and %s %lld make a model of at least %.3g "
                           "parameters, more than this demo builds (%.3g)",
                           setting_name(c, "--width", "width").c_str(), static_cast<long long>(c.width),
                           setting_name(c, "--depth", "depth").c_str(), static_cast<long long>(c.depth),
                           setting_name(c, "--mlp", "mlp").c_str(), static_cast<long long>(c.mlp),
                           setting_name(c, "--patch-size", "patch_size").c_str(), static_cast<long long>(c.patch),
                           setting_name(c, "--hybrid", "stem_channels").c_str(), static_cast<long long>(c.stem), params,
                           vit::kMaxParameters));
}

struct Datasets {
  data::ImageSet train, test;
  data::ChannelStats norm;
  double load_seconds = 0;
};
// --data from --data-dir (its default when unset), cut to --limit-train and --limit-test.
inline Datasets load_data(Config& c) {
  if (c.data_dir.empty()) c.data_dir = data::default_data_dir(c.data);
  const ember::app::Timer t;
  Datasets d;
  d.train = data::load_dataset(c.data, c.data_dir, true).head(c.limit_train);
  d.test = data::load_dataset(c.data, c.data_dir, false).head(c.limit_test);
  d.norm = data::channel_stats(d.train);  // training-set statistics only
  d.load_seconds = t.seconds();
  return d;
}

inline std::shared_ptr<nn::VisionTransformer> make_model(const Config& c, const data::ImageSet& set) {
  if (set.height % c.patch != 0 || set.width % c.patch != 0)
    refuse_setting(c, setting_name(c, "--patch-size", "patch_size") + " " + std::to_string(c.patch) +
                          " does not divide the " + std::to_string(set.height) + "x" + std::to_string(set.width) +
                          " images of " + c.data);
  return std::make_shared<nn::VisionTransformer>(nn::VisionTransformerOptions{.img_size = {set.height, set.width},
                                                                              .patch_size = {c.patch, c.patch},
                                                                              .in_channels = set.channels,
                                                                              .num_classes = set.num_classes(),
                                                                              .embed_dim = c.width,
                                                                              .depth = c.depth,
                                                                              .num_heads = c.heads,
                                                                              .mlp_dim = c.mlp,
                                                                              .dropout = c.dropout,
                                                                              .stem_channels = c.stem,
                                                                              .drop_path_rate = c.drop_path,
                                                                              .distillation = c.distill != "none"});
}

inline data::AugmentOptions augment_options(const Config& c) {
  return {.crop_padding = c.crop_padding,
          .hflip = c.hflip == "on" || (c.hflip == "auto" && c.data != "mnist"),
          .erase_prob = c.erase,
          .mixup_alpha = c.mixup,
          .cutmix_alpha = c.cutmix,
          .randaugment_ops = c.randaug_n,
          .randaugment_magnitude = c.randaug_m};
}

}  // namespace vit
