// The importer's nn (matmul, conv and pools, normalisations, softmax,
// losses, resize, sampling), recurrent and reduction op groups against
// ONNX's backend node tests (every single-node case of their ops, run
// through the op table by node_case.h), plus hand-checked values, PyTorch
// references and float64 gradient checks through the composed
// implementations.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <typeinfo>

#include "onnx/node_case.h"

namespace {

namespace fs = std::filesystem;
using test::onnx_node::Status;

const fs::path kNodeDir = fs::path(EMBER_ONNX_TESTDATA) / "node";

// The op types of these groups.
const std::set<std::string> kOps = {
    // nn
    "MatMul", "Gemm", "Conv", "ConvInteger", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "BatchNormalization", "InstanceNormalization", "LayerNormalization", "Softmax", "LogSoftmax",
    "Hardmax", "Dropout", "Einsum", "LRN", "MeanVarianceNormalization", "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss", "Resize", "Upsample", "MaxUnpool", "MatMulInteger", "GridSample", "RoiAlign", "Det",
    "QLinearConv", "QLinearMatMul",
    // rnn
    "RNN", "GRU", "LSTM",
    // reduce
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "TopK"};

// Cases of these ops that Ember does not pass, and why.
const std::map<std::string, std::string> kNotPassing = {
    // Training-mode dropout with ratio > 0 draws its mask from NumPy's generator; Ember's is its own.
    {"test_training_dropout", "random mask"},
    {"test_training_dropout_default", "random mask"},
    {"test_training_dropout_default_mask", "random mask"},
    {"test_training_dropout_mask", "random mask"},
};

}  // namespace

TEST_CASE("onnx: node tests of the nn, rnn and reduce groups pass or are listed") {
  REQUIRE(fs::is_directory(kNodeDir));
  std::map<std::string, std::pair<int, int>> per_op;  // op -> passed, total
  int passed = 0, total = 0;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kNodeDir)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    const std::string op = test::onnx_node::single_op(test::onnx_node::read_model(dir / "model.onnx"));
    if (!kOps.count(op)) continue;
    const std::string name = dir.filename().string();
    const auto r = test::onnx_node::run_case(dir);
    ++total;
    ++per_op[op].second;
    const auto listed = kNotPassing.find(name);
    if (r.status == Status::Pass) {
      ++passed;
      ++per_op[op].first;
      CHECK_MESSAGE(listed == kNotPassing.end(), name, " passes but is listed as not passing");
    } else {
      CHECK_MESSAGE(listed != kNotPassing.end(), name, ": ", r.message);
    }
  }
  std::string summary;
  for (const auto& [op, pt] : per_op) summary += ember::detail::cat_str(op, " ", pt.first, "/", pt.second, "; ");
  MESSAGE("passed ", passed, "/", total, ": ", summary);
  CHECK(total > 300);
}

// ---- hand-checked values, PyTorch references and gradients -----------------

namespace {

using ember::Tensor;
using ember::onnx::detail::NodeArgs;
using ember::onnx::detail::op_table;

// One node built field by field and run through the op table on given inputs.
struct Node {
  ::onnx::NodeProto p;
  explicit Node(const std::string& op, int outputs = 1) {
    p.set_op_type(op);
    p.set_name("n");
    for (int i = 0; i < outputs; ++i) p.add_output(ember::detail::cat_str("y", i));
  }
  ::onnx::AttributeProto* attr(const std::string& name, ::onnx::AttributeProto::AttributeType type) {
    auto* a = p.add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  }
  Node& i(const std::string& name, int64_t v) {
    attr(name, ::onnx::AttributeProto::INT)->set_i(v);
    return *this;
  }
  Node& f(const std::string& name, float v) {
    attr(name, ::onnx::AttributeProto::FLOAT)->set_f(v);
    return *this;
  }
  Node& s(const std::string& name, const std::string& v) {
    attr(name, ::onnx::AttributeProto::STRING)->set_s(v);
    return *this;
  }
  Node& ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* a = attr(name, ::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
    return *this;
  }
  Node& strings(const std::string& name, const std::vector<std::string>& v) {
    auto* a = attr(name, ::onnx::AttributeProto::STRINGS);
    for (const auto& x : v) a->add_strings(x);
    return *this;
  }
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, int opset = 17) const {
    ::onnx::NodeProto q = p;
    for (size_t k = 0; k < inputs.size(); ++k)
      q.add_input(inputs[k].defined() ? ember::detail::cat_str("x", k) : std::string());
    const auto fn = op_table().find(q.op_type());
    REQUIRE(static_cast<bool>(fn));
    return fn(NodeArgs(q, inputs, opset));
  }
};

