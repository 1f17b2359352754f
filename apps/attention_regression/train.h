// How the attention_regression models train: shuffled mini-batches, MSE,
// Adam, optional gradient clipping (each batch's step a CUDA graph with
// --cuda-graph: app::GraphStep), an epoch per step of app::run_loop,
// which steps ReduceLROnPlateau on the validation (or training) loss and
// stops early, loading back the best weights. Records the per-epoch history
// the loss chart draws.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "app.h"
#include "graph_step.h"
#include "precision.h"
#include "progress.h"
#include "train_loop.h"

namespace ar {

using namespace ember;

struct Recipe {
  int epochs = 200;
  int64_t batch = 32;
  double lr = 1e-3, weight_decay = 0.0;
  double clip = 0.0;  // max gradient norm; 0 = no clipping
  double plateau_factor = 0.5;
  int plateau_patience = 10;
  double min_lr = 0.0;
  bool plateau_on_train = false;  // the notes' single-head model steps on the training loss
  int early_stop = 0;             // patience in epochs; 0 = train all epochs
  int print_every = 10;
  bool quiet = false;
  std::string precision = "fp32";  // --precision (apps/common/precision.h)
  bool cuda_graph = false;         // --cuda-graph: each full batch's step replayed as a CUDA graph (graph_step.h)
};

struct History {
  std::vector<double> train, val, lr;
  int epochs_run = 0, best_epoch = 0;
  double seconds = 0;
  int64_t graph_replays = 0;  // steps run as replays of the captured graph (--cuda-graph)
};

// x_val may be undefined: then there is no validation (val = train loss).
inline History fit(nn::Module& model, const Tensor& x, const Tensor& y, const Tensor& x_val, const Tensor& y_val,
                   const Recipe& r, Generator& g) {
  optim::Adam opt(model.parameters(), {.lr = r.lr, .weight_decay = r.weight_decay});
  optim::ReduceLROnPlateau plateau(opt,
                                   {.factor = r.plateau_factor, .patience = r.plateau_patience, .min_lr = r.min_lr});
  ember::app::ProgressBar bar(!r.quiet);  // the batches of an epoch
  ember::app::MixedPrecision mp(r.precision, x.device().type);

  // One batch's step: zero_grad, forward and loss (under autocast), backward, clipping, Adam.
  ember::app::GraphStep batch_step(r.cuda_graph, [&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss;
    {
      const AutocastGuard region = mp.region();
      loss = mse_loss(model(in[0]), in[1]);
    }
    mp.backward_step(loss, opt, model.parameters(), r.clip);
    return loss;
  });

  History h;
  const int64_t n = x.size(0), nbatches = (n + r.batch - 1) / r.batch;
  // train_seconds is the whole loop's wall time, validation and the best
  // weights' copies included; the loop's own clock counts the steps alone.
  const ember::app::Timer clock;
  ember::app::Stopwatch steps;
  ember::app::run_loop(
      {.total = r.epochs,
       .eval_every = 1,
       .unit = "epoch",
       .progress = false,
       .plateau = &plateau,
       .plateau_on_loss = r.plateau_on_train,
       .patience = r.early_stop,
       .keep_best = r.early_stop > 0 ? &model : nullptr},
      {.train_step =
           [&](int64_t step) {
             const int64_t epoch = step + 1;
             model.train();
             const Tensor perm = randperm(n, &g);
             double total = 0;
             for (int64_t b = 0; b < nbatches; ++b) {
               const Tensor idx =
                   perm.narrow(0, b * r.batch, std::min<int64_t>(r.batch, n - b * r.batch)).to(x.device());
               const double l = batch_step({index_select(x, 0, idx), index_select(y, 0, idx)}).item();
               // Stop before anything is written: the previous run's model.safetensors
               // stays as it was (outputs are written only after training).
               EMBER_CHECK(
                   std::isfinite(l), ValueError, "the training loss became ", l, " at epoch ", epoch, ", batch ", b + 1,
                   "; nothing was saved. Run again with EMBER_DETECT_ANOMALY=1 to name the op that produced it");
               total += l;
               bar.update(ember::app::fmt("epoch %4lld/%d", static_cast<long long>(epoch), r.epochs), b + 1, nbatches,
                          ember::app::fmt("loss %.5f", total / static_cast<double>(b + 1)));
             }
             return total / static_cast<double>(nbatches);
           },
       .metric =
           [&](const ember::app::LoopStatus& s) {
             if (!x_val.defined()) return s.loss;
             model.eval();
             NoGradGuard ng;
             const AutocastGuard region = mp.region();  // validated as it will be used
             return mse_loss(model(x_val), y_val).item();
           },
       .evaluate =
           [&](const ember::app::LoopStatus& s) {
             const int epoch = static_cast<int>(s.done);
             h.train.push_back(s.loss);
             h.val.push_back(s.metric);
             h.lr.push_back(opt.param_groups()[0].lr);  // after the plateau's cut
             h.epochs_run = epoch;
             h.best_epoch = static_cast<int>(s.best_step);
             bar.clear();
             if (!r.quiet && (epoch % r.print_every == 0 || epoch == 1 || s.early_stop || epoch == r.epochs))
               std::printf("epoch %4d  train %.6f  val %.6f  lr %.2e  %6.1fs\n", epoch, s.loss, s.metric, h.lr.back(),
                           clock.seconds());
             if (s.early_stop && !r.quiet)
               std::printf("early stop at epoch %d: no better validation loss since epoch %d\n", epoch, h.best_epoch);
           }},
      steps);
  h.seconds = clock.seconds();
  h.graph_replays = batch_step.replays();
  model.eval();
  return h;
}

}  // namespace ar
