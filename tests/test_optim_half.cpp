// Optimizer steps on bfloat16 and float16 parameters on the CPU: Adam, AdamW
// and SGD keep their state in the parameter's dtype, compute in float32 and
// round each stored value once. Each step is checked two ways. Against the
// documented float32 formula written out here, rounded: within one unit in
// the last place everywhere and equal in all but one element in a thousand
// (GCC contracts a * b + c into one FMA in C++ by default, and where it
// does differs between the kernel's vector loop and this scalar one, which
// moves a float32 result by an ulp and a 16-bit one only near a tie). And
// against a float64 step from the same 16-bit inputs: within one 16-bit
// rounding plus float32's own error (2^-21 of the terms' magnitudes, which
// counts where the terms nearly cancel, as in a first moment whose gradient
// changed sign). Then clip_grad_norm_'s float64 sum
// of squares, stochastic rounding (unbiased where round-to-nearest stalls,
// reproducible for a seed), a bfloat16 MLP that trains, and state dicts
// with 16-bit moments.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

// A value of dt (bfloat16 or float16) rounded from x, to nearest even.
float round_to(DType dt, double x) {
  return dt == kBFloat16 ? static_cast<float>(bfloat16(x)) : static_cast<float>(float16(x));
}

// Distance in representable 16-bit values between two values of dt.
int ulps(DType dt, float a, float b) {
  const auto key = [&](float f) {
    const uint16_t bits = dt == kBFloat16 ? bfloat16(f).x : float16(f).x;
    return (bits & 0x8000) ? -static_cast<int>(bits & 0x7FFF) : static_cast<int>(bits);
  };
  return std::abs(key(a) - key(b));
}

std::vector<float> values(const Tensor& t) { return t.detach().to(kFloat32).to_vector<float>(); }

// One unit in the last place of dt at |f|.
double ulp_at(DType dt, float f) {
  const float a = std::fabs(f);
  if (dt == kBFloat16) {
    const uint16_t b = bfloat16(a).x;
    return static_cast<double>(static_cast<float>(bfloat16::from_bits(b + 1))) -
           static_cast<float>(bfloat16::from_bits(b));
  }
  const uint16_t b = float16(a).x;
  return static_cast<double>(static_cast<float>(float16::from_bits(b + 1))) - static_cast<float>(float16::from_bits(b));
}

// How the stored values got compare with the float32 formula (f32: its
// results, rounded) and with float64 (f64, unrounded; scale: the sum of the
// magnitudes of the terms that make each value).
struct Mismatch {
  int64_t not_equal = 0, over_one_ulp = 0, off_f64 = 0;
};
void compare(DType dt, const std::vector<float>& got, const std::vector<float>& f32, const std::vector<double>& f64,
             const std::vector<double>& scale, Mismatch& out) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &f32[i], 4) != 0) ++out.not_equal;
    if (ulps(dt, got[i], f32[i]) > 1) ++out.over_one_ulp;
    // One 16-bit rounding, plus float32's own error: a few units of 2^-24
    // of the terms, which dominates where they nearly cancel.
    if (std::fabs(got[i] - f64[i]) > ulp_at(dt, static_cast<float>(f64[i])) + 0x1p-21 * scale[i]) ++out.off_f64;
  }
}

// The parameter of n elements and a fresh gradient for each step, all
// values of dt.
struct Problem {
  Tensor p;
  std::vector<Tensor> grads;
};
Problem problem(DType dt, int64_t n, int steps, uint64_t seed) {
  Generator g(seed);
  Problem pr{randn({n}, {}, &g).to(dt).requires_grad_(), {}};
  for (int s = 0; s < steps; ++s) pr.grads.push_back(mul(randn({n}, {}, &g), 0.5).to(dt));
  return pr;
}

}  // namespace

