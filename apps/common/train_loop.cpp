// The demos' shared training loop and clocks (apps/common/train_loop.h).
#include "train_loop.h"

#include <time.h>

#include <csignal>
#include <optional>
#include <stdexcept>

#include "json_number.h"
#include "progress.h"

namespace ember::app {

namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // async-signal-safe
}
}  // namespace

const std::atomic<bool>& catch_interrupts() {
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGUSR1, on_interrupt);
  return g_interrupted;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void MetricsHistory::record(double x, std::initializer_list<std::pair<const char*, double>> values) {
  x_.push_back(x);
  for (const auto& [name, v] : values) {
    auto it = series_.begin();
    while (it != series_.end() && it->first != name) ++it;
    if (it == series_.end()) {
      series_.emplace_back(name, std::vector<double>());
      it = series_.end() - 1;
    }
    it->second.push_back(v);
  }
}

const std::vector<double>& MetricsHistory::at(const std::string& name) const {
  for (const auto& [n, v] : series_)
    if (n == name) return v;
  throw std::out_of_range("no series '" + name + "' in the metrics history");
}

// The values through json_number: a NaN loss is stored as "nan", which reads
// back, where nlohmann would write null, which does not.
nlohmann::json MetricsHistory::to_json() const {
  const auto numbers = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(json_number(x));
    return a;
  };
  nlohmann::ordered_json j = {{x_name_, numbers(x_)}};
  for (const auto& [n, v] : series_) j[n] = numbers(v);
  return j;
}

void MetricsHistory::from_json(const nlohmann::json& j, const std::vector<std::string>& names) {
  const auto numbers = [&](const std::string& name) {
    std::vector<double> v;
    for (const nlohmann::json& e : j.at(name).get_ref<const nlohmann::json::array_t&>()) {
      const std::optional<double> x = json_number_value(e);
      if (!x) throw std::out_of_range("series '" + name + "' holds a value that is not a number");
      v.push_back(*x);
    }
    return v;
  };
  std::vector<double> x = numbers(x_name_);
  std::vector<std::pair<std::string, std::vector<double>>> series;
  for (const std::string& n : names) {
    // A run saved before its first evaluation recorded no point and no series.
    series.emplace_back(n, x.empty() && !j.contains(n) ? std::vector<double>() : numbers(n));
    if (series.back().second.size() != x.size())
      throw std::out_of_range("series '" + n + "' has " + std::to_string(series.back().second.size()) + " values for " +
                              std::to_string(x.size()) + " points");
  }
  x_ = std::move(x);
  series_ = std::move(series);
}

LoopEnd run_loop(const LoopOptions& o, const LoopCallbacks& cb, Stopwatch& clock) {
  if (!cb.metric && ((o.plateau && !o.plateau_on_loss) || o.patience > 0 || o.keep_best))
    throw std::invalid_argument("run_loop: the plateau scheduler, early stopping and keep_best need a metric callback");
  ProgressBar bar(o.progress);
  LoopStatus s{.done = o.start, .total = o.total, .clock = &clock};
  StateDict best_weights;  // keep_best's copy (detached clones, not the module's handles)
  int64_t since_best = 0;  // evaluations since the best one
  const auto end = [&](LoopEnd e) {
    bar.clear();
    if (!best_weights.empty() && (e == LoopEnd::Finished || e == LoopEnd::EarlyStopped))
      o.keep_best->load_state_dict(best_weights);
    return e;
  };
  // The evaluation and its bookkeeping, in the order the figures depend on:
  // the plateau cuts the rate before `evaluate` records it. Only a metric
  // below the best is an improvement: an equal one (or NaN) counts against
  // the patience.
  const auto evaluation = [&] {
    bar.clear();
    if (cb.metric) {
      s.metric = cb.metric(s);
      if (s.metric < s.best_metric) {
        s.best_metric = s.metric, s.best_step = s.done, since_best = 0;
        if (o.keep_best) {
          best_weights.clear();
          for (const auto& [name, t] : o.keep_best->state_dict()) best_weights.emplace_back(name, t.detach().clone());
        }
      } else if (o.patience > 0 && ++since_best >= o.patience) {
        s.early_stop = true;
      }
    }
    if (o.plateau) {
      const double mean_loss = s.window_steps > 0 ? s.window_loss / static_cast<double>(s.window_steps) : s.loss;
      o.plateau->step(o.plateau_on_loss ? mean_loss : s.metric);
    }
    if (cb.evaluate) cb.evaluate(s);
    s.window_loss = 0, s.window_steps = 0;
  };
  // After step s.done (or at a resumed evaluation_due): evaluate when `due`,
  // then early stopping and --stop-after; a value when the run ends here.
  const auto boundary = [&](bool due) -> std::optional<LoopEnd> {
    if (due) evaluation();
    if (s.early_stop) return end(LoopEnd::EarlyStopped);
    if (o.stop_after > 0 && s.done == o.stop_after && s.done != o.total) {
      bar.clear();
      if (cb.save_and_stop) cb.save_and_stop(s);
      return end(LoopEnd::Stopped);
    }
    return std::nullopt;
  };

  if (o.evaluation_due)
    if (const auto e = boundary(true)) return *e;
  for (int64_t step = o.start; step < o.total; ++step) {
    clock.start();
    s.lr = o.scheduler ? o.scheduler->get_last_lr().at(0) : 0.0;
    s.loss = cb.train_step(step);
    if (o.scheduler) o.scheduler->step();
    clock.stop();
    s.done = step + 1;
    ++s.run_steps;
    s.window_loss += s.loss, ++s.window_steps;
    if (cb.status)
      bar.update(fmt("%s %lld/%lld", o.unit.c_str(), static_cast<long long>(s.done), static_cast<long long>(o.total)),
                 static_cast<long>(s.done), static_cast<long>(o.total), cb.status(s));
    if (o.interrupt && o.interrupt->load()) {
      bar.clear();
      s.interrupted = true;
      if (cb.save_and_stop) cb.save_and_stop(s);
      return end(LoopEnd::Interrupted);
    }
    if (const auto e = boundary((o.eval_every > 0 && s.done % o.eval_every == 0) || s.done == o.total)) return *e;
  }
  return end(LoopEnd::Finished);
}

}  // namespace ember::app