const ember::TensorOptions kF64(ember::kFloat64);

// Element k is 0.5 sin(0.37 k + off): the same fill in the PyTorch script below.
Tensor fill(const ember::Shape& s, double off) {
  std::vector<double> v(s.numel());
  for (size_t k = 0; k < v.size(); ++k) v[k] = 0.5 * std::sin(0.37 * static_cast<double>(k) + off);
  return ember::from_vector(v, s);
}

void check_values(const Tensor& got, const std::vector<double>& want, double tol = 1e-6) {
  const auto g = got.to(ember::kFloat64).to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (size_t k = 0; k < g.size(); ++k)
    CHECK_MESSAGE(std::abs(g[k] - want[k]) <= tol, "element ", k, ": ", g[k], " vs ", want[k]);
}

}  // namespace

TEST_CASE("onnx nn: 1-D Conv with groups, dilation and asymmetric pads (hand-computed)") {
  // Channel 0 convolves [1 2 3 4 5], padded to [0 1 2 3 4 5], with [1, -1] dilated by 2: p[i] - p[i + 2];
  // channel 1 convolves [10 .. 50] with [1, 1]: p[i] + p[i + 2]; biases 0.5 and -1.
  const Tensor x = ember::from_vector<float>({1, 2, 3, 4, 5, 10, 20, 30, 40, 50}, {1, 2, 5});
  const Tensor w = ember::from_vector<float>({1, -1, 1, 1}, {2, 1, 2});
  const Tensor b = ember::from_vector<float>({0.5f, -1}, {2});
  const auto y = Node("Conv").i("group", 2).ints("dilations", {2}).ints("pads", {1, 0}).run({x, w, b})[0];
  CHECK(y.shape() == ember::Shape{1, 2, 4});
  check_values(y, {-1.5, -1.5, -1.5, -1.5, 19, 39, 59, 79});
}

// PyTorch 1.13 in float64 (torch.nn.functional, inputs from fill): conv_transpose2d(x (1, 4, 3, 3), w (4, 3, 2,
// 3), b (6), stride (2, 1), padding 1, output_padding (1, 0), groups 2, dilation (1, 2)); conv3d(x (1, 2, 3, 4,
// 3), w (2, 1, 2, 2, 2), stride (1, 2, 1), padding (1, 0, 1), dilation (2, 1, 1), groups 2); the pools of a 5x5
// plane with ceil_mode, where PyTorch drops a last window that would start in the padding. The convolutions are
// compared through sum(y * fill(y.shape, 0.9)).
TEST_CASE("onnx nn: ConvTranspose, 3-D Conv and ceil_mode pools match PyTorch") {
  auto weighted = [](const Tensor& y) { return ember::sum(ember::mul(y, fill(y.shape(), 0.9))).item<double>(); };
  const auto ct = Node("ConvTranspose")
                      .i("group", 2)
                      .ints("strides", {2, 1})
                      .ints("pads", {1, 1, 1, 1})
                      .ints("output_padding", {1, 0})
                      .ints("dilations", {1, 2})
                      .run({fill({1, 4, 3, 3}, 0.1), fill({4, 3, 2, 3}, 0.2), fill({6}, 0.3)})[0];
  CHECK(ct.shape() == ember::Shape{1, 6, 5, 5});
  CHECK(weighted(ct) == doctest::Approx(-0.3990630005643074).epsilon(1e-12));
  const auto c3 = Node("Conv")
                      .i("group", 2)
                      .ints("strides", {1, 2, 1})
                      .ints("pads", {1, 0, 1, 1, 0, 1})
                      .ints("dilations", {2, 1, 1})
                      .run({fill({1, 2, 3, 4, 3}, 0.5), fill({2, 1, 2, 2, 2}, 0.6)})[0];
  CHECK(c3.shape() == ember::Shape{1, 2, 3, 2, 4});
  CHECK(weighted(c3) == doctest::Approx(1.3567451128009937).epsilon(1e-12));
  const Tensor x = fill({1, 1, 5, 5}, 0.4);
  const auto mp = Node("MaxPool")
                      .ints("kernel_shape", {2, 2})
                      .ints("strides", {2, 2})
                      .ints("pads", {1, 1, 1, 1})
                      .i("ceil_mode", 1)
                      .run({x})[0];
  check_values(
      mp, {0.19470917, 0.45431675, 0.49907624, 0.3890366, 0.24913082, -0.10833754, 0.49927167, 0.47524019, 0.45572908},
      1e-8);
  Node avg("AveragePool");
  avg.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).ints("pads", {1, 1, 1, 1}).i("ceil_mode", 1);
  Node avg_incl = avg;
  avg_incl.i("count_include_pad", 1);
  check_values(
      avg_incl.run({x})[0],
      {0.13121602, 0.16864003, 0.06550093, -0.04460878, -0.07084769, -0.03803436, 0.09215418, 0.18611667, 0.1249491},
      1e-8);
  check_values(
      avg.run({x})[0],
      {0.29523605, 0.25296004, 0.14737708, -0.06691317, -0.07084769, -0.05705154, 0.20734691, 0.27917501, 0.28113548},
      1e-8);
}