TEST_CASE("optim half: Adam and AdamW on 16-bit parameters round the float32 formula once per value") {
  // 70,000 elements: several blocks of the pool and of the kernel, and a tail.
  for (DType dt : {kBFloat16, kFloat16})
    for (bool decoupled : {false, true}) {
      const std::string label = std::string(dtype_name(dt)) + (decoupled ? " AdamW" : " Adam");
      INFO(label);
      const int64_t n = 70000;
      const int steps = 3;
      Problem pr = problem(dt, n, steps, decoupled ? 11 : 12);
      const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-6, wd = 0.1;
      std::unique_ptr<optim::Optimizer> opt;
      if (decoupled)
        opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{pr.p}, optim::AdamWOptions{lr, b1, b2, eps, wd});
      else
        opt = std::make_unique<optim::Adam>(std::vector<Tensor>{pr.p}, optim::AdamOptions{lr, b1, b2, eps, wd});
      std::vector<float> m(n, 0.0f), v(n, 0.0f);  // the stored moments, as float32 values
      Mismatch pm, mm, vm;
      for (int t = 1; t <= steps; ++t) {
        const std::vector<float> p0 = values(pr.p), g = values(pr.grads[t - 1]);
        pr.p.mutable_grad() = pr.grads[t - 1];
        opt->step();
        const StateDict st = opt->state_dict();
        const Tensor& m_t = st[4].second;
        const Tensor& v_t = st[5].second;
        CHECK(pr.p.dtype() == dt);
        CHECK(m_t.dtype() == dt);
        CHECK(v_t.dtype() == dt);
        // The scalars as the optimizer derives them, rounded to float32.
        const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t)), bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
        const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2), feps = static_cast<float>(eps);
        const float step_size = static_cast<float>(lr / bc1), bc2_sqrt = static_cast<float>(std::sqrt(bc2));
        const float fwd = static_cast<float>(wd), decay = static_cast<float>(1.0 - lr * wd);
        std::vector<float> want_p(n), want_m(n), want_v(n);
        std::vector<double> ref_p(n), ref_m(n), ref_v(n), scale_p(n), scale_m(n), scale_v(n);
        for (int64_t i = 0; i < n; ++i) {
          // float32, the kernels' formula term by term.
          float grad = g[i], param = p0[i];
          if (decoupled)
            param *= decay;
          else
            grad += fwd * param;
          const float mi = fb1 * m[i] + (1.0f - fb1) * grad;
          const float vi = fb2 * v[i] + (1.0f - fb2) * grad * grad;
          want_m[i] = round_to(dt, mi);
          want_v[i] = round_to(dt, vi);
          want_p[i] = round_to(dt, param - step_size * mi / (std::sqrt(vi) / bc2_sqrt + feps));
          // float64 from the same stored inputs.
          double dg = g[i], dp = p0[i];
          if (decoupled)
            dp *= 1.0 - lr * wd;
          else
            dg += wd * dp;
          ref_m[i] = b1 * m[i] + (1 - b1) * dg;
          ref_v[i] = b2 * v[i] + (1 - b2) * dg * dg;
          const double update = (lr / bc1) * ref_m[i] / (std::sqrt(ref_v[i]) / std::sqrt(bc2) + eps);
          ref_p[i] = dp - update;
          // Adam's g + wd p may itself nearly cancel.
          const double gmag = std::fabs(g[i]) + (decoupled ? 0.0 : std::fabs(wd * p0[i]));
          scale_m[i] = std::fabs(b1 * m[i]) + (1 - b1) * gmag;
          scale_v[i] = b2 * v[i] + (1 - b2) * gmag * gmag;
          scale_p[i] = std::fabs(dp) + std::fabs(update) + std::fabs(wd * p0[i]);
        }
        m = values(m_t);
        v = values(v_t);
        compare(dt, values(pr.p), want_p, ref_p, scale_p, pm);
        compare(dt, m, want_m, ref_m, scale_m, mm);
        compare(dt, v, want_v, ref_v, scale_v, vm);
      }
      for (const Mismatch* x : {&pm, &mm, &vm}) {
        const std::string which = x == &pm ? "p" : x == &mm ? "m" : "v";
        INFO(which);
        CHECK(x->not_equal <= n * steps / 1000);
        CHECK(x->over_one_ulp == 0);
        CHECK(x->off_f64 == 0);
      }
    }
}

