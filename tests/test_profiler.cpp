// The op-level profiler: kernels are timed only while it is on, matmul FLOPs
// are always counted, and the report names each kernel.
#include <doctest/doctest.h>

#include <ember/ember.h>

using namespace ember;

namespace {
const profiler::Row* find(const std::vector<profiler::Row>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("profiler: times kernels by name while enabled, forward and backward separately") {
  profiler::reset();
  const Tensor x = randn({8, 16}).requires_grad_();
  softmax(x, -1);  // off: not recorded
  CHECK(find(profiler::rows(), "softmax") == nullptr);
  {
    profiler::Guard g;
    CHECK(profiler::enabled());
    sum(mul(softmax(x, -1), 2.0)).backward();
  }
  CHECK_FALSE(profiler::enabled());
  const auto rows = profiler::rows();
  const profiler::Row* fwd = find(rows, "softmax");
  const profiler::Row* bwd = find(rows, "softmax_backward");
  REQUIRE(fwd != nullptr);
  REQUIRE(bwd != nullptr);
  CHECK(fwd->calls == 1);
  CHECK(bwd->calls == 1);
  CHECK(fwd->seconds >= 0);
  const std::string rep = profiler::report();
  CHECK(rep.find("softmax_backward") != std::string::npos);
  CHECK(rep.find("us/call") != std::string::npos);
  profiler::reset();
  CHECK(profiler::rows().empty());
}

TEST_CASE("profiler: matmul FLOPs are 2 m n k per product, counted with the profiler off") {
  const uint64_t before = profiler::matmul_flops();
  matmul(randn({3, 4, 5}), randn({5, 6}));  // 3 x (4 x 5 x 6)
  CHECK(profiler::matmul_flops() - before == 2ull * 3 * 4 * 5 * 6);
  const uint64_t mid = profiler::matmul_flops();
  linear(randn({7, 5}), randn({2, 5}), randn({2}));
  CHECK(profiler::matmul_flops() - mid == 2ull * 7 * 5 * 2);
}
