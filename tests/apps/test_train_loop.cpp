// The demos' shared training loop (apps/common/train_loop.h): the steps it
// runs from a resumed position, its evaluation cadence and loss window, the
// scheduler stepped after each step (the status carries the rate the step
// used), --stop-after, and the curves' JSON round trip.
#include <doctest/doctest.h>

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
