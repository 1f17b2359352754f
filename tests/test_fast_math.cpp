// The inline float32 exp, tanh and erf of ops/fast_math.h against libm in
// double, and its float64 exp_nonpos against libm in long double.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include <ember/ops/fast_math.h>

TEST_CASE("fast_math: expf is within 2 ulp over the normal range, exact at the edges") {
  double worst = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.000937f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(ember::fast::expf(x) - ref) / ref);
  }
  CHECK(worst < 2 * 5.97e-8);
  CHECK(ember::fast::expf(0.0f) == 1.0f);
  CHECK(ember::fast::expf(-200.0f) == 0.0f);
  CHECK(ember::fast::expf(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isinf(ember::fast::expf(100.0f)));
  CHECK(std::isnan(ember::fast::expf(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fast_math: expf_nonpos is expf bit for bit on x <= 0") {
  int64_t differ = 0, count = 0;
  for (float x = -100.0f; x <= 0.0f; x += 0.000917f, ++count)
    differ += ember::fast::expf_nonpos(x) != ember::fast::expf(x);
  CHECK(count > 100000);
  CHECK(differ == 0);
  CHECK(ember::fast::expf_nonpos(0.0f) == 1.0f);
  CHECK(ember::fast::expf_nonpos(-87.0f) == ember::fast::expf(-87.0f));
  CHECK(ember::fast::expf_nonpos(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isnan(ember::fast::expf_nonpos(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fast_math: exp_nonpos (double) is within 2 ulp on [-708, 0], 0 below, NaN through") {
  long double worst = 0;
  int64_t count = 0;
  for (double x = -708.0; x <= 0.0; x += 0.00123456789, ++count) {
    const long double ref = std::exp(static_cast<long double>(x));
    worst = std::max(worst, std::fabs(static_cast<long double>(ember::fast::exp_nonpos(x)) - ref) / ref);
  }
  CHECK(count > 500000);
  CHECK(static_cast<double>(worst) < 2 * 1.12e-16);
  // Near the reduction's edges (x / ln2 at half-integers) and at the ends.
  for (double x : {-0.5 * std::log(2.0), -1.5 * std::log(2.0), -1e-300, -707.99})
    CHECK(std::fabs(ember::fast::exp_nonpos(x) - std::exp(x)) <= 2 * 1.12e-16 * std::exp(x));
  CHECK(ember::fast::exp_nonpos(0.0) == 1.0);
  CHECK(ember::fast::exp_nonpos(-708.5) == 0.0);
  CHECK(ember::fast::exp_nonpos(-std::numeric_limits<double>::infinity()) == 0.0);
  CHECK(std::isnan(ember::fast::exp_nonpos(std::numeric_limits<double>::quiet_NaN())));
}

TEST_CASE("fast_math: erff is within 6e-7 of erf and odd") {
  double worst = 0;
  for (float x = -7.0f; x < 7.0f; x += 0.000731f)
    worst = std::max(worst, std::fabs(ember::fast::erff(x) - std::erf(static_cast<double>(x))));
  CHECK(worst < 6e-7);
  CHECK(ember::fast::erff(-1.5f) == -ember::fast::erff(1.5f));
  CHECK(ember::fast::erff(30.0f) == 1.0f);
}

TEST_CASE("fast_math: tanhf is within 4 ulp of tanh, odd, and saturates to +-1") {
  double worst = 0;
  for (float x = -20.0f; x < 20.0f; x += 0.000613f) {
    const double ref = std::tanh(static_cast<double>(x));
    if (ref != 0) worst = std::max(worst, std::fabs(ember::fast::tanhf(x) - ref) / std::fabs(ref));
  }
  CHECK(worst < 4 * 5.97e-8);
  for (float x : {1e-30f, 1e-7f, 1e-3f, 0.3f, 0.5499f, 0.5501f}) {
    const double ref = std::tanh(static_cast<double>(x));
    CHECK(std::fabs(ember::fast::tanhf(x) - ref) <= 4 * 5.97e-8 * ref);
  }
  CHECK(ember::fast::tanhf(0.0f) == 0.0f);
  CHECK(ember::fast::tanhf(-0.7f) == -ember::fast::tanhf(0.7f));
  CHECK(ember::fast::tanhf(50.0f) == 1.0f);
  CHECK(ember::fast::tanhf(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(ember::fast::tanhf(std::numeric_limits<float>::quiet_NaN())));
}
