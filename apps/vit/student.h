// The DeiT recipe's parts of a ViT training step, apart from
// main.cpp's loop: the frozen CNN teacher (vit --teacher, apps/cnn) and its
// logits, the distillation loss on the student's two heads, the EMA of the
// weights, and the precision (autocast, loss scaling for float16).
//
// Teacher logits are computed on the fly, once per augmented batch, with the
// teacher in eval mode under NoGradGuard: the batch the student sees (crop,
// flip, RandAugment, mixup) changes every epoch, so cached logits of the
// plain images would describe other inputs; the small ResNet's forward costs
// a fraction of the student's forward and backward.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <ember/ember.h>
#include <ember/nn/data_loader.h>

#include "app.h"
#include "cnn_teacher.h"
#include "vit_run_config.h"

namespace vit {

using namespace ember;

struct Student {
  std::optional<app::Teacher> teacher;
  Tensor scale, shift;  // the student's normalised input to the teacher's: x * scale + shift, per channel
  nn::DistillType type = nn::DistillType::None;
  std::shared_ptr<nn::VisionTransformer> ema_model;
  std::unique_ptr<nn::ModelEma> ema;
  std::optional<optim::GradScaler> scaler;  // fp16 only
  bool autocast = false;
  DType amp_dtype = DType::Float32;

  // The teacher's logits for a batch of the student's (normalised) images.
  Tensor teacher_logits(const Tensor& images) const {
    NoGradGuard ng;
    return (*teacher->model)(add(mul(images, scale), shift));
  }
};

// The metadata key under which a distilled run's checkpoints record the
// teacher file's fingerprint (app::file_fingerprint).
inline constexpr const char* kTeacherKey = "teacher_file";

// The fingerprint of c.teacher ("" without a teacher, or when the file is not
// a regular file: load_teacher's error names it then). On a resume whose
// checkpoint recorded another, a UsageError naming both: a teacher replaced
// under a run would switch its targets halfway. Checkpoints written before
// the key existed resume as they did.
inline std::string check_teacher_file(const Config& c, const std::map<std::string, std::string>& meta) {
  const std::string now =
      !c.teacher.empty() && std::filesystem::is_regular_file(c.teacher) ? app::file_fingerprint(c.teacher) : "";
  const auto it = meta.find(kTeacherKey);
  if (!c.resume.empty() && it != meta.end() && it->second != now)
    throw app::UsageError("--teacher " + c.teacher + " changed since " + c.resume + " was written: the file is now " +
                          (now.empty() ? std::string("not used") : now) + ", the checkpoint recorded " + it->second);
  return now;
}

// Loads and checks the teacher against the data (UsageError naming the
// file), and sets up EMA and precision. make_model builds a second ViT for the EMA.
template <class MakeModel>
Student make_student(const Config& c, const nn::data::ImageSet& train, const nn::data::ChannelStats& norm, Device dev,
                     const nn::VisionTransformer& model, MakeModel make_model) {
  // Building the teacher and the EMA copy initialises modules, which draws
  // from the default generator; the student's run (dropout, DropPath) must
  // not depend on whether they exist, so the stream is put back afterwards.
  const Generator stream = default_generator();
  Student s;
  if (!c.teacher.empty()) {
    s.teacher = app::load_teacher(c.teacher);
    const app::TeacherConfig& t = s.teacher->config;
    if (t.data != c.data || t.resnet.in_channels != train.channels || t.resnet.num_classes != train.num_classes())
      throw app::UsageError("--teacher " + c.teacher + " was trained on " + t.data + " (" +
                            std::to_string(t.resnet.in_channels) + " channels, " +
                            std::to_string(t.resnet.num_classes) + " classes), not on this run's " + c.data);
    // x_t = (p - m_t) / s_t with p = x_s s_s + m_s.
    std::vector<float> sc, sh;
    for (size_t k = 0; k < t.mean.size(); ++k) {
      sc.push_back(static_cast<float>(norm.std[k] / t.std[k]));
      sh.push_back(static_cast<float>((norm.mean[k] - t.mean[k]) / t.std[k]));
    }
    const int64_t C = train.channels;
    s.scale = from_vector(sc, Shape{1, C, 1, 1}).to(dev);
    s.shift = from_vector(sh, Shape{1, C, 1, 1}).to(dev);
    s.teacher->model->to(dev);
    s.type = c.distill == "hard" ? nn::DistillType::Hard : nn::DistillType::Soft;
  }
  if (c.ema > 0) {
    s.ema_model = make_model();
    s.ema_model->to(dev);
    s.ema = std::make_unique<nn::ModelEma>(s.ema_model, model, c.ema);
  }
  s.autocast = c.precision != "fp32";
  s.amp_dtype = c.precision == "bf16" ? DType::BFloat16 : DType::Float16;
  if (c.precision == "fp16") s.scaler.emplace();
  default_generator() = stream;
  return s;
}

}  // namespace vit
