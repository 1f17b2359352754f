// Learning-rate schedulers with PyTorch's formulas and step semantics: the
// constructor sets epoch 0's rate, each step() advances one epoch (or
// iteration) and writes the new rate into every parameter group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ember/optim/optimizer.h>

namespace ember::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  virtual void step();
  // The rates set by the last step, one per group.
  std::vector<double> get_last_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  // {last_epoch, ...} as a StateDict of 0-dim float64 tensors, for checkpoints.
  virtual StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);

 protected:
  explicit LRScheduler(Optimizer& opt);
  // Call at the end of a derived constructor: sets epoch 0's rates.
  void init();
  // The rate of group i at epoch last_epoch_.
  virtual double lr_at(size_t group, double base_lr) const = 0;
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
};

// base * gamma^floor(epoch / step_size)
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
 private:
  double lr_at(size_t, double base) const override;
  int64_t step_size_;
  double gamma_;
};

// base * gamma^(number of milestones <= epoch)
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
 private:
  double lr_at(size_t, double base) const override;
  std::vector<int64_t> milestones_;
  double gamma_;
};

// base * gamma^epoch
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
 private:
  double lr_at(size_t, double base) const override;
  double gamma_;
};

// eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
 private:
  double lr_at(size_t, double base) const override;
  int64_t T_max_;
  double eta_min_;
};

// base * (start + (end - start) min(epoch, total_iters) / total_iters)
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
 private:
  double lr_at(size_t, double base) const override;
  double start_, end_;
  int64_t total_;
};

// Linear warm-up from base * warmup_start_factor to base over warmup_steps,
// then cosine decay to eta_min at total_steps. Equal to PyTorch's
// SequentialLR([LinearLR, CosineAnnealingLR], milestones=[warmup_steps]).
class WarmupCosineLR final : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double eta_min = 0.0,
                 double warmup_start_factor = 1.0 / 3);
 private:
  double lr_at(size_t, double base) const override;
  int64_t warmup_, total_;
  double eta_min_, start_;
};

// One cycle (Smith): from max_lr / div_factor up to max_lr over pct_start of
// total_steps, then down to max_lr / (div_factor * final_div_factor), with
// cosine or linear annealing. Momentum is not cycled (cycle_momentum=False).
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3,
             const std::string& anneal_strategy = "cos", double div_factor = 25.0, double final_div_factor = 1e4);
 private:
  double lr_at(size_t, double base) const override;
  double max_lr_, initial_lr_, min_lr_;
  int64_t total_;
  double end_up_;  // the step where the rate peaks (may be fractional, as in PyTorch)
  bool cos_;
};

// Cuts the rate by factor when a metric stops improving for patience steps.
class ReduceLROnPlateau {
 public:
  struct Options {
    std::string mode = "min";  // "min" or "max"
    double factor = 0.1;
    int64_t patience = 10;
    double threshold = 1e-4;
    std::string threshold_mode = "rel";  // "rel" or "abs"
    int64_t cooldown = 0;
    double min_lr = 0.0;
    double eps = 1e-8;
  };
  ReduceLROnPlateau(Optimizer& opt, Options opts);
  explicit ReduceLROnPlateau(Optimizer& opt) : ReduceLROnPlateau(opt, Options{}) {}
  void step(double metric);
  std::vector<double> get_last_lr() const;
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return bad_; }
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  bool better(double a, double best) const;
  Optimizer& opt_;
  Options o_;
  double best_;
  int64_t bad_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace ember::optim
