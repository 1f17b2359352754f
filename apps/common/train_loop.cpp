// The demos' shared training loop and clocks (apps/common/train_loop.h).
#include "train_loop.h"

#include <time.h>

#include <stdexcept>

#include "progress.h"

namespace ember::app {

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

nlohmann::json MetricsHistory::to_json() const {
  nlohmann::ordered_json j = {{x_name_, x_}};
  for (const auto& [n, v] : series_) j[n] = v;
  return j;
}

void MetricsHistory::from_json(const nlohmann::json& j, const std::vector<std::string>& names) {
  std::vector<double> x = j.at(x_name_).get<std::vector<double>>();
  std::vector<std::pair<std::string, std::vector<double>>> series;
  for (const std::string& n : names) {
    series.emplace_back(n, j.at(n).get<std::vector<double>>());
    if (series.back().second.size() != x.size())
      throw std::out_of_range("series '" + n + "' has " + std::to_string(series.back().second.size()) + " values for " +
                              std::to_string(x.size()) + " points");
  }
  x_ = std::move(x);
  series_ = std::move(series);
}

LoopEnd run_loop(const LoopOptions& o, const LoopCallbacks& cb, Stopwatch& clock) {
  ProgressBar bar(o.progress);
  LoopStatus s{.total = o.total, .clock = &clock};
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
    const bool last = s.done == o.total;
    if ((o.eval_every > 0 && s.done % o.eval_every == 0) || last) {
      bar.clear();
      if (cb.evaluate) cb.evaluate(s);
      s.window_loss = 0, s.window_steps = 0;
    }
    if (o.stop_after > 0 && s.done == o.stop_after && !last) {
      bar.clear();
      if (cb.save_and_stop) cb.save_and_stop(s);
      return LoopEnd::Stopped;
    }
  }
  bar.clear();
  return LoopEnd::Finished;
}

}  // namespace ember::app