TEST_CASE("onnx nn: MaxPool Indices in row-major and column-major order") {
  // Two 3x3 planes counting up; every 2x2 window's maximum is its bottom-right element.
  const Tensor x = ember::arange(0, 18, 1, ember::TensorOptions(ember::kFloat32)).reshape({1, 2, 3, 3});
  Node row("MaxPool", 2), col("MaxPool", 2);
  row.ints("kernel_shape", {2, 2}).ints("strides", {1, 1});
  col.ints("kernel_shape", {2, 2}).ints("strides", {1, 1}).i("storage_order", 1);
  const auto r = row.run({x});
  check_values(r[0], {4, 5, 7, 8, 13, 14, 16, 17});
  check_values(r[1], {4, 5, 7, 8, 13, 14, 16, 17});
  // Column-major: h + 3 w within a plane, e.g. (h, w) = (1, 2) -> 7.
  check_values(col.run({x})[1], {4, 7, 5, 8, 13, 16, 14, 17});
}

TEST_CASE("onnx nn: Softmax coerces to 2-D before opset 13 and runs along one axis after") {
  const Tensor x = ember::log(ember::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  Node n("Softmax");
  n.i("axis", 0);
  check_values(n.run({x}, 11)[0], {0.1, 0.2, 0.3, 0.4});          // one row of 4
  check_values(n.run({x}, 13)[0], {0.25, 2. / 6, 0.75, 4. / 6});  // down the columns
}

TEST_CASE("onnx nn: Einsum diagonals, implicit outputs, dot products and ellipses, and Det") {
  const Tensor a = ember::arange(0, 8, 1, ember::TensorOptions(ember::kFloat32)).reshape({2, 2, 2});
  check_values(Node("Einsum").s("equation", "bii->bi").run({a})[0], {0, 3, 4, 7});
  // Det pivots on the larger |entry|: rows swapped, the sign flipped back.
  check_values(Node("Det").run({ember::from_vector<float>({1, 2, 3, 4}, {2, 2})})[0], {-2});
  const Tensor m = ember::from_vector<float>({1, 2, 3, 4}, {2, 2});
  check_values(Node("Einsum").s("equation", "ij,jk").run({m, m})[0], {7, 10, 15, 22});
  check_values(Node("Einsum").s("equation", "ji").run({m})[0], {1, 3, 2, 4});  // implicit output "ij"
  const Tensor v = ember::from_vector<float>({1, 2, 3}, {3});
  check_values(Node("Einsum").s("equation", "i,i").run({v, v})[0], {14});
  const auto y = Node("Einsum").s("equation", "...ij,...jk->...ik").run({a, m})[0];
  CHECK(y.shape() == ember::Shape{2, 2, 2});
  check_values(y, {3, 4, 11, 16, 19, 28, 27, 40});
}

TEST_CASE("onnx nn: CumSum exclusive and reverse, TopK ties, ReduceSum with no axes") {
  const Tensor x = ember::from_vector<float>({1, 2, 3}, {3});
  const Tensor axis = ember::from_vector<int64_t>({0}, {1});
  check_values(Node("CumSum").i("exclusive", 1).i("reverse", 1).run({x, axis})[0], {5, 3, 0});
  check_values(Node("CumSum").i("exclusive", 1).run({x, axis})[0], {0, 1, 3});
  // Equal values: the lower index first.
  const Tensor t = ember::from_vector<float>({2, 5, 5, 1, 5}, {5});
  const auto top = Node("TopK", 2).run({t, ember::from_vector<int64_t>({3}, {1})});
  check_values(top[0], {5, 5, 5});
  check_values(top[1], {1, 2, 4});
  const Tensor none = ember::empty({0}, ember::TensorOptions(ember::kInt64));
  check_values(Node("ReduceSum").i("keepdims", 0).run({x, none}, 13)[0], {6});
  check_values(Node("ReduceSum").i("noop_with_empty_axes", 1).run({x, none}, 13)[0], {1, 2, 3});
}

// The reference: PyTorch 1.13's bidirectional nn.LSTM / nn.GRU in float64 on
// packed sequences of lengths [3, 2], with the ONNX weights below reordered
// to its gate order (LSTM i o f c -> i f g o, GRU z r h -> r z n):
//   fill(shape, off): 0.5 sin(0.37 k + off), k the row-major element index
//   x = fill((3, 2, 3), .1); W = fill((2, G H, 3), .2); R = fill((2, G H, 2), .3)
//   B = fill((2, 2 G H), .4); initial_h = fill((2, 2, 2), .5); initial_c = fill((2, 2, 2), .6)
// PyTorch's GRU applies the reset gate after the recurrent product: ONNX's linear_before_reset = 1.
TEST_CASE("onnx rnn: bidirectional LSTM and GRU with sequence_lens match PyTorch") {
  const int64_t T = 3, B = 2, I = 3, H = 2;
  const Tensor x = fill({T, B, I}, 0.1), lens = ember::from_vector<int64_t>({3, 2}, {2});
  const Tensor h0 = fill({2, B, H}, 0.5), c0 = fill({2, B, H}, 0.6);
  auto weights = [&](int64_t g) {
    return std::vector<Tensor>{x, fill({2, g * H, I}, 0.2), fill({2, g * H, H}, 0.3), fill({2, 2 * g * H}, 0.4), lens,
                               h0};
  };
  auto lstm_in = weights(4);
  lstm_in.push_back(c0);
  const auto lstm = Node("LSTM", 3).s("direction", "bidirectional").i("hidden_size", H).run(lstm_in);
  CHECK(lstm[0].shape() == ember::Shape{T, 2, B, H});
  check_values(lstm[0],
               {0.03639343,  0.07856069,  0.1057338,   0.15097029,  -0.06610474, -0.09354874, -0.05103306, -0.09414515,
                0.03918169,  0.08338524,  -0.07638946, -0.02359199, -0.03858213, -0.02343146, 0.05638302,  0.07038485,
                -0.09751468, -0.08380043, 0.0,         0.0,         0.03815755,  0.15477441,  0.0,         0.0});
  check_values(lstm[1], {-0.09751468, -0.08380043, -0.07638946, -0.02359199, -0.06610474, -0.09354874, -0.05103306,
                         -0.09414515});
  check_values(lstm[2], {-0.21331101, -0.13608289, -0.14911312, -0.03960322, -0.14516662, -0.17631442, -0.12806626,
                         -0.17035324});
  const auto gru =
      Node("GRU", 2).s("direction", "bidirectional").i("hidden_size", H).i("linear_before_reset", 1).run(weights(3));
  check_values(gru[0], {0.1225392,  0.28132326, 0.2113245,  0.3845347, 0.32996947, 0.52610797, 0.15298484, 0.31135388,
                        0.03112845, 0.1808225,  0.32987708, 0.1838858, 0.42660595, 0.48079327, 0.41820802, 0.18060926,
                        0.34140326, 0.14844314, 0.0,        0.0,       0.68058724, 0.42093614, 0.0,        0.0});
  check_values(gru[1], {0.34140326, 0.14844314, 0.32987708, 0.1838858, 0.32996947, 0.52610797, 0.15298484, 0.31135388});
}

// GridSample and RoiAlign differentiate in X (their sampling positions are fixed on the host).
TEST_CASE("onnx nn: float64 gradients through the composed Conv, ConvTranspose, pools, GRU, LSTM and samplers") {
  struct Case {
    std::string what;
    Node node;
    std::vector<Tensor> inputs;
    size_t output = 0;
  };
  auto leaf = [](const ember::Shape& s, double off) { return fill(s, off).requires_grad_(); };
  Node conv("Conv"), convt("ConvTranspose"), avg("AveragePool"), maxp("MaxPool"), gru("GRU", 2), lstm("LSTM", 3),
      sce("SoftmaxCrossEntropyLoss"), resize("Resize"), grid("GridSample"), roi("RoiAlign");
  conv.i("group", 2).ints("dilations", {2, 1}).ints("strides", {2, 1}).ints("pads", {1, 0, 0, 1});
  convt.i("group", 2).ints("strides", {2, 1}).ints("pads", {1, 0, 0, 1}).ints("output_padding", {1, 0});
  avg.ints("kernel_shape", {2, 2}).ints("strides", {2, 2}).ints("pads", {1, 0, 0, 0}).i("ceil_mode", 1);
  maxp.ints("kernel_shape", {2, 2}).ints("dilations", {2, 1}).ints("pads", {1, 1, 1, 1});
  gru.s("direction", "bidirectional").i("hidden_size", 2);
  lstm.s("direction", "reverse").i("hidden_size", 2);
  sce.s("reduction", "mean").i("ignore_index", 1);
  resize.s("mode", "cubic");
  grid.s("mode", "bicubic").s("padding_mode", "reflection");
  roi.i("output_height", 2).i("output_width", 2).i("sampling_ratio", 2);
  const Tensor lens = ember::from_vector<int64_t>({3, 1}, {2});
  const Tensor labels = ember::from_vector<int64_t>({0, 1, 2, 2}, {4});
  const Tensor scales = ember::from_vector<float>({1, 1, 1.5f, 0.75f}, {4});
  std::vector<Case> cases = {
      {"Conv", conv, {leaf({1, 4, 5, 4}, 0.1), leaf({4, 2, 2, 2}, 0.2), leaf({4}, 0.3)}},
      {"ConvTranspose", convt, {leaf({1, 4, 3, 3}, 0.1), leaf({4, 1, 2, 2}, 0.2), leaf({2}, 0.3)}},
      {"AveragePool", avg, {leaf({1, 2, 5, 5}, 0.1)}},
      {"MaxPool", maxp, {leaf({1, 2, 5, 5}, 0.1)}},
      {"GRU",
       gru,
       {leaf({3, 2, 3}, 0.1), leaf({2, 6, 3}, 0.2), leaf({2, 6, 2}, 0.3), leaf({2, 12}, 0.4), lens,
        leaf({2, 2, 2}, 0.5)}},
      {"GRU Y_h",
       gru,
       {leaf({3, 2, 3}, 0.1), leaf({2, 6, 3}, 0.2), leaf({2, 6, 2}, 0.3), leaf({2, 12}, 0.4), lens,
        leaf({2, 2, 2}, 0.5)},
       1},
      {"LSTM Y_c",
       lstm,
       {leaf({3, 2, 3}, 0.1), leaf({1, 8, 3}, 0.2), leaf({1, 8, 2}, 0.3), leaf({1, 16}, 0.4), lens,
        leaf({1, 2, 2}, 0.5), leaf({1, 2, 2}, 0.6), leaf({1, 6}, 0.7)},
       2},
      {"SoftmaxCrossEntropyLoss", sce, {leaf({4, 3}, 0.1), labels, leaf({3}, 0.2)}},
      {"Resize", resize, {leaf({1, 1, 4, 4}, 0.1), Tensor(), scales}},
      {"GridSample", grid, {leaf({2, 2, 3, 4}, 0.1), ember::mul(fill({2, 2, 3, 2}, 0.2), 2.5)}},
      {"RoiAlign",
       roi,
       {leaf({2, 2, 4, 4}, 0.1), ember::from_vector<double>({0.5, 0.2, 2.5, 3.1, 1, 1, 3, 2}, {2, 4}),
        ember::from_vector<int64_t>({1, 0}, {2})}},
  };
  for (auto& c : cases) {
    const auto r = ember::gradcheck([&](const std::vector<Tensor>& in) { return c.node.run(in)[c.output]; }, c.inputs);
    CHECK_MESSAGE(r.ok, c.what, ": ", r.message);
  }
}

TEST_CASE("onnx nn: bad nodes throw errors naming the op and node") {
  using test::onnx_node::Status;
  const Tensor x = ember::zeros({1, 3, 4, 4});
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const ember::onnx::Unsupported& e) {
      return std::string("Unsupported: ") + e.what();
    } catch (const ember::ValueError& e) {
      return std::string("ValueError: ") + e.what();
    }
    return "no error";
  };
  CHECK(message([&] {
          Node("Conv").run({x, ember::zeros({2, 2, 3, 3})});
        }).rfind("ValueError: Conv (node 'n')", 0) == 0);
  CHECK(message([&] {
          Node("Resize").s("mode", "area").run({x, Tensor(), ember::ones({4})});
        }).rfind("ValueError: Resize (node 'n'): mode 'area'", 0) == 0);
  CHECK(message([&] {
          Node("RNN", 2)
              .strings("activations", {"Swish"})
              .run({ember::zeros({1, 1, 2}), ember::zeros({1, 3, 2}), ember::zeros({1, 3, 3})});
        }).rfind("Unsupported: RNN (node 'n'): activation 'Swish'", 0) == 0);
  CHECK(message([&] {
          Node("NegativeLogLikelihoodLoss").run({ember::zeros({2, 3}), ember::from_vector<int64_t>({0, 3}, {2})});
        }).find("target 3 is out of range for 3 classes") != std::string::npos);
  CHECK(message([&] {
          Node("MaxPool").ints("kernel_shape", {5, 5}).run({x});
        }).find("larger than the padded input") != std::string::npos);
  CHECK(message([&] {
          Node("Gemm").run({ember::zeros({3}), ember::zeros({3, 2})});
        }).rfind("ValueError: Gemm", 0) == 0);
  // Absurd attributes are refused before anything is allocated, and NaN or huge coordinates read nothing.
  CHECK(message([&] {
          Node("Conv").ints("pads", {0, 0, int64_t{1} << 40, 0}).run({x, ember::zeros({2, 3, 3, 3})});
        }).find("more than Ember allocates") != std::string::npos);
  CHECK(message([&] {
          Node("ConvTranspose").ints("strides", {int64_t{1} << 40, 1}).run({x, ember::zeros({3, 2, 3, 3})});
        }).find("more than Ember allocates") != std::string::npos);
  CHECK(message([&] {
          Node("Resize").run({x, Tensor(), ember::from_vector<float>({1, 1, 1e30f, 1}, {4})});
        }).find("too long to hold") != std::string::npos);
  CHECK(message([&] {
          Node("RoiAlign")
              .run({x, ember::from_vector<float>({0, 0, NAN, 1}, {1, 4}), ember::from_vector<int64_t>({0}, {1})});
        }).find("not finite") != std::string::npos);
  const Tensor grid = ember::from_vector<float>({NAN, 0, 1e30f, -1e30f}, {1, 1, 2, 2});
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* padding : {"zeros", "border", "reflection"})
      CHECK(Node("GridSample").s("mode", mode).s("padding_mode", padding).run({x, grid})[0].shape() ==
            ember::Shape{1, 3, 1, 2});
  check_values(Node("LRN").i("size", int64_t{1} << 40).run({ember::zeros({1, 2, 1, 1})})[0], {0, 0});
}

