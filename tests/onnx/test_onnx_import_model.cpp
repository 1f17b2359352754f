// onnx::Model as a module: initializers under their file names in the state
// dict (sanitised where they are not module paths), gradients through an
// imported graph equal to those of the same computation written natively,
// training with an optimizer, dtype moves, initializer overrides, nodes out
// of order, and shape-dependent graphs run at two batch sizes.
#include <doctest/doctest.h>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnx_builder.h"
#include "test_util.h"

using namespace ember;
using onnx_test::attr_int;
using onnx_test::attr_ints;
using onnx_test::attr_tensor;
using onnx_test::ModelBuilder;
namespace TP = ::onnx;

namespace {

// y = tanh(x * fc1.weight + fc1.bias) * fc2.weight + fc2.bias, all elementwise over [N, 3].
ModelBuilder elementwise_net() {
  ModelBuilder m;
  m.input("x", {-1, 3}).output("y");
  m.initializer("fc1.weight", tensor({0.5, -1.0, 2.0})).initializer("fc1.bias", tensor({0.1, 0.2, -0.3}));
  m.initializer("fc2.weight", tensor({1.5, 0.25, -0.75})).initializer("fc2.bias", tensor({0.0, 1.0, 2.0}));
  m.node("Mul", {"x", "fc1.weight"}, {"a"}).node("Add", {"a", "fc1.bias"}, {"b"}).node("Tanh", {"b"}, {"h"});
  m.node("Mul", {"h", "fc2.weight"}, {"c"}).node("Add", {"c", "fc2.bias"}, {"y"});
  return m;
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& [k, t] : m.named_parameters())
    if (k == name) return t;
  FAIL("no parameter " << name);
  return {};
}

}  // namespace

TEST_CASE("onnx import model: initializers are parameters and buffers under their file names") {
  ModelBuilder m = elementwise_net();
  m.initializer("steps", tensor({3.0}).to(kInt64));
  auto model = ember::onnx::load_from_bytes(m.bytes(), "net.onnx");
  std::vector<std::string> params, buffers;
  for (const auto& [k, t] : model->named_parameters()) {
    params.push_back(k);
    CHECK(t.requires_grad());
  }
  for (const auto& [k, t] : model->named_buffers()) buffers.push_back(k);
  CHECK(params == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(buffers == std::vector<std::string>{"steps"});
  CHECK(model->input_names() == std::vector<std::string>{"x"});
  CHECK(model->output_names() == std::vector<std::string>{"y"});
  CHECK(model->opset() == 17);
  CHECK(model->named_children().size() == 2);
}

TEST_CASE("onnx import model: names that are not module paths are sanitised, keeping the mapping") {
  ModelBuilder m;
  m.input("x", {2}).output("y");
  m.initializer("onnx::Mul_12", tensor({2.0, 3.0}))
      .initializer("/conv1/Conv_output_0", tensor({1.0, 1.0}))
      .initializer("layer..w", tensor({0.5, 0.5}))
      .initializer("fc", tensor({1.0, 2.0}))
      .initializer("fc.weight", tensor({4.0, 5.0}))      // 'fc' is already a parameter: goes flat
      .initializer("onnx__Mul_12", tensor({0.0, 0.0}));  // clashes with the first one's key
  m.node("Mul", {"x", "onnx::Mul_12"}, {"a"}).node("Add", {"a", "/conv1/Conv_output_0"}, {"b"});
  m.node("Mul", {"b", "layer..w"}, {"c"}).node("Add", {"c", "fc"}, {"d"}).node("Add", {"d", "fc.weight"}, {"e"});
  m.node("Add", {"e", "onnx__Mul_12"}, {"y"});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "names.onnx");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"onnx::Mul_12", "onnx__Mul_12"}, {"/conv1/Conv_output_0", "_conv1_Conv_output_0"},
      {"layer..w", "layer._.w"},        {"fc", "fc"},
      {"fc.weight", "fc_weight"},       {"onnx__Mul_12", "onnx__Mul_12_2"}};
  CHECK(model->state_dict_names() == want);
  std::vector<std::string> keys;
  for (const auto& [k, t] : model->state_dict()) keys.push_back(k);
  for (const auto& [onnx_name, key] : want) CHECK(std::find(keys.begin(), keys.end(), key) != keys.end());
  // ((x * 2,3 + 1) * 0.5 + 1,2) + 4,5 + 0 at x = 1, 2
  test::check_close(model->forward(tensor({1.0, 2.0})), {1.5 + 1 + 4, 3.5 + 2 + 5}, 1e-6);
}

