// Small helpers shared by the test suites: the message of an expected
// exception, substring checks, and elementwise comparison with known values.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
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

// Whether device "cuda" is usable in this binary (the emulated backend, or a
// real GPU under ember_gpu_tests); says why not otherwise, so a suite that
// needs it passes with a "skipped: ..." message.
inline bool cuda_usable() {
  try {
    (void)ember::empty({1}, ember::TensorOptions(ember::Device("cuda")));
    return true;
  } catch (const ember::DeviceError& e) {
    MESSAGE("skipped: ", std::string(e.what()));
    return false;
  }
}

// Every element of t within tol of want (row-major).
inline void check_close(const ember::Tensor& t, const std::vector<double>& want, double tol) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= tol, "element ", i, ": ", got[i], " vs ", want[i]);
}

// Every element of t within tol relative to the known value (|got - want| <=
// tol (1 + |want|)), for the suites whose expected values come from the
// PyTorch reference scripts.
inline void check_values(const ember::Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", expected ", expected[i]);
    CHECK(std::fabs(got[i] - expected[i]) <= tol * (1 + std::fabs(expected[i])));
  }
}

// sum(out * w) with w = 1, 2, 3, ... / 10 in out's shape, then backward: the
// backward seed the reference scripts (tools/reference_*.py) use.
inline void weighted_backward(const ember::Tensor& out) {
  using namespace ember;
  Tensor w = div(arange(1, static_cast<double>(out.numel()) + 1, 1, TensorOptions(kFloat64)), 10.0);
  sum(mul(out, w.reshape(out.shape()))).backward();
}

// Deterministic parameters shared with the PyTorch reference scripts
// (tools/reference_attention.py, reference_transformer.py): parameter k in
// name order, element i, gets 0.3 sin(0.5 i + 1.7 k).
inline void fill_parameters(ember::nn::Module& m) {
  using namespace ember;
  NoGradGuard no_grad;
  int k = 0;
  for (auto& [name, p] : m.named_parameters()) {
    const Tensor i = arange(0, static_cast<double>(p.numel()), 1, kFloat64);
    Tensor dst = p;
    dst.copy_(mul(sin(add(mul(i, 0.5), 1.7 * k)), 0.3).reshape(p.shape()));
    ++k;
  }
}

// The matching inputs: element i is 0.5 cos(0.3 i + offset), float32.
inline ember::Tensor pattern_input(const ember::Shape& s, double offset) {
  using namespace ember;
  const Tensor i = arange(0, static_cast<double>(s.numel()), 1, kFloat64);
  return mul(cos(add(mul(i, 0.3), offset)), 0.5).reshape(s).to(kFloat32);
}

// A path for file `name` in a per-suite folder under the system's temp dir
// (created if missing), for tests that write files.
inline std::filesystem::path scratch_path(const std::string& suite, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / suite;
  std::filesystem::create_directories(dir);
  return dir / name;
}

// The tensor named name in a fixture's state dict (a test failure when absent).
inline ember::Tensor fixture_tensor(const ember::StateDict& ref, const std::string& name) {
  for (const auto& [k, t] : ref)
    if (k == name) return t;
  FAIL("fixture lacks " << name);
  return ember::Tensor();
}

}  // namespace test
