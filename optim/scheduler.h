/// \file
/// Learning-rate schedulers with PyTorch's formulas and step semantics: the
/// constructor sets epoch 0's rate, each step() advances one epoch (or
/// iteration) and writes the new rate into every parameter group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ember/optim/optimizer.h>

namespace ember::optim {

/// How OneCycleLR moves between its rates: half a cosine or a straight line.
enum class AnnealStrategy { Cos, Linear };
/// PyTorch's spelling, "cos" or "linear", to the enum; ValueError otherwise.
AnnealStrategy anneal_strategy(const std::string& name);
/// Whether ReduceLROnPlateau's metric improves by falling (a loss) or rising (an accuracy).
enum class PlateauMode { Min, Max };
/// "min" or "max" to the enum; ValueError otherwise.
PlateauMode plateau_mode(const std::string& name);
/// Whether ReduceLROnPlateau's threshold is relative to the best metric or absolute.
enum class ThresholdMode { Rel, Abs };
/// "rel" or "abs" to the enum; ValueError otherwise.
ThresholdMode threshold_mode(const std::string& name);

/// The base of the epoch-indexed schedulers: a derived class gives the rate
/// at an epoch (lr_at), and step() advances the epoch and writes it.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  /// Advances one epoch (or iteration) and sets every group's rate.
  virtual void step();
  /// The rates set by the last step, one per group.
  std::vector<double> get_last_lr() const;
  /// The epoch whose rates are set (0 after construction).
  int64_t last_epoch() const { return last_epoch_; }
  /// {last_epoch, ...} as a StateDict of 0-dim float64 tensors, for checkpoints.
  ///@{
  virtual StateDict state_dict() const;
  virtual void load_state_dict(const StateDict& state);
  ///@}

 protected:
  /// Remembers each group's initial_lr as its base rate.
  explicit LRScheduler(Optimizer& opt);
  /// Call at the end of a derived constructor: sets epoch 0's rates.
  void init();
  /// The rate of group i at epoch last_epoch_.
  virtual double lr_at(size_t group, double base_lr) const = 0;
  Optimizer& opt_;                ///< the optimizer whose groups are set
  std::vector<double> base_lrs_;  ///< each group's initial rate
  int64_t last_epoch_ = -1;       ///< the current epoch
};

/// base * gamma^floor(epoch / step_size)
class StepLR final : public LRScheduler {
 public:
  /// Multiplies by gamma every step_size epochs.
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 private:
  double lr_at(size_t, double base) const override;
  int64_t step_size_;
  double gamma_;
};

/// base * gamma^(number of milestones <= epoch)
class MultiStepLR final : public LRScheduler {
 public:
  /// Multiplies by gamma at each milestone epoch.
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);

 private:
  double lr_at(size_t, double base) const override;
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// base * gamma^epoch
class ExponentialLR final : public LRScheduler {
 public:
  /// Multiplies by gamma every epoch.
  ExponentialLR(Optimizer& opt, double gamma);

 private:
  double lr_at(size_t, double base) const override;
  double gamma_;
};

/// eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2
class CosineAnnealingLR final : public LRScheduler {
 public:
  /// Half a cosine from base to eta_min over T_max epochs.
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);

 private:
  double lr_at(size_t, double base) const override;
  int64_t T_max_;
  double eta_min_;
};

/// base * (start + (end - start) min(epoch, total_iters) / total_iters)
class LinearLR final : public LRScheduler {
 public:
  /// The factor goes linearly from start_factor to end_factor over total_iters epochs.
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 private:
  double lr_at(size_t, double base) const override;
  double start_, end_;
  int64_t total_;
};

/// Linear warm-up from base * warmup_start_factor to base over warmup_steps,
/// then cosine decay to eta_min at total_steps. Equal to PyTorch's
/// SequentialLR([LinearLR, CosineAnnealingLR], milestones=[warmup_steps]).
class WarmupCosineLR final : public LRScheduler {
 public:
  /// Warm-up over warmup_steps, cosine decay until total_steps.
  WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double eta_min = 0.0,
                 double warmup_start_factor = 1.0 / 3);

 private:
  double lr_at(size_t, double base) const override;
  int64_t warmup_, total_;
  double eta_min_, start_;
};

/// nanoGPT's get_lr: a linear warm-up base * (epoch + 1) / (warmup_steps + 1)
/// for epoch < warmup_steps, then a cosine from base down to min_lr at
/// total_steps (r = (epoch - warmup_steps) / (total_steps - warmup_steps),
/// min_lr + (1 + cos(pi r)) / 2 * (base - min_lr)), and min_lr from there on.
/// Unlike WarmupCosineLR the warm-up never starts at zero nor reaches base
/// exactly, and min_lr is absolute; the expressions are nanoGPT's, term for
/// term, so a run matches its rates bit for bit.
class NanoGPTCosineLR final : public LRScheduler {
 public:
  /// Warm-up over warmup_steps, cosine decay to min_lr until total_steps.
  NanoGPTCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_lr);

 private:
  double lr_at(size_t, double base) const override;
  int64_t warmup_, total_;
  double min_lr_;
};

/// One cycle (Smith): from max_lr / div_factor up to max_lr over pct_start of
/// total_steps, then down to max_lr / (div_factor * final_div_factor), with
/// cosine or linear annealing. Momentum is not cycled (cycle_momentum=False).
class OneCycleLR final : public LRScheduler {
 public:
  /// One cycle of total_steps steps peaking at max_lr.
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3,
             AnnealStrategy anneal = AnnealStrategy::Cos, double div_factor = 25.0, double final_div_factor = 1e4);

 private:
  double lr_at(size_t, double base) const override;
  double max_lr_, initial_lr_, min_lr_;
  int64_t total_;
  double end_up_;  ///< the step where the rate peaks (may be fractional, as in PyTorch)
  bool cos_;
};

/// Cuts the rate by factor when a metric stops improving for patience steps.
class ReduceLROnPlateau {
 public:
  /// torch.optim.lr_scheduler.ReduceLROnPlateau's arguments.
  struct Options {
    PlateauMode mode = PlateauMode::Min;                ///< Min (a loss) or Max (an accuracy)
    double factor = 0.1;                                ///< the rate is multiplied by this
    int64_t patience = 10;                              ///< steps without improvement tolerated
    double threshold = 1e-4;                            ///< the least change that counts as an improvement
    ThresholdMode threshold_mode = ThresholdMode::Rel;  ///< Rel (relative to the best) or Abs
    int64_t cooldown = 0;                               ///< steps to wait after a cut before counting again
    double min_lr = 0.0;                                ///< the rate never goes below this
    double eps = 1e-8;                                  ///< a cut smaller than this is skipped
  };
  /// Watches a metric for opt's groups.
  ///@{
  ReduceLROnPlateau(Optimizer& opt, Options opts);
  explicit ReduceLROnPlateau(Optimizer& opt) : ReduceLROnPlateau(opt, Options{}) {}
  ///@}
  /// Records the metric of this epoch; cuts the rate after patience bad ones.
  void step(double metric);
  /// The current rates, one per group.
  std::vector<double> get_last_lr() const;
  /// The best metric so far.
  double best() const { return best_; }
  /// Steps since the last improvement.
  int64_t num_bad_epochs() const { return bad_; }
  /// The scheduler's state as 0-dim float64 tensors, for checkpoints.
  ///@{
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  ///@}

 private:
  bool better(double a, double best) const;
  Optimizer& opt_;
  Options o_;
  double best_;
  int64_t bad_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace ember::optim
