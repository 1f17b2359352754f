// The demos' shared training loop (apps/common/train_loop.h): the steps it
// runs from a resumed position, its evaluation cadence and loss window, the
// scheduler stepped after each step (the status carries the rate the step
// used), --stop-after, the interrupt flag, a resumed evaluation still due,
// the metric (best, plateau, early stopping, the best weights loaded back),
// and the curves' JSON round trip.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "train_loop.h"

using namespace ember;

TEST_CASE("run_loop: steps, evaluation cadence, loss window and the scheduler's rates") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{1.0});
  optim::StepLR sched(opt, 2, 0.5);  // 1, 1, 0.5, 0.5, 0.25, ...
  std::vector<int64_t> steps, evals, windows;
  std::vector<double> rates;
  app::Stopwatch clock(10.0, 0.0);
  const app::LoopEnd end =
      app::run_loop({.start = 1, .total = 7, .eval_every = 3, .progress = false, .scheduler = &sched},
                    {.train_step =
                         [&](int64_t step) {
                           steps.push_back(step);
                           return static_cast<double>(step);
                         },
                     .status =
                         [&](const app::LoopStatus& s) {
                           rates.push_back(s.lr);
                           return std::string();
                         },
                     .evaluate =
                         [&](const app::LoopStatus& s) {
                           evals.push_back(s.done);
                           windows.push_back(s.window_steps);
                           if (s.done == 3) CHECK(s.window_loss == 1.0 + 2.0);
                         }},
                    clock);
  CHECK(end == app::LoopEnd::Finished);
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(evals == std::vector<int64_t>{3, 6, 7});                    // the cadence, and after the last step
  CHECK(windows == std::vector<int64_t>{2, 3, 1});                  // losses since the previous evaluation
  CHECK(rates == std::vector<double>{1, 1, 0.5, 0.5, 0.25, 0.25});  // the scheduler starts at epoch 0, not `start`
  CHECK(sched.last_epoch() == 6);
  CHECK(clock.seconds() >= 10.0);  // a resumed clock goes on from what it was given
}

TEST_CASE("run_loop: --stop-after saves and stops, except at the last step") {
  int saved = 0;
  int64_t ran = 0;
  app::Stopwatch clock;
  const app::LoopCallbacks cb{.train_step = [&](int64_t) { return static_cast<double>(++ran); },
                              .save_and_stop =
                                  [&](const app::LoopStatus& s) {
                                    ++saved;
                                    CHECK(s.done == 4);
                                    CHECK(s.run_steps == 4);
                                  }};
  CHECK(app::run_loop({.total = 10, .stop_after = 4, .progress = false}, cb, clock) == app::LoopEnd::Stopped);
  CHECK(ran == 4);
  CHECK(saved == 1);
  ran = 0;
  CHECK(app::run_loop({.start = 8, .total = 10, .stop_after = 10, .progress = false}, cb, clock) ==
        app::LoopEnd::Finished);
  CHECK(ran == 2);
  CHECK(saved == 1);
  CHECK(clock.cpu_seconds() >= 0);
}

