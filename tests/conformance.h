// The op conformance table: one row per op, run on every layout and backend.
//
// A row names the op, describes its inputs, and gives the function to test.
// test_conformance.cpp runs every row:
//   1. float64 gradcheck with contiguous inputs;
//   2. float64 gradcheck with non-contiguous inputs (each input is a
//      transposed or strided view of a larger buffer);
//   3. forward and backward on every other available backend ("cuda": the
//      SIMT-emulated backend in the tests, a GPU where there is one), with
//      contiguous and with non-contiguous inputs made on that device,
//      against the CPU result in float32.
//   4. bfloat16 and float16 on the CPU: the row's floating inputs rounded to
//      the 16-bit dtype, the op run on them and on the same values in
//      float32; the 16-bit result and gradients must come back in the 16-bit
//      dtype and within its tolerance (half_tol() scaled by half_tol_scale)
//      of the float32 ones. A row opts out with a reason in half_skip.
// Broadcasting is covered by rows whose inputs have different shapes.
//
// Adding an op: add a row to the family's file (conformance_<family>.cpp):
//   {"mul", {F({3, 4}), F({4})}, [](const In& x) { return mul(x[0], x[1]); }},
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace conformance {

using ember::Shape;
using ember::Tensor;
using In = std::vector<Tensor>;

struct InputSpec {
  enum Kind { Float, Positive, Int, Bool } kind = Float;
  Shape shape;
  int64_t low = 0, high = 2;  // Int: values in [low, high)
  bool grad = true;           // Float/Positive: differentiate w.r.t. it
};
inline InputSpec F(Shape s) { return {InputSpec::Float, s, 0, 2, true}; }
// Floating values in [0.5, 2): for log, sqrt, division.
inline InputSpec P(Shape s) { return {InputSpec::Positive, s, 0, 2, true}; }
// Floating, but not differentiated (e.g. a target).
inline InputSpec C(Shape s) { return {InputSpec::Float, s, 0, 2, false}; }
inline InputSpec I(Shape s, int64_t low, int64_t high) { return {InputSpec::Int, s, low, high, false}; }
inline InputSpec B(Shape s) { return {InputSpec::Bool, s, 0, 2, false}; }

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<Tensor(const In&)> fn;
  bool differentiable = true;
  double fwd_rtol = 1e-5;  // cross-backend tolerance (float32)
  double bwd_rtol = 1e-4;
  std::string half_skip;        // non-empty: no bfloat16/float16 case, and why
  double half_tol_scale = 1.0;  // a row with several rounded steps widens the 16-bit tolerance
};

// Families register their rows through a static registrar.
std::vector<OpCase>& registry();
struct Register {
  explicit Register(std::vector<OpCase> rows) {
    for (auto& r : rows) registry().push_back(std::move(r));
  }
};

}  // namespace conformance