TEST_CASE(
    "optim half: SGD on 16-bit parameters (momentum, dampening, nesterov, weight decay) rounds p and the buffer once") {
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (DType dt : {kBFloat16, kFloat16})
    for (const Case c :
         {Case{0, 0, 0, false}, Case{0, 0, 0.05, false}, Case{0.9, 0.1, 0.01, false}, Case{0.9, 0, 0.01, true}}) {
      const std::string label = std::string(dtype_name(dt)) + " momentum " + std::to_string(c.momentum) +
                                " dampening " + std::to_string(c.dampening) + " wd " + std::to_string(c.wd) +
                                (c.nesterov ? " nesterov" : "");
      INFO(label);
      const int64_t n = 20000;
      const int steps = 3;
      Problem pr = problem(dt, n, steps, 21);
      const double lr = 0.05;
      optim::SGD opt({pr.p}, optim::SGDOptions{lr, c.momentum, c.dampening, c.wd, c.nesterov});
      std::vector<float> buf(n, 0.0f);
      Mismatch pm, bm;
      for (int t = 1; t <= steps; ++t) {
        const std::vector<float> p0 = values(pr.p), g = values(pr.grads[t - 1]);
        pr.p.mutable_grad() = pr.grads[t - 1];
        opt.step();
        CHECK(pr.p.dtype() == dt);
        const float flr = static_cast<float>(lr), mom = static_cast<float>(c.momentum);
        const float keep = static_cast<float>(1.0 - c.dampening), fwd = static_cast<float>(c.wd);
        std::vector<float> want_p(n), want_b(n);
        std::vector<double> ref_p(n), ref_b(n), scale_p(n), scale_b(n);
        for (int64_t i = 0; i < n; ++i) {
          float d = g[i];  // torch.optim.SGD's formula in float32
          if (c.wd != 0) d = g[i] + fwd * p0[i];
          double dd = g[i] + c.wd * p0[i];  // and in float64
          if (c.momentum != 0) {
            const float b = t == 1 ? d : mom * buf[i] + keep * d;
            ref_b[i] = t == 1 ? dd : c.momentum * buf[i] + (1 - c.dampening) * dd;
            scale_b[i] = std::fabs(c.momentum * buf[i]) + std::fabs(g[i]) + std::fabs(c.wd * p0[i]);
            want_b[i] = round_to(dt, b);
            d = c.nesterov ? d + mom * b : b;
            dd = c.nesterov ? dd + c.momentum * ref_b[i] : ref_b[i];
          }
          want_p[i] = round_to(dt, p0[i] - flr * d);
          ref_p[i] = p0[i] - lr * dd;
          scale_p[i] = std::fabs(p0[i]) + lr * (std::fabs(g[i]) + std::fabs(c.wd * p0[i]) + 2 * std::fabs(ref_b[i]));
        }
        compare(dt, values(pr.p), want_p, ref_p, scale_p, pm);
        if (c.momentum != 0) {
          const StateDict st = opt.state_dict();
          REQUIRE(st.size() == 4);
          CHECK(st[3].second.dtype() == dt);
          buf = values(st[3].second);
          compare(dt, buf, want_b, ref_b, scale_b, bm);
        }
      }
      for (const Mismatch* x : {&pm, &bm}) {
        CHECK(x->not_equal <= n * steps / 1000);
        CHECK(x->over_one_ulp == 0);
        CHECK(x->off_f64 == 0);
      }
    }
}

