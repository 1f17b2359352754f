// Ember's benchmark runner. For now one workload: the framework overhead of
// one op on tiny tensors (what Ember spends around a kernel that does
// almost no work): forward without autograd, forward that records the graph,
// and forward + backward. The training-step workloads arrive with the demo
// models (apps/bench issue).
//
//   build/bin/bench [--workload overhead] [--iters N] [--trials T] [--threads K]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

using namespace ember;

namespace {

// Median over trials of the mean time per iteration, in microseconds.
double time_us(int iters, int trials, const std::function<void()>& body) {
  for (int i = 0; i < iters / 10; ++i) body();  // warm-up
  std::vector<double> per;
  for (int t = 0; t < trials; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) body();
    const auto t1 = std::chrono::steady_clock::now();
    per.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

void overhead(int iters, int trials) {
  const Tensor a = tensor({1.0}), b = tensor({2.0});
  const Tensor ga = tensor({1.0}).requires_grad_(), gb = tensor({2.0}).requires_grad_();
  struct Row {
    const char* name;
    std::function<void()> body;
  };
  const std::vector<Row> rows = {
      {"add, forward, no grad", [&] { Tensor c = add(a, b); }},
      {"mul, forward, no grad", [&] { Tensor c = mul(a, b); }},
      {"exp, forward, no grad", [&] { Tensor c = exp(a); }},
      {"add, forward, recording graph", [&] { Tensor c = add(ga, gb); }},
      {"mul, forward, recording graph", [&] { Tensor c = mul(ga, gb); }},
      {"add, forward + backward", [&] { add(ga, gb).backward(); }},
      {"mul, forward + backward", [&] { mul(ga, gb).backward(); }},
  };
  std::printf("framework overhead per op, 1-element float32 tensors, %d thread(s)\n", num_threads());
  std::printf("%-34s %10s\n", "op", "us/op");
  for (const Row& r : rows) std::printf("%-34s %10.3f\n", r.name, time_us(iters, trials, r.body));
}

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "overhead";
  int iters = 200000, trials = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--workload") workload = value();
    else if (arg == "--iters") iters = std::max(1, std::atoi(value()));
    else if (arg == "--trials") trials = std::max(1, std::atoi(value()));
    else if (arg == "--threads") set_num_threads(std::max(1, std::atoi(value())));
    else {
      std::fprintf(stderr, "usage: bench [--workload overhead] [--iters N] [--trials T] [--threads K]\n");
      return 2;
    }
  }
  if (workload != "overhead") {
    std::fprintf(stderr, "bench: unknown workload '%s' (available: overhead)\n", workload.c_str());
    return 2;
  }
  overhead(iters, trials);
  return 0;
}
