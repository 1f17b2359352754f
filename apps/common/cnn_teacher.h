// The CNN teacher's file, shared by the apps that write it (apps/cnn) and
// read it (vit --teacher): an nn::ResNet saved as safetensors with its
// configuration in the metadata ("teacher" as JSON: the ResNet's sizes, the
// data set and the channel normalisation it was trained with). The reader
// checks every field and the tensors against the model it builds, and
// throws UsageError naming the file: the file is one the user named on the
// command line.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>

namespace ember::app {

// What a teacher file records beside its weights.
struct TeacherConfig {
  nn::ResNetOptions resnet;
  std::string data;               // the data set it was trained on
  std::vector<double> mean, std;  // its input normalisation, per channel
  double test_accuracy = 0;       // recorded after training
  double train_seconds = 0;       // the training steps' time (the recipe's budget counts it)
};

// The file's metadata for a trained teacher.
std::map<std::string, std::string> teacher_metadata(const TeacherConfig& c);

// A loaded teacher: the model in eval mode with frozen weights, and its configuration.
struct Teacher {
  std::shared_ptr<nn::ResNet> model;
  TeacherConfig config;
};

// Reads and checks a teacher file (UsageError naming it and the field).
// Weights with NaN, Inf or overflow are refused for training from them; with
// eval_app (--eval-only of that app) app::check_eval_weights decides instead.
Teacher load_teacher(const std::string& path, const char* eval_app = nullptr, bool force_eval = false);

// "16,32,64" -> {16, 32, 64}, each in [lo, hi], 1 to 8 entries (UsageError naming flag).
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag, int64_t lo, int64_t hi);

}  // namespace ember::app