TEST_CASE("optim half: clip_grad_norm_ sums the squares of 16-bit gradients in float64") {
  for (DType dt : {kBFloat16, kFloat16}) {
    Problem a = problem(dt, 40000, 1, 31), b = problem(dt, 300, 1, 32);
    a.p.mutable_grad() = a.grads[0];
    b.p.mutable_grad() = b.grads[0];
    double want = 0;
    for (const Problem* pr : {&a, &b})
      for (float x : values(pr->grads[0])) want += static_cast<double>(x) * x;
    want = std::sqrt(want);
    const std::vector<float> g0 = values(a.grads[0]);  // before the clip rescales it in place
    const Tensor total = optim::clip_grad_norm_({a.p, b.p}, 1.0);
    CHECK(total.dtype() == kFloat64);
    CHECK(total.item<double>() == doctest::Approx(want).epsilon(1e-13));
    // Rescaled in place, each gradient rounded once in its dtype.
    CHECK(a.p.grad().dtype() == dt);
    const float coef = static_cast<float>(1.0 / (want + 1e-6));
    const std::vector<float> g1 = values(a.p.grad());
    int64_t off = 0;
    for (size_t i = 0; i < g0.size(); ++i) off += g1[i] != round_to(dt, g0[i] * coef);
    CHECK(off == 0);
  }
}

// n bfloat16 weights of 1.0 and a constant gradient of 1: each step asks for
// an update of lr = 1e-4, under half an ulp below 1.0 (2^-9).
struct Tiny {
  Tensor p = ones({4096}, TensorOptions(kBFloat16)).requires_grad_();
  Tiny() { p.mutable_grad() = ones({4096}, TensorOptions(kBFloat16)); }
  double mean() const { return mean_of(p); }
  static double mean_of(const Tensor& t) { return ember::mean(t.detach().to(kFloat64)).item<double>(); }
};

TEST_CASE("optim half: stochastic rounding moves bfloat16 weights that round-to-nearest leaves stalled") {
  const int steps = 100;
  // SGD: p -= 1e-4 each step, 0.99 after 100 in exact arithmetic.
  // Adam with betas 0: m = g, v = g^2, so the update is lr g / (|g| + eps).
  const auto sgd = [](Tiny& w, bool sr, Generator* gen) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{w.p},
                                        optim::SGDOptions{.lr = 1e-4, .stochastic_rounding = sr, .generator = gen});
  };
  const auto adamw = [](Tiny& w, bool sr, Generator* gen) {
    return std::make_unique<optim::AdamW>(
        std::vector<Tensor>{w.p},
        optim::AdamWOptions{
            .lr = 1e-4, .beta1 = 0, .beta2 = 0, .weight_decay = 0, .stochastic_rounding = sr, .generator = gen});
  };
  using Make = std::function<std::unique_ptr<optim::Optimizer>(Tiny&, bool, Generator*)>;
  for (const Make& make : {Make(sgd), Make(adamw)}) {
    Tiny nearest, stochastic, again, other;
    Generator g1(7), g2(7), g3(8);
    auto o1 = make(nearest, false, nullptr), o2 = make(stochastic, true, &g1), o3 = make(again, true, &g2),
         o4 = make(other, true, &g3);
    for (int s = 0; s < steps; ++s)
      for (auto* o : {o1.get(), o2.get(), o3.get(), o4.get()}) o->step();
    CHECK(nearest.mean() == 1.0);  // every update lost
    // The mean of 4096 weights: each walks with steps of at most an ulp
    // (2^-8 below 1.0), a standard deviation under 0.02 after 100 steps, so
    // the mean's is under 0.0004.
    CHECK(std::fabs(stochastic.mean() - (1.0 - steps * 1e-4)) < 0.0015);
    // One counter per 4 elements per step, from the given generator.
    CHECK(g1.offset() == static_cast<uint64_t>(steps) * 1024);
    // The same seed gives the same bits; another seed other bits.
    CHECK(allclose(stochastic.p.detach().to(kFloat32), again.p.detach().to(kFloat32), 0, 0));
    CHECK(!allclose(stochastic.p.detach().to(kFloat32), other.p.detach().to(kFloat32), 0, 0));
  }
  // Without a generator: the default one, reproducible after manual_seed.
  Tiny a, b;
  optim::AdamW oa({a.p}, {.lr = 1e-4, .stochastic_rounding = true}),
      ob({b.p}, {.lr = 1e-4, .stochastic_rounding = true});
  manual_seed(3);
  oa.step();
  manual_seed(3);
  ob.step();
  CHECK(allclose(a.p.detach().to(kFloat32), b.p.detach().to(kFloat32), 0, 0));
}