TEST_CASE("run_loop: the interrupt flag saves and stops after the step that saw it, before its evaluation") {
  std::atomic<bool> flag = false;
  std::vector<int64_t> steps, evals;
  int saved = 0;
  app::Stopwatch clock;
  const app::LoopEnd end =
      app::run_loop({.total = 10, .eval_every = 2, .stop_after = 6, .progress = false, .interrupt = &flag},
                    {.train_step =
                         [&](int64_t step) {
                           steps.push_back(step);
                           if (step == 3) flag = true;  // as a signal handler would, during step 3
                           return 1.0;
                         },
                     .evaluate = [&](const app::LoopStatus& s) { evals.push_back(s.done); },
                     .save_and_stop =
                         [&](const app::LoopStatus& s) {
                           ++saved;
                           CHECK(s.interrupted);
                           CHECK(s.done == 4);
                         }},
                    clock);
  CHECK(end == app::LoopEnd::Interrupted);
  CHECK(steps == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(evals == std::vector<int64_t>{2});  // step 4's evaluation is left to the resumed run
  CHECK(saved == 1);
}

TEST_CASE("catch_interrupts: SIGUSR1 (as Ctrl-C) raises the flag and puts SIGINT's default handler back") {
  const std::atomic<bool>& flag = app::catch_interrupts();
  CHECK_FALSE(flag.load());
  std::raise(SIGUSR1);
  CHECK(flag.load());
  const bool default_back = std::signal(SIGINT, SIG_DFL) == SIG_DFL;
  CHECK(default_back);  // a second Ctrl-C would end the program
  std::signal(SIGUSR1, SIG_DFL);
}

TEST_CASE("run_loop: a run resumed with its evaluation due evaluates first, then honours --stop-after") {
  std::vector<int64_t> steps, evals;
  int stopped = 0;
  app::Stopwatch clock;
  const app::LoopCallbacks cb{.train_step =
                                  [&](int64_t step) {
                                    steps.push_back(step);
                                    return 1.0;
                                  },
                              .evaluate = [&](const app::LoopStatus& s) { evals.push_back(s.done); },
                              .save_and_stop =
                                  [&](const app::LoopStatus& s) {
                                    ++stopped;
                                    CHECK_FALSE(s.interrupted);
                                  }};
  CHECK(app::run_loop({.start = 4, .total = 8, .eval_every = 2, .progress = false, .evaluation_due = true}, cb,
                      clock) == app::LoopEnd::Finished);
  CHECK(evals == std::vector<int64_t>{4, 6, 8});
  CHECK(steps == std::vector<int64_t>{4, 5, 6, 7});
  steps.clear(), evals.clear();
  CHECK(app::run_loop(
            {.start = 4, .total = 8, .eval_every = 2, .stop_after = 4, .progress = false, .evaluation_due = true}, cb,
            clock) == app::LoopEnd::Stopped);
  CHECK(evals == std::vector<int64_t>{4});
  CHECK(steps.empty());
  CHECK(stopped == 1);
  // Saved after the very last step: the evaluation alone is left.
  evals.clear();
  CHECK(app::run_loop({.start = 8, .total = 8, .eval_every = 2, .progress = false, .evaluation_due = true}, cb,
                      clock) == app::LoopEnd::Finished);
  CHECK(evals == std::vector<int64_t>{8});
  CHECK(steps.empty());
}

TEST_CASE("run_loop: the metric's best, the plateau on it, early stopping and the best weights loaded back") {
  nn::Linear layer(1, 1, false);
  optim::SGD opt(layer.parameters(), optim::SGDOptions{1.0});
  optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 1});
  const std::vector<double> metric = {3, 2, 2.5, 2, 4, 1};  // step 2 is the best before patience runs out
  std::vector<int64_t> best_steps;
  std::vector<double> rates;
  int64_t early = 0;
  app::Stopwatch clock;
  const app::LoopEnd end = app::run_loop(
      {.total = 6, .eval_every = 1, .progress = false, .plateau = &plateau, .patience = 3, .keep_best = &layer},
      {.train_step =
           [&](int64_t step) {
             NoGradGuard ng;
             layer.weight.fill_(static_cast<double>(step + 1));  // the weights of step k are k
             return 0.0;
           },
       .metric = [&](const app::LoopStatus& s) { return metric[static_cast<size_t>(s.done - 1)]; },
       .evaluate =
           [&](const app::LoopStatus& s) {
             best_steps.push_back(s.best_step);
             rates.push_back(opt.param_groups()[0].lr);  // after the plateau's step
             if (s.early_stop) early = s.done;
             CHECK(s.best_metric == (s.done == 1 ? 3.0 : 2.0));
           }},
      clock);
  CHECK(end == app::LoopEnd::EarlyStopped);
  CHECK(early == 5);  // 2.5, 2 (equal is no better) and 4: three evaluations without a better one
  CHECK(best_steps == std::vector<int64_t>{1, 2, 2, 2, 2});
  CHECK(rates == std::vector<double>{1, 1, 1, 0.5, 0.5});  // a cut at the second evaluation without improvement
  CHECK(layer.weight.item() == 2.0);                       // step 2's weights, loaded back
}

