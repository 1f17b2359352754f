// Optimizer state dicts read back from a checkpoint are checked like flags:
// a damaged value (a NaN moment, a negative second moment, a step count that
// is not a whole number, a negative rate) is refused with a ValueError naming
// the entry, the optimizer is left as it was, and every valid dict still loads.
#include <doctest/doctest.h>

#include <limits>
#include <string>

#include <ember/ember.h>

using namespace ember;

namespace {

// An AdamW (or SGD with momentum) after two steps on sum(p^2): every state entry present.
template <class Opt, class Options>
StateDict trained_state(Options o) {
  Tensor p = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
  Opt opt({p}, o);
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    sum(square(p)).backward();
    opt.step();
  }
  return opt.state_dict();
}

// The dict with entry `name` replaced by `value` (same shape and dtype).
StateDict with(StateDict sd, const std::string& name, const Tensor& value) {
  for (auto& [n, t] : sd)
    if (n == name) t = value;
  return sd;
}

// load_state_dict's ValueError message, or "" when it loads.
template <class Opt>
std::string refusal(Opt& opt, const StateDict& sd) {
  try {
    opt.load_state_dict(sd);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

bool mentions(const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("optim state: Adam refuses damaged moments, step counts and rates, naming the entry") {
  const StateDict good = trained_state<optim::AdamW>(optim::AdamWOptions{});
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor p = tensor({0.0, 0.0, 0.0}, kFloat64).requires_grad_();
  optim::AdamW opt({p});
  REQUIRE(refusal(opt, good).empty());
  CHECK(opt.steps() == 2);

  const Tensor v = tensor({1e-3, 2e-3, 3e-3}, kFloat64);
  CHECK(mentions(refusal(opt, with(good, "state.0.0.exp_avg_sq", tensor({1e-3, -1.0, 3e-3}, kFloat64))),
                 "'state.0.0.exp_avg_sq' holds a negative value"));
  CHECK(mentions(refusal(opt, with(good, "state.0.0.exp_avg_sq", tensor({1e-3, inf, 3e-3}, kFloat64))),
                 "'state.0.0.exp_avg_sq' holds NaN or Inf"));
  CHECK(mentions(refusal(opt, with(good, "state.0.0.exp_avg", tensor({nan, 0.0, 0.0}, kFloat64))),
                 "'state.0.0.exp_avg' holds NaN or Inf"));
  // A zero second moment is a parameter whose gradient was zero: valid.
  CHECK(refusal(opt, with(good, "state.0.0.exp_avg_sq", zeros({3}, kFloat64))).empty());
  CHECK(refusal(opt, with(good, "state.0.0.exp_avg_sq", v)).empty());

  for (double step : {nan, -5.0, 1e300, 2.5, inf})
    CHECK(mentions(refusal(opt, with(good, "step", scalar_tensor(step, kFloat64))), "'step' = "));
  CHECK(refusal(opt, with(good, "step", scalar_tensor(0.0, kFloat64))).empty());
  CHECK(refusal(opt, with(good, "step", scalar_tensor(123456.0, kFloat64))).empty());

  for (const char* k : {"lr", "weight_decay", "initial_lr"})
    for (double bad : {-1.0, -1e6, nan, inf}) {
      const std::string name = std::string("param_groups.0.") + k;
      CHECK(mentions(refusal(opt, with(good, name, scalar_tensor(bad, kFloat64))), "'" + name + "' = "));
    }
  // lr 0 (the end of a schedule decayed to zero) and weight_decay 0 are valid.
  CHECK(refusal(opt, with(good, "param_groups.0.lr", scalar_tensor(0.0, kFloat64))).empty());
  CHECK(refusal(opt, with(good, "param_groups.0.weight_decay", scalar_tensor(0.0, kFloat64))).empty());
}

TEST_CASE("optim state: a refused dict leaves the optimizer unchanged") {
  const StateDict good = trained_state<optim::Adam>(optim::AdamOptions{});
  Tensor p = tensor({0.0, 0.0, 0.0}, kFloat64).requires_grad_();
  optim::Adam opt({p}, optim::AdamOptions{});
  opt.load_state_dict(good);
  const StateDict before = opt.state_dict();
  // The rate is valid and would be set first if loading were not all or nothing.
  StateDict bad = with(good, "param_groups.0.lr", scalar_tensor(0.5, kFloat64));
  bad = with(bad, "state.0.0.exp_avg_sq", tensor({-1.0, -1.0, -1.0}, kFloat64));
  CHECK_THROWS_AS(opt.load_state_dict(bad), ValueError);
  const StateDict after = opt.state_dict();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].first == before[i].first);
    CHECK(allclose(after[i].second, before[i].second, 0, 0));
  }
}

TEST_CASE("optim state: SGD refuses a non-finite momentum buffer and negative rates") {
  const StateDict good = trained_state<optim::SGD>(optim::SGDOptions{0.1, 0.9});
  Tensor p = tensor({0.0, 0.0, 0.0}, kFloat64).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions{0.1, 0.9});
  REQUIRE(refusal(opt, good).empty());
  CHECK(mentions(refusal(opt, with(good, "state.0.0.momentum_buffer",
                                   tensor({0.0, -std::numeric_limits<double>::infinity(), 0.0}, kFloat64))),
                 "'state.0.0.momentum_buffer' holds NaN or Inf"));
  // A momentum buffer may be negative: it is a running sum of gradients.
  CHECK(refusal(opt, with(good, "state.0.0.momentum_buffer", tensor({-1.0, -2.0, 0.5}, kFloat64))).empty());
  CHECK(mentions(refusal(opt, with(good, "param_groups.0.weight_decay", scalar_tensor(-1e6, kFloat64))),
                 "'param_groups.0.weight_decay' = "));
  CHECK(mentions(refusal(opt, with(good, "param_groups.0.lr", scalar_tensor(-0.1, kFloat64))),
                 "'param_groups.0.lr' = -0.1"));
}
