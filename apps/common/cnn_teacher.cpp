// The CNN teacher's file format (cnn_teacher.h): metadata "format" =
// "ember-cnn-teacher/1" and "teacher" = JSON of the ResNet's sizes, the data
// set, its normalisation and the recorded test accuracy.
#include "cnn_teacher.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include <ember/nn/checkpoint.h>

#include "app.h"

namespace ember::app {

using json = nlohmann::json;

namespace {
constexpr const char* kFormat = "ember-cnn-teacher/1";
}

std::map<std::string, std::string> teacher_metadata(const TeacherConfig& c) {
  const json t = {{"in_channels", c.resnet.in_channels},
                  {"num_classes", c.resnet.num_classes},
                  {"widths", c.resnet.widths},
                  {"blocks", c.resnet.blocks},
                  {"data", c.data},
                  {"mean", c.mean},
                  {"std", c.std},
                  {"test_accuracy", c.test_accuracy},
                  {"train_seconds", c.train_seconds}};
  return {{"format", kFormat}, {"teacher", t.dump()}};
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || errno == ERANGE || v < lo || v > hi)
      throw UsageError(flag + " " + text + ": expected integers from " + std::to_string(lo) + " to " +
                       std::to_string(hi) + " separated by commas");
    out.push_back(v);
    if (out.size() > 8) throw UsageError(flag + " " + text + ": at most 8 entries");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Teacher load_teacher(const std::string& path, const char* eval_app, bool force_eval) {
  std::map<std::string, std::string> meta;
  StateDict tensors = load_safetensors(path, &meta);
  const auto bad = [&](const std::string& why) -> UsageError {
    return UsageError(path + ": not a CNN teacher file (apps/cnn): " + why);
  };
  if (!meta.count("format") || meta.at("format") != kFormat || !meta.count("teacher"))
    throw bad("its metadata has no \"format\": \"" + std::string(kFormat) + "\" and \"teacher\"");
  json t;
  try {
    t = app::parse_stored_json(meta.at("teacher"), path, "metadata \"teacher\"");
  } catch (const IOError& e) {
    throw bad(e.what());
  }
  Teacher out;
  TeacherConfig& c = out.config;
  const auto integer = [&](const json& v, const char* what, int64_t lo, int64_t hi) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      throw bad(std::string("field \"") + what + "\" must be an integer from " + std::to_string(lo) + " to " +
                std::to_string(hi));
    return v.get<int64_t>();
  };
  const auto list = [&](const char* key) {
    if (!t.is_object() || !t.contains(key) || !t[key].is_array() || t[key].empty() || t[key].size() > 8)
      throw bad(std::string("field \"") + key + "\" must be an array of 1 to 8 numbers");
    return t[key];
  };
  if (!t.is_object()) throw bad("metadata \"teacher\" is not a JSON object");
  for (const char* key : {"in_channels", "num_classes", "data", "test_accuracy"})
    if (!t.contains(key)) throw bad(std::string("no field \"") + key + "\"");
  c.resnet.in_channels = integer(t["in_channels"], "in_channels", 1, 4096);
  c.resnet.num_classes = integer(t["num_classes"], "num_classes", 1, 1 << 20);
  c.resnet.widths.clear();
  c.resnet.blocks.clear();
  for (const json& v : list("widths")) c.resnet.widths.push_back(integer(v, "widths", 1, 4096));
  for (const json& v : list("blocks")) c.resnet.blocks.push_back(integer(v, "blocks", 1, 64));
  if (c.resnet.widths.size() != c.resnet.blocks.size()) throw bad("\"widths\" and \"blocks\" differ in length");
  if (!t["data"].is_string()) throw bad("field \"data\" must be a string");
  c.data = t["data"].get<std::string>();
  for (const char* key : {"mean", "std"}) {
    std::vector<double>& dst = std::string(key) == "mean" ? c.mean : c.std;
    for (const json& v : list(key)) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || (key[0] == 's' && !(v.get<double>() > 0)))
        throw bad(std::string("field \"") + key + "\" holds a value that is not a finite (positive std) number");
      dst.push_back(v.get<double>());
    }
    if (static_cast<int64_t>(dst.size()) != c.resnet.in_channels)
      throw bad(std::string("field \"") + key + "\" must have one entry per input channel");
  }
  if (!t["test_accuracy"].is_number()) throw bad("field \"test_accuracy\" must be a number");
  c.test_accuracy = t["test_accuracy"].get<double>();
  if (t.contains("train_seconds")) {
    if (!t["train_seconds"].is_number() || !(t["train_seconds"].get<double>() >= 0))
      throw bad("field \"train_seconds\" must be a non-negative number");
    c.train_seconds = t["train_seconds"].get<double>();
  }
  // A teacher with NaN, Inf or overflowing weights, or a negative BatchNorm
  // running variance (rsqrt of a negative number is NaN), would give NaN
  // logits and so a NaN distillation loss from the first step.
  if (eval_app)
    app::check_eval_weights(eval_app, tensors, path, force_eval);
  else
    app::refuse_suspicious(tensors, path, "--teacher");
  out.model = std::make_shared<nn::ResNet>(c.resnet);
  // strict: every parameter and buffer must come from the file with its shape.
  try {
    out.model->load_state_dict(tensors, true);
  } catch (const Error& e) {
    throw bad(std::string("its tensors do not fit the ResNet its metadata describes (") + e.what() + ")");
  }
  out.model->eval();
  for (Tensor& p : out.model->parameters()) p.requires_grad_(false);
  return out;
}

}  // namespace ember::app
