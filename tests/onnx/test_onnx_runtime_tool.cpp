// tools/onnx_run.js and run_onnxruntime (tests/onnx/onnxruntime.h), the
// reference the ONNX tests compare against: models from ONNX's backend test
// data run through onnxruntime give the outputs stored beside them, and a bad
// call is a clear exception carrying the tool's message.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <ember/core/safetensors.h>
#include <ember/onnx/import_ops.h>

#include "onnx/onnxruntime.h"
#include "test_util.h"

using namespace ember;

namespace {

const std::string kNode = std::string(EMBER_ONNX_TESTDATA) + "/node/";

// One TensorProto file of the test data, as a tensor, with its name.
std::pair<std::string, Tensor> read_pb(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing ", path, ": scripts/setup.sh installs libonnx-testdata");
  ::onnx::TensorProto proto;
  REQUIRE_MESSAGE(proto.ParseFromIstream(&in), "cannot parse ", path);
  return {proto.name(), ember::onnx::detail::from_proto(proto, path)};
}

// The tensors <dir>/<prefix>_0.pb, _1.pb, ... by name.
std::map<std::string, Tensor> read_set(const std::string& dir, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (int i = 0;; ++i) {
    const std::string path = dir + "/" + prefix + "_" + std::to_string(i) + ".pb";
    if (!std::filesystem::exists(path)) break;
    out.insert(read_pb(path));
  }
  return out;
}

// Runs node test `name`'s model on its test_data_set_0 inputs in onnxruntime
// and compares every output with the stored one.
void check_node_test(const std::string& name, double tol) {
  const std::string dir = kNode + name;
  const auto inputs = read_set(dir + "/test_data_set_0", "input");
  const auto expected = read_set(dir + "/test_data_set_0", "output");
  REQUIRE(!inputs.empty());
  REQUIRE(!expected.empty());
  const auto got = test::run_onnxruntime(dir + "/model.onnx", inputs);
  REQUIRE(got.size() == expected.size());
  for (const auto& entry : expected) {
    const auto& out_name = entry.first;
    const auto& want = entry.second;
    INFO(name, " output ", out_name);
    REQUIRE(got.count(out_name) == 1);
    const Tensor& g = got.at(out_name);
    CHECK(g.dtype() == want.dtype());
    CHECK(g.shape() == want.shape());
    test::check_close(g, want.to_vector<double>(), tol);
  }
}

}  // namespace

TEST_CASE("onnxruntime tool: node test_add gives ONNX's stored output") {
  // The stored sum is float32 x + y, which onnxruntime reproduces exactly.
  check_node_test("test_add", 0.0);
  // And a value computed here, not only read from the data set.
  const auto [xn, x] = read_pb(kNode + "test_add/test_data_set_0/input_0.pb");
  const auto [yn, y] = read_pb(kNode + "test_add/test_data_set_0/input_1.pb");
  const auto got = test::run_onnxruntime(kNode + "test_add/model.onnx", {{xn, x}, {yn, y}});
  const std::vector<double> xs = x.to_vector<double>(), ys = y.to_vector<double>();
  const std::vector<double> sums = got.at("sum").to_vector<double>();
  REQUIRE(sums.size() == 60u);
  for (size_t i = 0; i < sums.size(); ++i) CHECK(sums[i] == static_cast<float>(xs[i] + ys[i]));
}

TEST_CASE("onnxruntime tool: other dtypes cross the tool (int32, bool, double, float16)") {
  // test_argmax_default_axis_example: int64 output; test_equal: int32 inputs
  // (Ember's int64, cast by the tool) and a bool output; test_cast_DOUBLE_to_FLOAT16:
  // double in, float16 out.
  check_node_test("test_argmax_default_axis_example", 0.0);
  check_node_test("test_equal", 0.0);
  check_node_test("test_cast_DOUBLE_to_FLOAT16", 0.0);
  check_node_test("test_matmul_2d", 1e-5);
}

TEST_CASE("onnxruntime tool: a missing input is a clear exception") {
  const auto [xn, x] = read_pb(kNode + "test_add/test_data_set_0/input_0.pb");
  const std::string msg = test::error_of<test::OnnxRuntimeError>([&, xn = xn, x = x] {
    test::run_onnxruntime(kNode + "test_add/model.onnx", {{xn, x}});
  });
  INFO(msg);
  CHECK(test::contains(msg, "input 'y' is not in"));
  CHECK(test::contains(msg, "test_add/model.onnx"));
}

TEST_CASE("onnxruntime tool: a wrong shape or a missing model is onnxruntime's message") {
  const std::string model = kNode + "test_add/model.onnx";
  std::string msg = test::error_of<test::OnnxRuntimeError>([&] {
    test::run_onnxruntime(model, {{"x", zeros({2, 2})}, {"y", zeros({2, 2})}});
  });
  INFO(msg);
  CHECK(test::contains(msg, "onnxruntime failed running"));
  CHECK(test::contains(msg, "Invalid rank for input: x"));
  msg = test::error_of<test::OnnxRuntimeError>([&] { test::run_onnxruntime("/nonexistent/model.onnx", {}); });
  CHECK(test::contains(msg, "/nonexistent/model.onnx: no such file"));
}