TEST_CASE("onnx import model: gradients through the graph equal the native computation's") {
  auto model = ember::onnx::load_from_bytes(elementwise_net().bytes(), "net.onnx");
  const Tensor x = tensor({{0.3, -0.2, 0.9}, {1.1, 0.4, -0.6}});
  const Tensor target = tensor({{0.0, 1.0, 0.5}, {2.0, -1.0, 1.0}});
  sum(square(sub(model->forward(x), target))).backward();

  // The same network written with Ember's ops.
  Tensor w1 = tensor({0.5, -1.0, 2.0}).requires_grad_(), b1 = tensor({0.1, 0.2, -0.3}).requires_grad_();
  Tensor w2 = tensor({1.5, 0.25, -0.75}).requires_grad_(), b2 = tensor({0.0, 1.0, 2.0}).requires_grad_();
  const Tensor y = add(mul(tanh(add(mul(x, w1), b1)), w2), b2);
  sum(square(sub(y, target))).backward();

  const std::vector<std::pair<std::string, Tensor>> native = {
      {"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  for (const auto& entry : native) {
    const auto& name = entry.first;
    const auto& t = entry.second;
    INFO(name);
    REQUIRE(param(*model, name).grad().defined());
    test::check_close(param(*model, name).grad(), t.grad().to_vector<double>(), 1e-6);
  }
}

TEST_CASE("onnx import model: an optimizer trains the imported parameters") {
  auto model = ember::onnx::load_from_bytes(elementwise_net().bytes(), "net.onnx");
  const Tensor x = tensor({{0.3, -0.2, 0.9}, {1.1, 0.4, -0.6}, {-0.5, 0.8, 0.1}});
  const Tensor target = tensor({{0.0, 1.0, 0.5}, {2.0, -1.0, 1.0}, {0.5, 0.5, 0.5}});
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor loss = mean(square(sub(model->forward(x), target)));
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < 0.5 * first);
}

TEST_CASE("onnx import model: to(float64) converts parameters, and the graph runs in float64") {
  auto model = ember::onnx::load_from_bytes(elementwise_net().bytes(), "net.onnx");
  model->to(kFloat64);
  CHECK(param(*model, "fc1.weight").dtype() == kFloat64);
  const Tensor y = model->forward(tensor({{0.3, -0.2, 0.9}}, kFloat64));
  CHECK(y.dtype() == kFloat64);
  // tanh(0.3 * 0.5 + 0.1) * 1.5 + 0, in float64 from the float32 parameters (0.1 as float32)
  CHECK(y.at<double>({0, 0}) == doctest::Approx(std::tanh(0.15 + static_cast<double>(0.1f)) * 1.5).epsilon(1e-14));
}

TEST_CASE("onnx import model: graph inputs with initializers are optional overrides") {
  ModelBuilder m;
  m.input("x", {2}).input("bias", {2}).output("y").initializer("bias", tensor({10.0, 20.0}));
  m.node("Add", {"x", "bias"}, {"y"});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "override.onnx");
  CHECK(model->input_names() == std::vector<std::string>{"x"});
  test::check_close(model->forward(tensor({1.0, 2.0})), {11, 22}, 0);
  test::check_close(model->forward(std::vector<Tensor>{tensor({1.0, 2.0}), tensor({-1.0, -2.0})})[0], {0, 0}, 0);
  test::check_close(model->forward(std::vector<Tensor>{tensor({1.0, 2.0}), Tensor()})[0], {11, 22}, 0);
  // The override did not replace the parameter.
  test::check_close(param(*model, "bias"), {10, 20}, 0);
}

TEST_CASE("onnx import model: nodes out of order are run in topological order") {
  ModelBuilder m;
  m.input("x", {2}).output("y");
  m.node("Neg", {"b"}, {"y"}).node("Abs", {"a"}, {"b"}).node("Exp", {"x"}, {"a"});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "order.onnx");
  test::check_close(model->forward(tensor({0.0, 1.0})), {-1.0, -std::exp(1.0)}, 1e-6);
}

