// The training loop the demos share, and its clocks. An app gives the loop
// callbacks (one training step, an evaluation, a checkpoint) and options set
// with designated initialisers; the loop counts the steps, times them (wall
// and CPU, the evaluations left out), steps the optim/ LR scheduler, draws
// the progress bar, evaluates at its cadence and after the last step, and
// saves and stops at --stop-after or when the interrupt flag is raised
// (Ctrl-C, checked between steps). With a metric it also keeps the best
// figure, steps ReduceLROnPlateau on it, stops early after `patience`
// evaluations without improvement and loads the best weights back. A "step"
// is whatever the app makes it: one optimizer step (gpt, vit) or one epoch
// (cnn, seq2seq, attention_regression). Checkpoints are the app's, written
// with nn::save_training_checkpoint and read back with
// nn::load_training_checkpoint (exactly, or refused); a resumed run starts
// from any step, mid-epoch included.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <ember/nn/module.h>
#include <ember/optim/scheduler.h>

#include "app.h"

namespace ember::app {

// The process's CPU time, all threads: on a machine shared with other jobs it
// moves far less than the wall clock, so the apps' metrics record both.
double process_cpu_seconds();

// Ctrl-C (SIGINT) and SIGUSR1 raise the returned flag, for
// LoopOptions::interrupt: the loop saves and stops after the current step.
// The first signal puts SIGINT's default handler back, so a second Ctrl-C
// ends the program at once. SIGUSR1 is there for mpirun, which ends the whole
// job on Ctrl-C before the ranks can save but forwards SIGUSR1 to each.
const std::atomic<bool>& catch_interrupts();

// Wall-clock and CPU seconds summed over the intervals between start() and
// stop(): a run's training time without its evaluations. A resumed run
// starts from the seconds its checkpoint recorded.
class Stopwatch {
 public:
  explicit Stopwatch(double seconds = 0, double cpu_seconds = 0) : seconds_(seconds), cpu_(cpu_seconds) {}
  void start() {
    lap_.reset();
    cpu0_ = process_cpu_seconds();
  }
  void stop() {
    last_ = lap_.seconds();
    seconds_ += last_;
    cpu_ += process_cpu_seconds() - cpu0_;
  }
  double seconds() const { return seconds_; }
  double lap_seconds() const { return last_; }  // the last interval's wall time
  double cpu_seconds() const { return cpu_; }

 private:
  Timer lap_;
  double seconds_, cpu_, cpu0_ = 0, last_ = 0;
};

// Curves recorded at each evaluation: the step count (x) and named series, in
// the order first recorded. As JSON ({x_name: [...], name: [...], ...}) in
// metrics.json and in a checkpoint's metadata, so a resumed run continues them.
class MetricsHistory {
 public:
  explicit MetricsHistory(std::string x_name = "step") : x_name_(std::move(x_name)) {}
  void record(double x, std::initializer_list<std::pair<const char*, double>> values);
  const std::vector<double>& x() const { return x_; }
  // The series called name; std::out_of_range when none is.
  const std::vector<double>& at(const std::string& name) const;
  // Numbers, NaN and Inf as "nan", "inf", "-inf" (json_number.h), so that a
  // run whose loss went NaN still saves a checkpoint that resumes.
  nlohmann::json to_json() const;
  // Replaces the curves by j's; the x series and each of `names` must be
  // there, arrays of equal lengths of numbers or json_number's strings
  // (nlohmann::json::exception or std::out_of_range otherwise).
  void from_json(const nlohmann::json& j, const std::vector<std::string>& names);

