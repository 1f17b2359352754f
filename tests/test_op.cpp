// Op declarations (core/op.h): what op::call does with each field of an
// OpDef, on ops declared here the way a user's op is, plus the registry,
// the fast-path check and the profiler's op rows.
#include <map>
#include <stdexcept>
#include <string>

#include <ember/ops/conv_kernels.h>

#include "test_util.h"

using namespace ember;

namespace {

// What the body saw, for the checks.
DType g_seen = DType::Int64;
bool g_autocast_inside = false;

Tensor twice(const Tensor& x) {
  g_seen = x.dtype();
  g_autocast_inside = detail::t_autocast_any;
  return mul(x, 2.0);
}

constexpr OpDef copies_op{.name = "test_op_copies", .autocast = Autocast::Float32, .half = Half::Float32};
constexpr OpDef low_op{.name = "test_op_low", .autocast = Autocast::LowerPrecision};
bool g_native = false;
constexpr OpDef where_op{
    .name = "test_op_where", .half = Half::NativeWhere, .native_half = [](Device) { return g_native; }};
constexpr OpDef fast_op{
    .name = "test_op_fast",
    .fast_paths = {{{.table = &layer_norm_kernel, .without = "a test: nothing runs"}}},
    .flops = [](const Tensor* const*, int, const Tensor& out) { return 3 * out.numel(); },
};
EMBER_REGISTER_OP(copies_op);
EMBER_REGISTER_OP(low_op);
EMBER_REGISTER_OP(where_op);
EMBER_REGISTER_OP(fast_op);

Tensor copies(const Tensor& x) { return op::call<copies_op>(twice, x); }
Tensor low(const Tensor& x) { return op::call<low_op>(twice, x); }

// Mixed: a float32 weight beside a 16-bit input.
Tensor scaled(const Tensor& x, const Tensor& w) {
  return op::call<where_op>(
      [](const Tensor& x, const Tensor& w) {
        g_seen = x.dtype();
        return mul(x, w);
      },
      x, w);
}

}  // namespace

TEST_CASE("op::call: Half::Float32 runs the body on float32 copies and rounds the result back once") {
  const Tensor x = tensor({1.5f, -2.25f, 3.0f}).to(kBFloat16).requires_grad_();
  const Tensor y = copies(x);
  CHECK(g_seen == kFloat32);
  CHECK(y.dtype() == kBFloat16);
  CHECK(allclose(y.to(kFloat32), tensor({3.0f, -4.5f, 6.0f})));
  sum(y.to(kFloat32)).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kBFloat16);  // the copy is recorded: the gradient comes back bfloat16
  CHECK(allclose(x.grad().to(kFloat32), full({3}, 2.0)));
  // float32 and float64 pass as they are.
  copies(tensor({1.0f}));
  CHECK(g_seen == kFloat32);
  copies(tensor({1.0f}).to(kFloat64));
  CHECK(g_seen == kFloat64);
}

TEST_CASE("op::call: autocast categories cast the tensor arguments and suspend autocast for the body") {
  const Tensor x = tensor({1.0f, 2.0f});
  {
    AutocastGuard guard(DeviceType::CPU, kBFloat16);
    CHECK(low(x).dtype() == kBFloat16);  // LowerPrecision: float32 in, the region's dtype out
    CHECK(g_seen == kBFloat16);
    CHECK_FALSE(g_autocast_inside);                      // the body's own ops do not cast again
    CHECK(copies(x.to(kBFloat16)).dtype() == kFloat32);  // Float32: 16-bit in, float32 out
    CHECK(g_seen == kFloat32);
    CHECK(low(x.to(kFloat64)).dtype() == kFloat64);  // float64 is never cast
    CHECK(detail::t_autocast_any);                   // restored after the call
  }
  {
    AutocastGuard guard(DeviceType::CPU, kFloat16);
    CHECK(low(x).dtype() == kFloat16);
  }
  CHECK(low(x).dtype() == kFloat32);  // outside a region nothing is cast
  CHECK(g_autocast_inside == false);
}