TEST_CASE("run_loop: the plateau on the training loss, and the options that need a metric refused without one") {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{1.0});
  optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 0});
  app::Stopwatch clock;
  const std::vector<double> loss = {4, 2, 6, 0, 0, 0};  // window means over two steps: 3, 3, 0
  std::vector<double> rates;
  CHECK(app::run_loop({.total = 6, .eval_every = 2, .progress = false, .plateau = &plateau, .plateau_on_loss = true},
                      {.train_step = [&](int64_t step) { return loss[static_cast<size_t>(step)]; },
                       .evaluate = [&](const app::LoopStatus&) { rates.push_back(opt.param_groups()[0].lr); }},
                      clock) == app::LoopEnd::Finished);
  CHECK(rates == std::vector<double>{1, 0.5, 0.5});  // 3 then 3 (no better: cut), then 0
  const app::LoopCallbacks no_metric{.train_step = [](int64_t) { return 0.0; }};
  CHECK_THROWS_AS(app::run_loop({.progress = false, .plateau = &plateau}, no_metric, clock), std::invalid_argument);
  CHECK_THROWS_AS(app::run_loop({.progress = false, .patience = 2}, no_metric, clock), std::invalid_argument);
}

TEST_CASE("MetricsHistory: recorded series, JSON round trip, refused when damaged") {
  app::MetricsHistory h("iters");
  h.record(3, {{"train_loss", 2.5}, {"val_loss", 2.75}});
  h.record(6, {{"train_loss", 1.5}, {"val_loss", 1.625}});
  CHECK(h.x() == std::vector<double>{3, 6});
  CHECK(h.at("val_loss") == std::vector<double>{2.75, 1.625});
  CHECK_THROWS_AS(h.at("accuracy"), std::out_of_range);
  const nlohmann::json j = h.to_json();
  CHECK(j.dump() == R"({"iters":[3.0,6.0],"train_loss":[2.5,1.5],"val_loss":[2.75,1.625]})");
  app::MetricsHistory back("iters");
  back.from_json(j, {"train_loss", "val_loss"});
  CHECK(back.to_json() == j);
  nlohmann::json short_series = j;
  short_series["val_loss"] = {1.0};
  CHECK_THROWS_AS(back.from_json(short_series, {"train_loss", "val_loss"}), std::out_of_range);
  CHECK_THROWS(back.from_json(j, {"train_loss", "accuracy"}));
  CHECK(back.to_json() == j);  // unchanged by a refused read
}

TEST_CASE("MetricsHistory: NaN and Inf losses are stored as strings and read back") {
  app::MetricsHistory h("iters");
  h.record(2, {{"train_loss", std::nan("")}, {"val_loss", INFINITY}});
  h.record(4, {{"train_loss", -INFINITY}, {"val_loss", 0.5}});
  const nlohmann::json j = h.to_json();
  CHECK(j.dump() == R"({"iters":[2.0,4.0],"train_loss":["nan","-inf"],"val_loss":["inf",0.5]})");
  app::MetricsHistory back("iters");
  back.from_json(nlohmann::json::parse(j.dump()), {"train_loss", "val_loss"});
  CHECK(std::isnan(back.at("train_loss")[0]));
  CHECK(back.at("train_loss")[1] == -INFINITY);
  CHECK(back.at("val_loss") == std::vector<double>{INFINITY, 0.5});
  // What nlohmann writes for NaN (null), and other strings, are no numbers.
  CHECK_THROWS_AS(back.from_json(nlohmann::json::parse(R"({"iters":[2],"train_loss":[null],"val_loss":[1]})"),
                                 {"train_loss", "val_loss"}),
                  std::out_of_range);
  CHECK_THROWS_AS(back.from_json(nlohmann::json::parse(R"({"iters":[2],"train_loss":["NaN"],"val_loss":[1]})"),
                                 {"train_loss", "val_loss"}),
                  std::out_of_range);
}

TEST_CASE("MetricsHistory: a history saved before its first evaluation reads back empty and grows") {
  app::MetricsHistory h("iters");
  h.from_json(app::MetricsHistory("iters").to_json(), {"train_loss", "val_loss"});
  CHECK(h.x().empty());
  CHECK(h.at("train_loss").empty());
  h.record(3, {{"train_loss", 2.0}, {"val_loss", 2.5}});
  CHECK(h.at("val_loss") == std::vector<double>{2.5});
  CHECK_THROWS(h.from_json(nlohmann::json{{"iters", {1.0}}}, {"train_loss"}));  // points without their series
}
