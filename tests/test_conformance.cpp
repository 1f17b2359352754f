// Runs every row of the op conformance table (see conformance.h).
#include <doctest/doctest.h>

#include "conformance.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

using namespace ember;

namespace conformance {

std::vector<OpCase>& registry() {
  static std::vector<OpCase> rows;
  return rows;
}

// The public ops: every free function returning a tensor (or one in place) that ops/*.h
// declares at the start of a line (`Tensor relu(`), read from the sources so
// that a new op is on the list the moment its header has it.
std::set<std::string> public_ops() {
  std::set<std::string> ops;
  const std::regex decl(R"(^(?:Tensor&?|ValuesIndices|std::vector<Tensor>)\s+([a-z_0-9]+)\()");
  for (const auto& entry : std::filesystem::directory_iterator(EMBER_SOURCE_DIR "/ops")) {
    if (entry.path().extension() != ".h") continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    bool in_detail = false;  // namespace detail { ... }: helpers, not ops
    while (std::getline(in, line)) {
      if (line.rfind("namespace detail", 0) == 0) in_detail = true;
      if (in_detail && line.rfind("}  // namespace detail", 0) == 0) in_detail = false;
      if (!in_detail && std::regex_search(line, m, decl)) ops.insert(m[1]);
    }
  }
  return ops;
}

// Public ops that need no row, and why: what the table would test is not an
// op's forward and backward against other backends.
const std::map<std::string, std::string>& ops_without_rows() {
  static const std::map<std::string, std::string> exempt = {
      // Factories: no inputs to differentiate; their values are tested in
      // test_tensor.cpp and, for the random ones, through the Philox stream.
      {"arange", "factory"},
      {"eye", "factory"},
      {"full", "factory"},
      {"full_like", "factory"},
      {"linspace", "factory"},
      {"ones", "factory"},
      {"ones_like", "factory"},
      {"zeros", "factory"},
      {"zeros_like", "factory"},
      {"rand", "factory"},
      {"rand_like", "factory"},
      {"randn", "factory"},
      {"randn_like", "factory"},
      {"randint", "factory"},
      {"randperm", "factory"},
      {"uniform", "factory"},
      {"normal", "factory"},
      {"uniform_", "factory, in place"},
      {"normal_", "factory, in place"},
      {"causal_mask", "factory (a bool mask; used by the masked_softmax causal row)"},
      {"causal_attention_mask",
       "factory (a bool mask; the causal_attention rows compare against it on the composed path)"},
      // The mechanism every elementwise row goes through.
      {"unary_forward", "the unary ops' common forward (every unary row)"},
      {"binary_forward", "the binary ops' common forward (every binary row)"},
      {"unary_inplace", "the in-place unary ops' common body (their out-of-place rows)"},
      {"binary_inplace", "the in-place binary ops' common body (their out-of-place rows)"},
      {"broadcast_view", "broadcasting's view (every broadcast row)"},
      // Collectives: one process here; tests/distributed runs them across two.
      {"all_gather", "collective (tests/distributed)"},
  };
  return exempt;
}

TEST_CASE("conformance: every op has a row") {
  std::set<std::string> covered;  // a row covers the op its name starts with
  for (const OpCase& c : registry()) covered.insert(c.name.substr(0, c.name.find(' ')));
  const std::set<std::string> ops = public_ops();
  REQUIRE_MESSAGE(ops.size() > 50, "read only ", ops.size(), " public ops from " EMBER_SOURCE_DIR "/ops/*.h");
  for (const std::string& op : ops) {
    if (ops_without_rows().count(op)) continue;
    const bool in_place = op.back() == '_';  // add_, clamp_: the out-of-place op's kernel, in place
    CHECK_MESSAGE((covered.count(op) || (in_place && covered.count(op.substr(0, op.size() - 1)))), "public op ", op,
                  " (ops/*.h) has no row in tests/conformance_*.cpp");
  }
  for (const auto& entry : ops_without_rows()) {
    const std::string& op = entry.first;  // a named copy: clang 14's lambdas cannot capture structured bindings
    CHECK_MESSAGE(ops.count(op), "ops_without_rows names ", op, ", which ops/*.h no longer declares");
  }
}

namespace {
// A harness check's report as one doctest check, listing its failures.
void check(const ember::testing::Report& r) {
  std::string failures;
  for (const std::string& f : r.failures) failures += "\n  " + f;
  CHECK_MESSAGE(r.ok(), failures);
}

// The backends besides the CPU; none, with a message why, in a build or on
// a machine without one.
std::vector<Device> other_backends() {
  std::string why;
  std::vector<Device> devices = ember::testing::other_backends(why);
  if (devices.empty()) MESSAGE("no usable backend besides the CPU (", why, "); nothing to compare");
  return devices;
}
}  // namespace

TEST_CASE("conformance: float64 gradcheck, contiguous and non-contiguous") {
  for (const OpCase& c : registry()) {
    if (!c.differentiable) continue;
    SUBCASE(c.name.c_str()) {
      ember::testing::Report r;
      ember::testing::check_gradients(c, r);
      check(r);
    }
  }
}

TEST_CASE("conformance: strided inputs give the contiguous result") {
  for (const OpCase& c : registry()) {
    SUBCASE(c.name.c_str()) {
      ember::testing::Report r;
      ember::testing::check_strided(c, r);
      check(r);
    }
  }
}

// bfloat16 and float16 on the CPU against float32 (the harness's check_half).
TEST_CASE("conformance: bfloat16 and float16 within their tolerance of float32") {
  int ran = 0, skipped = 0;
  for (const OpCase& c : registry()) {
    if (!c.half_skip.empty()) {
      ++skipped;
      continue;
    }
    for (const DType dt : {DType::BFloat16, DType::Float16}) {
      // No SUBCASE: one pass over the table, every failure reported (an
      // exception is one failed check naming the row).
      ember::testing::Report r;
      try {
        ember::testing::check_half(c, dt, r);
        ++ran;
      } catch (const std::exception& e) {
        r.fail(c, std::string("threw in ") + dtype_name(dt) + ": " + e.what());
      }
      check(r);
    }
  }
  MESSAGE(ran, " row/dtype cases run; ", skipped, " rows opt out (half_skip)");
}

// Every row on every backend besides the CPU ("cuda": the emulated backend
// in the tests, a GPU where there is one): an op with no kernel there fails
// unless its row says cpu_only, and a cpu_only op that runs there fails too.
TEST_CASE("conformance: every backend matches the CPU") {
  const std::vector<Device> devices = other_backends();
  for (const OpCase& c : registry())
    for (const Device& d : devices)
      for (const bool strided : {false, true})
        SUBCASE((c.name + " on " + d.str() + (strided ? ", non-contiguous inputs" : "")).c_str()) {
          ember::testing::Report r;
          ember::testing::check_backend(c, d, strided, r);
          check(r);
        }
}

// bfloat16 and float16 on every backend besides the CPU against float32 on
// the CPU, for every row with kernels there (check_half with a device): the
// 16-bit kernels (cuda/: pointwise, sum, softmax, layer_norm, cross_entropy)
// and the ops that convert to float32 there alike.
TEST_CASE("conformance: every backend's bfloat16 and float16 within their tolerance of float32") {
  const std::vector<Device> devices = other_backends();
  int ran = 0;
  for (const Device& d : devices)
    for (const OpCase& c : registry()) {
      if (!c.half_skip.empty() || !c.cpu_only.empty()) continue;
      for (const DType dt : {DType::BFloat16, DType::Float16}) {
        ember::testing::Report r;
        try {
          ember::testing::check_half(c, dt, r, d);
          ++ran;
        } catch (const std::exception& e) {
          r.fail(c, std::string("threw in ") + dtype_name(dt) + " on " + d.str() + ": " + e.what());
        }
        check(r);
      }
    }
  MESSAGE(ran, " row/dtype cases run on other backends");
}

// The backend check itself: a row whose op lost its CUDA kernel fails (here
// amax's table with its CUDA slot emptied for the test, as if cuda/reduce.cu
// never registered it), a cpu_only row passes on that ground, and a
// cpu_only row whose op does run on the device fails.
TEST_CASE("conformance: a missing CUDA kernel fails its row unless the row says cpu_only") {
  const std::vector<Device> devices = other_backends();
  if (devices.empty()) return;
  const OpCase amax_row{"amax dim 0", {F({4, 3})}, [](const In& x) { return amax(x[0], {0}); }};
  struct Unregister {  // puts the kernel back on every exit
    decltype(minmax_kernel)::Fn saved = nullptr;
    Unregister() : saved(minmax_kernel.has(DeviceType::CUDA) ? minmax_kernel.get(Device("cuda")) : nullptr) {
      minmax_kernel.set(DeviceType::CUDA, nullptr);
    }
    ~Unregister() { minmax_kernel.set(DeviceType::CUDA, saved); }
  };
  {
    Unregister gone;
    const bool was_registered = gone.saved != nullptr;
    REQUIRE(was_registered);
    ember::testing::Report r;
    ember::testing::check_backend(amax_row, devices[0], false, r);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0].find("amax dim 0: no kernel on cuda") == 0);
    CHECK(r.failures[0].find("max/min: no kernel for device cuda") != std::string::npos);
    ember::testing::Report marked;
    ember::testing::check_backend(ember::testing::cpu_only(amax_row, "test"), devices[0], false, marked);
    CHECK(marked.ok());
  }
  ember::testing::Report stale;
  ember::testing::check_backend(ember::testing::cpu_only(amax_row, "test"), devices[0], false, stale);
  REQUIRE(stale.failures.size() == 1);
  CHECK(stale.failures[0].find("but its row says cpu_only") != std::string::npos);
}

}  // namespace conformance