TEST_CASE("op::call: Half::NativeWhere asks the predicate, and mixed floating dtypes take float32 copies") {
  const Tensor x = tensor({1.0f, 2.0f}).to(kBFloat16);
  g_native = true;
  CHECK(scaled(x, tensor({3.0f, 4.0f}).to(kBFloat16)).dtype() == kBFloat16);
  CHECK(g_seen == kBFloat16);  // native: the body saw bfloat16
  const Tensor mixed = scaled(x, tensor({3.0f, 4.0f}));
  CHECK(g_seen == kFloat32);  // bfloat16 beside float32: copies
  CHECK(mixed.dtype() == kBFloat16);
  CHECK(allclose(mixed.to(kFloat32), tensor({3.0f, 8.0f})));
  g_native = false;
  scaled(x, tensor({3.0f, 4.0f}).to(kBFloat16));
  CHECK(g_seen == kFloat32);  // the predicate said no
  // The first 16-bit dtype among the arguments is the result's.
  CHECK(scaled(tensor({1.0f}), tensor({2.0f}).to(kFloat16)).dtype() == kFloat16);
}

TEST_CASE("op::fast_path: a declared table answers whether the device has it, an undeclared one is refused") {
  CHECK(op::fast_path<fast_op>(layer_norm_kernel, Device("cpu")));
  CHECK_THROWS_AS(op::fast_path<fast_op>(softmax_kernel, Device("cpu")), std::logic_error);
  try {
    op::fast_path<fast_op>(softmax_kernel, Device("cpu"));
  } catch (const std::logic_error& e) {
    CHECK(std::string(e.what()).find("test_op_fast") != std::string::npos);
    CHECK(std::string(e.what()).find("softmax") != std::string::npos);
  }
}

TEST_CASE("op registry: every declaration once, found by name, and a second op of one name is refused") {
  CHECK(op::find("test_op_copies") == &copies_op);
  CHECK(op::find("layer_norm") != nullptr);
  CHECK(op::find("layer_norm")->autocast == Autocast::Float32);
  CHECK(op::find("conv2d")->fast_paths[0].table == &conv2d_forward_kernel);
  CHECK(op::find("no_such_op") == nullptr);
  static constexpr OpDef clash{.name = "layer_norm"};
  CHECK_THROWS_AS(op::register_op(clash), ValueError);
  op::register_op(copies_op);  // the same declaration again is a no-op
  int n = 0;
  for (const OpDef* d : op::registry()) n += std::string(d->name) == "test_op_copies";
  CHECK(n == 1);
}

TEST_CASE("profiler: declared ops get rows with their calls and the FLOPs they count") {
  profiler::reset();
  {
    profiler::Guard g;
    const Tensor a = randn({4, 8}), b = randn({8, 5});
    matmul(a, b);
    matmul(a, b);
    linear(a, randn({6, 8}), randn({6}));
    op::call<fast_op>([](const Tensor& x) { return mul(x, 1.0); }, randn({7}));
  }
  std::map<std::string, profiler::Row> rows;
  for (const auto& r : profiler::op_rows()) rows[r.name] = r;
  REQUIRE(rows.count("matmul"));
  CHECK(rows["matmul"].calls == 2);
  CHECK(rows["matmul"].flops == 2 * (2 * 4 * 5 * 8));  // 2 m n k per call
  CHECK(rows["linear"].flops == 2 * 4 * 6 * 8);
  CHECK(rows["test_op_fast"].flops == 21);
  CHECK(rows["matmul"].seconds > 0);
  const std::string rep = profiler::report();
  CHECK(rep.find("GFLOP/s") != std::string::npos);
  CHECK(rep.find("test_op_fast") != std::string::npos);
  profiler::reset();
  CHECK(profiler::op_rows().empty());
}
