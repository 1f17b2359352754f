// Small helpers shared by the test suites: the message of an expected
// exception, substring checks, and elementwise comparison with known values.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace test {

// The message of the E that f() throws, or a marker when it throws none.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception of the expected type>";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every element of t within tol of want (row-major).
inline void check_close(const ember::Tensor& t, const std::vector<double>& want, double tol) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= tol, "element ", i, ": ", got[i], " vs ", want[i]);
}

}  // namespace test
