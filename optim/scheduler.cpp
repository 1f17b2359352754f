// Learning-rate schedules (closed forms of PyTorch's recursions).
#include <ember/optim/scheduler.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <ember/ops/factory.h>

namespace ember::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;

double read_scalar(const StateDict& s, const std::string& key, const char* who) {
  for (const auto& [k, t] : s)
    if (k == key) return t.item<double>();
  throw ValueError(std::string(who) + ".load_state_dict: missing entry '" + key + "'");
}
}  // namespace

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (const ParamGroup& g : opt.param_groups()) base_lrs_.push_back(g.initial_lr);
}

void LRScheduler::init() { step(); }

void LRScheduler::step() {
  ++last_epoch_;
  auto& groups = opt_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].lr = lr_at(i, base_lrs_[i]);
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (const ParamGroup& g : opt_.param_groups()) out.push_back(g.lr);
  return out;
}

StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kFloat64)}};
}

void LRScheduler::load_state_dict(const StateDict& state) {
  last_epoch_ = static_cast<int64_t>(read_scalar(state, "last_epoch", "LRScheduler")) - 1;
  step();  // re-derive the rates of that epoch
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, ValueError, "StepLR: step_size must be positive, got ", step_size);
  init();
}
double StepLR::lr_at(size_t, double base) const {
  return base * std::pow(gamma_, static_cast<double>(last_epoch_ / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  init();
}
double MultiStepLR::lr_at(size_t, double base) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  return base * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) { init(); }
double ExponentialLR::lr_at(size_t, double base) const {
  return base * std::pow(gamma_, static_cast<double>(last_epoch_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), T_max_(T_max), eta_min_(eta_min) {
  EMBER_CHECK(T_max > 0, ValueError, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  init();
}
double CosineAnnealingLR::lr_at(size_t, double base) const {
  return eta_min_ +
         (base - eta_min_) * (1 + std::cos(kPi * static_cast<double>(last_epoch_) / static_cast<double>(T_max_))) / 2;
}

LinearLR::LinearLR(Optimizer& opt, double start, double end, int64_t total)
    : LRScheduler(opt), start_(start), end_(end), total_(total) {
  EMBER_CHECK(start > 0 && start <= 1 && end >= 0 && end <= 1 && total > 0, ValueError,
              "LinearLR: factors must be in (0, 1] and [0, 1] and total_iters positive");
  init();
}
double LinearLR::lr_at(size_t, double base) const {
  const double t = static_cast<double>(std::min(last_epoch_, total_)) / static_cast<double>(total_);
  return base * (start_ + (end_ - start_) * t);
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup, int64_t total, double eta_min, double start)
    : LRScheduler(opt), warmup_(warmup), total_(total), eta_min_(eta_min), start_(start) {
  EMBER_CHECK(warmup >= 0 && total > warmup, ValueError, "WarmupCosineLR: need 0 <= warmup_steps < total_steps, got ",
              warmup, " and ", total);
  init();
}
double WarmupCosineLR::lr_at(size_t, double base) const {
  if (last_epoch_ < warmup_)
    return base * (start_ + (1 - start_) * static_cast<double>(last_epoch_) / static_cast<double>(warmup_));
  const double t = static_cast<double>(last_epoch_ - warmup_) / static_cast<double>(total_ - warmup_);
  return eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * t)) / 2;
}

NanoGPTCosineLR::NanoGPTCosineLR(Optimizer& opt, int64_t warmup, int64_t total, double min_lr)
    : LRScheduler(opt), warmup_(warmup), total_(total), min_lr_(min_lr) {
  EMBER_CHECK(warmup >= 0 && total >= 1, ValueError,
              "NanoGPTCosineLR: need warmup_steps >= 0 and total_steps >= 1, got ", warmup, " and ", total);
  init();
}
double NanoGPTCosineLR::lr_at(size_t, double base) const {
  const int64_t it = last_epoch_;
  if (it < warmup_) return base * static_cast<double>(it + 1) / static_cast<double>(warmup_ + 1);
  if (it >= total_) return min_lr_;
  // max(1, ...): warm-up as long as the run leaves no cosine to divide by.
  const double r = static_cast<double>(it - warmup_) / static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
  return min_lr_ + 0.5 * (1.0 + std::cos(kPi * r)) * (base - min_lr_);
}

AnnealStrategy anneal_strategy(const std::string& name) {
  if (name == "cos") return AnnealStrategy::Cos;
  if (name == "linear") return AnnealStrategy::Linear;
  throw ValueError("OneCycleLR: anneal_strategy must be cos or linear, got '" + name + "'");
}

PlateauMode plateau_mode(const std::string& name) {
  if (name == "min") return PlateauMode::Min;
  if (name == "max") return PlateauMode::Max;
  throw ValueError("ReduceLROnPlateau: mode must be min or max, got '" + name + "'");
}

ThresholdMode threshold_mode(const std::string& name) {
  if (name == "rel") return ThresholdMode::Rel;
  if (name == "abs") return ThresholdMode::Abs;
  throw ValueError("ReduceLROnPlateau: threshold_mode must be rel or abs, got '" + name + "'");
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total, double pct_start, AnnealStrategy anneal,
                       double div_factor, double final_div_factor)
    : LRScheduler(opt),
      max_lr_(max_lr),
      initial_lr_(max_lr / div_factor),
      min_lr_(max_lr / div_factor / final_div_factor),
      total_(total),
      end_up_(pct_start * static_cast<double>(total) - 1),
      cos_(anneal == AnnealStrategy::Cos) {
  EMBER_CHECK(total > 1 && pct_start > 0 && pct_start < 1, ValueError,
              "OneCycleLR: need total_steps > 1 and 0 < pct_start < 1");
  for (ParamGroup& g : opt.param_groups()) g.initial_lr = initial_lr_;
  init();
}
double OneCycleLR::lr_at(size_t, double) const {
  EMBER_CHECK(last_epoch_ <= total_, ValueError, "OneCycleLR: stepped ", last_epoch_, " times but total_steps is ",
              total_);
  auto anneal = [&](double from, double to, double pct) {
    return cos_ ? to + (from - to) / 2 * (1 + std::cos(kPi * pct)) : (to - from) * pct + from;
  };
  const double e = static_cast<double>(last_epoch_);
  if (e <= end_up_) return anneal(initial_lr_, max_lr_, e / end_up_);
  return anneal(max_lr_, min_lr_, (e - end_up_) / (static_cast<double>(total_ - 1) - end_up_));
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, Options o) : opt_(opt), o_(std::move(o)) {
  EMBER_CHECK(o_.factor < 1.0, ValueError, "ReduceLROnPlateau: factor should be < 1.0, got ", o_.factor);
  best_ =
      o_.mode == PlateauMode::Min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double a, double best) const {
  const bool rel = o_.threshold_mode == ThresholdMode::Rel;
  if (o_.mode == PlateauMode::Min) return rel ? a < best * (1 - o_.threshold) : a < best - o_.threshold;
  return rel ? a > best * (1 + o_.threshold) : a > best + o_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (better(metric, best_)) {
    best_ = metric;
    bad_ = 0;
  } else {
    ++bad_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    bad_ = 0;
  }
  if (bad_ > o_.patience) {
    for (ParamGroup& g : opt_.param_groups()) {
      const double next = std::max(g.lr * o_.factor, o_.min_lr);
      if (g.lr - next > o_.eps) g.lr = next;
    }
    cooldown_counter_ = o_.cooldown;
    bad_ = 0;
  }
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> out;
  for (const ParamGroup& g : opt_.param_groups()) out.push_back(g.lr);
  return out;
}

StateDict ReduceLROnPlateau::state_dict() const {
  auto s = [](double v) { return scalar_tensor(v, kFloat64); };
  StateDict d = {{"best", s(best_)},
                 {"num_bad_epochs", s(static_cast<double>(bad_))},
                 {"cooldown_counter", s(static_cast<double>(cooldown_counter_))},
                 {"last_epoch", s(static_cast<double>(last_epoch_))}};
  for (size_t i = 0; i < opt_.param_groups().size(); ++i)
    d.emplace_back("lr." + std::to_string(i), s(opt_.param_groups()[i].lr));
  return d;
}

void ReduceLROnPlateau::load_state_dict(const StateDict& st) {
  best_ = read_scalar(st, "best", "ReduceLROnPlateau");
  bad_ = static_cast<int64_t>(read_scalar(st, "num_bad_epochs", "ReduceLROnPlateau"));
  cooldown_counter_ = static_cast<int64_t>(read_scalar(st, "cooldown_counter", "ReduceLROnPlateau"));
  last_epoch_ = static_cast<int64_t>(read_scalar(st, "last_epoch", "ReduceLROnPlateau"));
  for (size_t i = 0; i < opt_.param_groups().size(); ++i)
    opt_.param_groups()[i].lr = read_scalar(st, "lr." + std::to_string(i), "ReduceLROnPlateau");
}

}  // namespace ember::optim