TEST_CASE("onnx import model: a graph that reads its own shape runs at two batch sizes") {
  // [N, 2, 3] -> Shape -> Gather(0) = N -> Unsqueeze -> Concat [N, -1] -> Reshape = [N, 6];
  // then Reshape with [0, 3, -1] (0 copies N) and a Flatten back to [N, 6].
  ModelBuilder m;
  m.input("x", {-1, 2, 3}).output("y").output("n", TP::TensorProto::INT64);
  m.initializer("zero", scalar_tensor(0, kInt64)).initializer("minus_one", tensor({-1.0}).to(kInt64));
  m.initializer("axes", tensor({0.0}).to(kInt64));
  m.node("Shape", {"x"}, {"s"}).node("Gather", {"s", "zero"}, {"n"}, {attr_int("axis", 0)});
  m.node("Unsqueeze", {"n", "axes"}, {"n1"}).node("Concat", {"n1", "minus_one"}, {"shape"}, {attr_int("axis", 0)});
  m.node("Reshape", {"x", "shape"}, {"flat"});
  m.node("Constant", {}, {"shape2"}, {attr_tensor("value", tensor({0.0, 3.0, -1.0}).to(kInt64))});
  m.node("Reshape", {"flat", "shape2"}, {"r"}).node("Flatten", {"r"}, {"f"}, {attr_int("axis", 1)});
  m.node("Mul", {"f", "f"}, {"y"});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "dynamic.onnx");
  for (int64_t batch : {2, 5}) {
    INFO("batch ", batch);
    const Tensor x = arange(0, static_cast<double>(batch * 6), 1, kFloat32).reshape({batch, 2, 3});
    const auto outs = model->forward(std::vector<Tensor>{x});
    CHECK(outs[0].shape() == Shape{batch, 6});
    CHECK(outs[1].item<int64_t>() == batch);
    std::vector<double> want;
    for (int64_t i = 0; i < batch * 6; ++i) want.push_back(static_cast<double>(i * i));
    test::check_close(outs[0], want, 0);
  }
}

TEST_CASE("onnx import model: load from a file and state_dict round trip") {
  const std::string path = elementwise_net().save("roundtrip.onnx");
  auto a = ember::onnx::load(path);
  auto b = ember::onnx::load(path);
  {
    NoGradGuard g;
    Tensor w = param(*a, "fc2.bias");
    w.fill_(7.0);
  }
  b->load_state_dict(a->state_dict());
  test::check_close(param(*b, "fc2.bias"), {7, 7, 7}, 0);
  const Tensor x = tensor({{0.3, -0.2, 0.9}});
  NoGradGuard g;
  test::check_close(b->forward(x), a->forward(x).to_vector<double>(), 0);
}

TEST_CASE("onnx import model: values freed after their last reader do not disturb outputs read twice") {
  // 'h' is read by two nodes and is also a graph output: it must survive both.
  ModelBuilder m;
  m.input("x", {3}).output("h").output("y");
  m.node("Exp", {"x"}, {"h"}).node("Neg", {"h"}, {"a"}).node("Add", {"a", "h"}, {"y"});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "reuse.onnx");
  const auto outs = model->forward(std::vector<Tensor>{tensor({0.0, 1.0, 2.0})});
  test::check_close(outs[0], {1.0, std::exp(1.0), std::exp(2.0)}, 1e-5);
  test::check_close(outs[1], {0, 0, 0}, 0);
}

TEST_CASE("onnx import model: autocast runs the graph's matmul in bfloat16 and gradients reach the weights") {
  // h = x W, y = h + b, W [3, 2].
  ModelBuilder m;
  m.input("x", {-1, 3}).output("h").output("y");
  m.initializer("fc.weight", tensor({{0.5, -1.0}, {2.0, 0.25}, {-0.5, 1.5}}))
      .initializer("fc.bias", tensor({0.1, -0.2}));
  m.node("MatMul", {"x", "fc.weight"}, {"h"}).node("Add", {"h", "fc.bias"}, {"y"});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "linear.onnx");
  const std::vector<Tensor> x = {tensor({{1.0, 2.0, 3.0}, {-1.0, 0.5, 0.25}})};
  const Tensor plain = model->forward(x)[1];
  std::vector<Tensor> outs;
  {
    AutocastGuard autocast(DeviceType::CPU, kBFloat16);
    outs = model->forward(x);
  }
  CHECK(outs[0].dtype() == kBFloat16);  // the matmul ran in bfloat16
  CHECK(outs[1].dtype() == kFloat32);   // the bias add promotes, as PyTorch's does
  test::check_close(outs[1], plain.detach().to_vector<double>(), 0.05);
  sum(outs[1]).backward();
  // d sum(x W + b) / dW[i][j] = sum over rows of x[:, i]: 0, 2.5, 3.25 (bfloat16 holds these exactly).
  test::check_close(param(*model, "fc.weight").grad(), {0, 0, 2.5, 2.5, 3.25, 3.25}, 1e-6);
  CHECK(param(*model, "fc.weight").grad().dtype() == kFloat32);
}
