// The training loop the demos share, and its clocks. An app gives the loop
// callbacks (one training step, an evaluation, a checkpoint) and options set
// with designated initialisers; the loop counts the steps, times them (wall
// and CPU, the evaluations left out), steps the optim/ LR scheduler, draws
// the progress bar, evaluates at its cadence and after the last step, and
// saves and stops at --stop-after. A "step" is whatever the app makes it:
// one optimizer step (gpt) or one epoch (cnn, seq2seq). Checkpoints are the
// app's, written with nn::save_training_checkpoint and read back with
// nn::load_training_checkpoint (exactly, or refused).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <ember/optim/scheduler.h>

#include "app.h"

namespace ember::app {

// The process's CPU time, all threads: on a machine shared with other jobs it
// moves far less than the wall clock, so the apps' metrics record both.
double process_cpu_seconds();

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
  nlohmann::json to_json() const;
  // Replaces the curves by j's; the x series and each of `names` must be
  // there, of equal lengths (nlohmann::json::exception or std::out_of_range otherwise).
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
};

struct LoopOptions {
  int64_t start = 0;                        // steps already done (a resumed run's position)
  int64_t total = 1;                        // steps of the whole run
  int64_t eval_every = 0;                   // evaluate after every eval_every steps; 0: after the last only
  int64_t stop_after = 0;                   // save and stop after this step, as if interrupted; 0: never
  std::string unit = "iter";                // the progress bar's word for a step
  bool progress = true;                     // draw the bar (on a terminal only: app::ProgressBar)
  optim::LRScheduler* scheduler = nullptr;  // stepped after every step, when given
};

struct LoopCallbacks {
  std::function<double(int64_t step)> train_step = {};        // runs step `step` (0-based); returns its loss
  std::function<std::string(const LoopStatus&)> status = {};  // the bar's text after a step (may be empty)
  std::function<void(const LoopStatus&)> evaluate = {};       // at the cadence and after the last step
  std::function<void(const LoopStatus&)> save_and_stop = {};  // --stop-after: the checkpoint and the message
};

enum class LoopEnd { Finished, Stopped };

// Runs steps [o.start, o.total): each timed into `clock`, then the scheduler
// stepped, the bar drawn, the evaluation at its cadence (the window of losses
// reset after it), and at o.stop_after (unless it is the last step) the save
// and a Stopped return.
LoopEnd run_loop(const LoopOptions& o, const LoopCallbacks& cb, Stopwatch& clock);

}  // namespace ember::app
