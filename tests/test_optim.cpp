// Optimizers and gradient clipping against PyTorch 1.13: five steps on a
// small problem must give PyTorch's parameters (tools/reference_optim.py).
#include <doctest/doctest.h>

#include <functional>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::check_close;

namespace {

const Tensor kC = tensor({{1.0, 2.0, 0.5}, {0.3, 1.5, 2.5}}, kFloat64);
const Tensor kD = tensor({{0.1, -0.2, 0.05}, {0.0, 0.3, -0.1}}, kFloat64);

// Runs 5 steps of loss = sum(c p^2 + d p^3) + 3 sum(q^2); returns [p..., q...].
Tensor run(const std::function<std::unique_ptr<optim::Optimizer>(Tensor&, Tensor&)>& make) {
  Tensor p = tensor({{0.5, -1.0, 2.0}, {1.5, -0.3, 0.7}}, kFloat64).requires_grad_();
  Tensor q = tensor({0.2, -0.4}, kFloat64).requires_grad_();
  auto opt = make(p, q);
  for (int i = 0; i < 5; ++i) {
    opt->zero_grad();
    Tensor loss = add(sum(add(mul(kC, square(p)), mul(kD, pow(p, 3.0)))), mul(sum(square(q)), 3.0));
    loss.backward();
    opt->step();
  }
  return cat({p.detach().reshape({-1}), q.detach()});
}

}  // namespace

TEST_CASE("optim: SGD with momentum, dampening and weight decay matches PyTorch") {
  const Tensor r = run([](Tensor& p, Tensor& q) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{p, q}, optim::SGDOptions{0.05, 0.9, 0.1, 0.01, false});
  });
  check_close(r,
              {-0.013175543576, 0.62715983037, 0.646668531589, 0.976404817882, 0.07242757856, -0.463631933751,
               -0.154152158642, 0.308304317284},
              1e-10);
}

TEST_CASE("optim: SGD nesterov matches PyTorch") {
  const Tensor r = run([](Tensor& p, Tensor& q) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{p, q}, optim::SGDOptions{0.05, 0.9, 0.0, 0.0, true});
  });
  check_close(r,
              {-0.06885328355, 0.450635260443, 0.388861219254, 0.830602430989, 0.08893887319, -0.282200607376,
               -0.06957044794, 0.13914089588},
              1e-10);
}

TEST_CASE("optim: Adam with L2 weight decay matches PyTorch") {
  const Tensor r = run([](Tensor& p, Tensor& q) {
    return std::make_unique<optim::Adam>(std::vector<Tensor>{p, q}, optim::AdamOptions{0.1, 0.8, 0.95, 1e-6, 0.01});
  });
  check_close(r,
              {0.037502547034, -0.512681170969, 1.505506207827, 1.006368669895, 0.100984728984, 0.218775913656,
               -0.093442070723, 0.044584917825},
              1e-10);
}

TEST_CASE("optim: AdamW with two parameter groups matches PyTorch") {
  const Tensor r = run([](Tensor& p, Tensor& q) {
    optim::AdamWOptions o;
    o.lr = 0.1;
    o.weight_decay = 0.1;
    std::vector<optim::ParamGroup> groups = {{{p}}, {{q}, /*lr=*/0.01, /*weight_decay=*/0.0}};
    return std::make_unique<optim::AdamW>(groups, o);
  });
  check_close(r,
              {0.016957235566, -0.471278443847, 1.416559463538, 0.941585644014, 0.118435508068, 0.190965022613,
               0.150295578432, -0.350126753108},
              1e-10);
}

TEST_CASE("optim: clip_grad_norm_ returns the norm and rescales like PyTorch") {
  Tensor p = tensor({{0.5, -1.0, 2.0}, {1.5, -0.3, 0.7}}, kFloat64).requires_grad_();
  sum(mul(kC, square(p))).backward();
  const double n = optim::clip_grad_norm_({p}, 1.0).item<double>();
  CHECK(n == doctest::Approx(5.905082556578).epsilon(1e-12));
  check_close(p.grad(),
              {0.169345613897, -0.677382455587, 0.338691227793, 0.152411052507, -0.152411052507, 0.592709648638},
              1e-10);
  optim::clip_grad_value_({p}, 0.2);
  check_close(p.grad(), {0.169345613897, -0.2, 0.2, 0.152411052507, -0.152411052507, 0.2}, 1e-10);
  CHECK_THROWS_AS(optim::SGD({p}, optim::SGDOptions{-1.0}), ValueError);
}

TEST_CASE("optim: state round trip resumes exactly, weight_decay_groups splits in one line") {
  auto loss_of = [](const Tensor& p) { return sum(add(mul(kC, square(p)), mul(kD, pow(p, 3.0)))); };
  Tensor a = tensor({{0.5, -1.0, 2.0}, {1.5, -0.3, 0.7}}, kFloat64).requires_grad_();
  Tensor b = a.detach().clone().requires_grad_();
  optim::AdamW oa({a}), ob({b});
  for (int i = 0; i < 3; ++i) {
    oa.zero_grad();
    loss_of(a).backward();
    oa.step();
  }
  {
    NoGradGuard g;
    b.copy_(a);
  }
  ob.load_state_dict(oa.state_dict());
  CHECK(ob.steps() == 3);
  for (int i = 0; i < 2; ++i) {
    oa.zero_grad();
    ob.zero_grad();
    loss_of(a).backward();
    loss_of(b).backward();
    oa.step();
    ob.step();
  }
  CHECK(allclose(a, b, 0, 0));
  // SGD momentum buffers too.
  Tensor c = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  optim::SGD sc({c}, optim::SGDOptions{0.1, 0.9});
  sum(square(c)).backward();
  sc.step();
  Tensor d = c.detach().clone().requires_grad_();
  optim::SGD sd({d}, optim::SGDOptions{0.1, 0.9});
  sd.load_state_dict(sc.state_dict());
  c.zero_grad();
  sum(square(c)).backward();
  sum(square(d)).backward();
  sc.step();
  sd.step();
  CHECK(allclose(c, d, 0, 0));

  nn::Linear lin(4, 3);
  nn::LayerNorm ln({3});
  StateDict named = lin.named_parameters();
  for (auto& kv : ln.named_parameters()) named.push_back(kv);
  named.emplace_back("cls_token", zeros({1, 1, 3}));
  const auto groups = optim::weight_decay_groups(named, 0.05);
  CHECK(groups[0].params.size() == 1);  // the Linear weight
  CHECK(groups[0].weight_decay == 0.05);
  CHECK(groups[1].params.size() == 4);  // bias, norm weight/bias, cls_token
  CHECK(groups[1].weight_decay == 0.0);
}
