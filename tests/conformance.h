// Ember's op conformance table: one row per op, run on every layout and
// backend by the installed harness (testing/conformance.h, which says what
// each check does); test_conformance.cpp runs every row of the registry.
// Broadcasting is covered by rows whose inputs have different shapes.
//
// Adding an op: add a row to the family's file (conformance_<family>.cpp):
//   {"mul", {F({3, 4}), F({4})}, [](const In& x) { return mul(x[0], x[1]); }},
// A row's name starts with the op it covers ("mul", "mul scalar"): every
// public op declared in ops/*.h must have one ("conformance: every op has a
// row"). An op with no kernel on a backend fails step 3, unless its row is
// wrapped in cpu_only(row, "why"), which the test then holds to: a cpu_only
// op that does run on the backend fails too, so the mark is removed when the
// kernel arrives.
#pragma once

#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/testing/conformance.h>

namespace conformance {

using ember::Shape;
using ember::Tensor;
using ember::testing::B;
using ember::testing::C;
using ember::testing::cpu_only;
using ember::testing::F;
using ember::testing::I;
using ember::testing::In;
using ember::testing::InputSpec;
using ember::testing::OpCase;
using ember::testing::P;

// Families register their rows through a static registrar.
std::vector<OpCase>& registry();
struct Register {
  explicit Register(std::vector<OpCase> rows) {
    for (auto& r : rows) registry().push_back(std::move(r));
  }
};

}  // namespace conformance