// Random nodes of these ops (random attributes from edge values, random inputs of ranks 0 to 5, some omitted)
// either run or throw one of Ember's errors: never a crash, a hang or another exception.
TEST_CASE("onnx nn: random nodes run or throw Ember's errors") {
  const std::vector<std::string> ops(kOps.begin(), kOps.end());
  const std::vector<std::string> int_attrs = {
      "axis",    "keepdims",      "select_last_index",    "exclusive",      "reverse",       "largest",
      "group",   "ceil_mode",     "count_include_pad",    "storage_order",  "transA",        "hidden_size",
      "layout",  "size",          "linear_before_reset",  "ignore_index",   "output_height", "sampling_ratio",
      "spatial", "training_mode", "noop_with_empty_axes", "exclude_outside"};
  const std::vector<std::string> ints_attrs = {"axes",      "kernel_shape",   "strides",     "pads",
                                               "dilations", "output_padding", "output_shape"};
  const std::vector<std::string> float_attrs = {"alpha", "beta", "epsilon",       "momentum",
                                                "ratio", "clip", "cubic_coeff_a", "spatial_scale"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> string_attrs = {
      {"auto_pad", {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "X"}},
      {"direction", {"forward", "reverse", "bidirectional", "x"}},
      {"mode", {"nearest", "linear", "cubic", "bicubic", "max", "x"}},
      {"reduction", {"none", "sum", "mean", "x"}},
      {"equation", {"ij,jk->ik", "ii", "...ii->...i", "i,i", "a...,...b", "->", "ij->k", ",", "0a", "a..b"}},
      {"coordinate_transformation_mode", {"half_pixel", "align_corners", "tf_crop_and_resize", "asymmetric"}}};
  const std::vector<int64_t> ints = {-3, -1, 0, 1, 2, 3, 5, int64_t{1} << 40};
  const std::vector<float> floats = {NAN, -1, 0, 0.5f, 1, 1e30f, -INFINITY};
  std::mt19937_64 rng(1);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int ran = 0, refused = 0;
  for (int it = 0; it < 20000; ++it) {
    Node node(ops[pick(ops.size())], 1 + static_cast<int>(pick(3)));
    for (size_t k = pick(5); k > 0; --k) {
      switch (pick(4)) {
        case 0:
          node.i(int_attrs[pick(int_attrs.size())], ints[pick(ints.size())]);
          break;
        case 1: {
          std::vector<int64_t> v(pick(7));
          for (auto& x : v) x = ints[pick(ints.size() - 1)];
          node.ints(ints_attrs[pick(ints_attrs.size())], v);
          break;
        }
        case 2:
          node.f(float_attrs[pick(float_attrs.size())], floats[pick(floats.size())]);
          break;
        default: {
          const auto& [name, values] = string_attrs[pick(string_attrs.size())];
          node.s(name, values[pick(values.size())]);
        }
      }
    }
    std::vector<Tensor> inputs(pick(3) ? 1 + pick(4) : pick(10));
    for (auto& t : inputs) {
      if (pick(6) == 0) continue;  // omitted
      std::vector<int64_t> shape(pick(6));
      for (auto& d : shape) d = static_cast<int64_t>(pick(4) ? 1 + pick(4) : pick(9));
      const size_t kind = pick(4);
      t = kind == 0 ? ember::randint(-3, 5, ember::Shape(shape))
                    : ember::mul(ember::randn(ember::Shape(shape)), kind == 1 ? 1e30 : 1.0);
    }
    try {
      node.run(inputs, pick(3) == 0 ? 11 : 17);
      ++ran;
    } catch (const ember::Error&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL_CHECK(node.p.op_type(), " threw a ", typeid(e).name(), ": ", e.what());
    }
  }
  MESSAGE(ran, " random nodes ran, ", refused, " were refused");
  CHECK(ran > 2000);
  // A 0-d input is one row of one: softmax 1, log-softmax 0.
  check_values(Node("Softmax").run({ember::scalar_tensor(3.0)})[0], {1});
  check_values(Node("LogSoftmax").run({ember::scalar_tensor(3.0)})[0], {0});
}
