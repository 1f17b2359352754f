// Anomaly mode (core/anomaly.h): the first op whose forward or backward turns
// finite values into NaN/Inf is named; values that were non-finite on the way
// in (a user's -inf mask) are not blamed; off, nothing is checked.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;
using test::contains;
using test::error_of;

TEST_CASE("anomaly mode: a forward op producing -inf from finite inputs is named") {
  Tensor x = tensor({1.0, 0.0, 2.0});
  CHECK_NOTHROW(log(x));  // off: no check
  DetectAnomalyGuard anomaly;
  const std::string e = error_of<AnomalyError>([&] { log(x); });
  CHECK(contains(e, "kernel 'log'"));
  CHECK(contains(e, "[3]"));
  // A finite result passes.
  CHECK_NOTHROW(log(tensor({1.0, 2.0})));
}

TEST_CASE("anomaly mode: a matmul overflowing to infinity is named") {
  DetectAnomalyGuard anomaly;
  Tensor a = full({2, 2}, 1e38), b = full({2, 2}, 10.0);
  CHECK(contains(error_of<AnomalyError>([&] { matmul(a, b); }), "kernel 'matmul'"));
}

TEST_CASE("anomaly mode: a backward producing a non-finite gradient names the node") {
  DetectAnomalyGuard anomaly;
  Tensor x = tensor({0.0, 4.0}).requires_grad_();
  Tensor y = sum(sqrt(x));  // finite forward; d sqrt(x) / dx at 0 is infinite
  const std::string e = error_of<AnomalyError>([&] { y.backward(); });
  CHECK(contains(e, "backward of 'sqrt'"));
}

TEST_CASE("anomaly mode: values non-finite on the way in are not blamed on later ops") {
  DetectAnomalyGuard anomaly;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor scores = randn({2, 4}).requires_grad_();
  Tensor mask = tensor({0.0, 0.0, 1.0, 1.0}).to(DType::Bool);
  // The user's -inf mask: masked_fill's scalar is non-finite, softmax is finite.
  Tensor p = softmax(masked_fill(scores, mask, -inf), -1);
  for (double v : p.to_vector<double>()) CHECK(std::isfinite(v));
  CHECK_NOTHROW(sum(p * p).backward());
  // inf + 1 is inf, but the inf came from full's argument.
  CHECK_NOTHROW(add(full({2}, inf), 1.0));
}

TEST_CASE("anomaly mode: the switch and the guard restore the previous state") {
  CHECK_FALSE(detect_anomaly());
  {
    DetectAnomalyGuard g;
    CHECK(detect_anomaly());
    profiler::Guard p;  // both hooks at once: both work
    CHECK(contains(error_of<AnomalyError>([] { log(zeros({1})); }), "'log'"));
  }
  CHECK_FALSE(detect_anomaly());
  CHECK_FALSE(profiler::enabled());
  set_detect_anomaly(true);
  CHECK(detect_anomaly());
  set_detect_anomaly(false);
  CHECK_FALSE(detect_anomaly());
}

TEST_CASE("anomaly mode: all_finite reads strided float tensors and ignores integers") {
  Tensor t = zeros({3, 4});
  {
    NoGradGuard ng;
    t.select(1, 2).select(0, 1).fill_(std::nan(""));
  }
  CHECK_FALSE(all_finite(t));
  CHECK_FALSE(all_finite(t.t()));
  CHECK(all_finite(t.narrow(1, 0, 2)));
  CHECK(all_finite(arange(0, 5)));
  CHECK(all_finite(zeros({0, 3})));
  // Past the first 4096-element block, float64, infinity of either sign.
  for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), std::nan("")}) {
    Tensor big = zeros({3, 5000}, TensorOptions(DType::Float64));
    CHECK(all_finite(big));
    {
      NoGradGuard ng;
      big.select(0, 2).narrow(0, 4999, 1).fill_(bad);
    }
    CHECK_FALSE(all_finite(big));
    CHECK_FALSE(all_finite(big.t()));
  }
  CHECK(all_finite(full({5000}, 3.4e38)));  // large but finite
}

TEST_CASE("anomaly mode: all_finite reads bfloat16 and float16 tensors as their own bits") {
  for (DType dt : {kBFloat16, kFloat16}) {
    // The largest finite values are finite; Inf and NaN of either sign are
    // not, contiguous (past a 4096-element block) and strided. Each tensor
    // is exactly its own size: nothing beyond it may be read.
    const double largest = dt == kBFloat16 ? 3.3895313892515355e38 : 65504.0;
    CHECK(all_finite(full({5000}, largest, TensorOptions(dt))));
    CHECK(all_finite(full({3, 7}, -largest, TensorOptions(dt)).t()));
    for (double bad :
         {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), std::nan("")}) {
      Tensor t = zeros({2, 4999}, TensorOptions(dt));
      CHECK(all_finite(t));
      {
        NoGradGuard ng;
        t.select(0, 1).narrow(0, 4998, 1).fill_(bad);
      }
      CHECK_FALSE(all_finite(t));
      CHECK_FALSE(all_finite(t.t()));
      CHECK(all_finite(t.narrow(1, 0, 4998)));
    }
  }
}