TEST_CASE("optim half: stochastic rounding refuses float16 parameters and leaves float32 ones as they were") {
  Tensor h = ones({4}, TensorOptions(kFloat16)).requires_grad_();
  h.mutable_grad() = ones({4}, TensorOptions(kFloat16));
  optim::AdamW oh({h}, {.stochastic_rounding = true});
  CHECK(test::contains(test::error_of<DTypeError>([&] { oh.step(); }), "stochastic_rounding"));
  CHECK(allclose(h.detach().to(kFloat32), ones({4}), 0, 0));  // refused before any change
  optim::SGD sh({h}, {.lr = 0.1, .stochastic_rounding = true});
  CHECK_THROWS_AS(sh.step(), DTypeError);
  // float32: the same bits as without the option.
  Problem a = problem(kFloat32, 100, 1, 5), b = problem(kFloat32, 100, 1, 5);
  a.p.mutable_grad() = a.grads[0];
  b.p.mutable_grad() = b.grads[0];
  optim::AdamW oa({a.p}, {.stochastic_rounding = true}), ob({b.p});
  oa.step();
  ob.step();
  CHECK(allclose(a.p, b.p, 0, 0));
}

TEST_CASE("optim half: an MLP converted to bfloat16 trains on the CPU with AdamW") {
  manual_seed(41);
  nn::Sequential model{std::make_shared<nn::Linear>(4, 32), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(32, 1)};
  model.to(kBFloat16);
  Generator g(42);
  const Tensor x = randn({128, 4}, {}, &g);
  const Tensor y = sum(mul(x, tensor({0.5, -1.0, 0.25, 2.0})), {1}, true);
  const Tensor xb = x.to(kBFloat16), yb = y.to(kBFloat16);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int s = 0; s < 150; ++s) {
    opt.zero_grad();
    Tensor loss = mse_loss(model.forward(xb), yb);
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    (s == 0 ? first : last) = loss.item<double>();
  }
  for (const Tensor& p : model.parameters()) CHECK(p.dtype() == kBFloat16);
  CHECK(last < 0.1 * first);
}

TEST_CASE("optim half: state dicts keep 16-bit moments and buffers, and a loaded optimizer resumes bit for bit") {
  for (DType dt : {kBFloat16, kFloat16}) {
    Problem pr = problem(dt, 1000, 5, 51);
    Tensor a = pr.p, b = a.detach().clone().requires_grad_();
    optim::AdamW oa({a}), ob({b});
    optim::SGD sa({a}, {.lr = 0.01, .momentum = 0.9});
    for (int s = 0; s < 3; ++s) {
      a.mutable_grad() = pr.grads[s];
      oa.step();
      sa.step();
    }
    const StateDict st = oa.state_dict();
    CHECK(st[4].first == "state.0.0.exp_avg");
    CHECK(st[4].second.dtype() == dt);
    CHECK(st[5].second.dtype() == dt);
    CHECK(sa.state_dict()[3].second.dtype() == dt);
    {
      NoGradGuard ng;
      b.copy_(a);
    }
    ob.load_state_dict(st);
    optim::SGD sb({b}, {.lr = 0.01, .momentum = 0.9});
    sb.load_state_dict(sa.state_dict());
    CHECK(sb.state_dict()[3].second.dtype() == dt);
    for (int s = 3; s < 5; ++s) {
      a.mutable_grad() = pr.grads[s];
      b.mutable_grad() = pr.grads[s];
      oa.step();
      ob.step();
      sa.step();
      sb.step();
    }
    CHECK(allclose(a.detach().to(kFloat32), b.detach().to(kFloat32), 0, 0));
    CHECK(allclose(ob.state_dict()[4].second.to(kFloat32), oa.state_dict()[4].second.to(kFloat32), 0, 0));
  }
}