 private:
  std::string x_name_;
  std::vector<double> x_;
  std::vector<std::pair<std::string, std::vector<double>>> series_;
};

// Where the loop stands, as the callbacks see it.
struct LoopStatus {
  int64_t done = 0;                  // steps completed (this one included)
  int64_t total = 0;                 // steps of the whole run
  int64_t run_steps = 0;             // steps completed by this process (a resumed run counts from its start)
  double loss = 0;                   // the last step's loss
  double lr = 0;                     // the rate the last step used (the scheduler's first group)
  double window_loss = 0;            // the sum of the losses since the last evaluation ...
  int64_t window_steps = 0;          // ... and their number
  const Stopwatch* clock = nullptr;  // the training time so far (steps only)
  // With a metric (LoopCallbacks::metric; lower is better), at an evaluation:
  double metric = 0;              // this evaluation's figure
  double best_metric = INFINITY;  // the lowest so far (this one included) ...
  int64_t best_step = 0;          // ... and the step it was measured after; 0: none yet (NaN never counts)
  bool early_stop = false;        // this evaluation ends the run: LoopOptions::patience ran out
  bool interrupted = false;       // save_and_stop: the interrupt flag, not --stop-after
};

struct LoopOptions {
  int64_t start = 0;                        // steps already done (a resumed run's position, mid-epoch included)
  int64_t total = 1;                        // steps of the whole run
  int64_t eval_every = 0;                   // evaluate after every eval_every steps; 0: after the last only
  int64_t stop_after = 0;                   // save and stop after this step, as if interrupted; 0: never
  std::string unit = "iter";                // the progress bar's word for a step
  bool progress = true;                     // draw the bar (on a terminal only: app::ProgressBar)
  optim::LRScheduler* scheduler = nullptr;  // stepped after every step, when given
  // Checked after every step (before its evaluation): raised, the loop calls
  // save_and_stop and ends Interrupted. catch_interrupts() gives Ctrl-C's; a
  // distributed app passes a flag the ranks agreed on during the step, so
  // that all of them stop after the same one.
  const std::atomic<bool>* interrupt = nullptr;
  // The run was saved after step `start` but before that step's evaluation
  // (interrupted on an evaluation step): evaluate, then honour stop_after,
  // before the next step.
  bool evaluation_due = false;
  // Stepped after every evaluation on the metric, or, with plateau_on_loss,
  // on the mean training loss since the previous evaluation.
  optim::ReduceLROnPlateau* plateau = nullptr;
  bool plateau_on_loss = false;
  // Early stopping: the run ends (EarlyStopped) at the evaluation that makes
  // `patience` in a row without a metric below the best; 0: never. The best
  // and the count live in the loop, not in a checkpoint: a resumed run
  // starts them afresh.
  int64_t patience = 0;
  // A copy of this module's weights is taken at each new best metric and
  // loaded back when the run ends Finished or EarlyStopped (not when it
  // stops to be resumed: the checkpoint holds the weights it trains on).
  nn::Module* keep_best = nullptr;
};

struct LoopCallbacks {
  std::function<double(int64_t step)> train_step = {};        // runs step `step` (0-based); returns its loss
  std::function<std::string(const LoopStatus&)> status = {};  // the bar's text after a step (may be empty)
  // At each evaluation, before `evaluate`: the figure to minimise (a
  // validation loss), which the best, the plateau and early stopping watch.
  std::function<double(const LoopStatus&)> metric = {};
  std::function<void(const LoopStatus&)> evaluate = {};  // at the cadence and after the last step
  // --stop-after or the interrupt (LoopStatus::interrupted): the checkpoint, the message.
  std::function<void(const LoopStatus&)> save_and_stop = {};
};

enum class LoopEnd { Finished, Stopped, Interrupted, EarlyStopped };

// Runs steps [o.start, o.total): each timed into `clock`, then the scheduler
// stepped, the bar drawn, the interrupt flag read (save_and_stop and an
// Interrupted return), the evaluation at its cadence (the metric, the
// plateau, the best and early stopping, then `evaluate`; the window of
// losses reset after it), and at o.stop_after (unless it is the last step)
// the save and a Stopped return. Throws std::invalid_argument when an option
// needs the metric callback and there is none.
LoopEnd run_loop(const LoopOptions& o, const LoopCallbacks& cb, Stopwatch& clock);

}  // namespace ember::app
