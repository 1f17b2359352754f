// Control flow in an imported graph: If picks a branch (and gradients flow
// through the branch taken), Loop iterates with carried values and scan
// outputs, Scan slices its inputs; subgraphs read values of the graphs
// around them, nested ones through their parent. A Loop that could never
// end, and a subgraph reading a name defined nowhere, are refused.
#include <doctest/doctest.h>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnx_builder.h"
#include "test_util.h"

using namespace ember;
using onnx_test::attr_graph;
using onnx_test::attr_int;
using onnx_test::ModelBuilder;
namespace TP = ::onnx;

namespace {

// A subgraph: inputs (name, elem type), outputs, and nodes added by the caller.
ModelBuilder subgraph(const std::vector<std::pair<std::string, int>>& inputs, const std::vector<std::string>& outputs) {
  ModelBuilder g;
  for (const auto& [n, t] : inputs) g.input(n, {}, t);
  for (const auto& o : outputs) g.output(o);
  return g;
}

}  // namespace

TEST_CASE("onnx import control flow: If runs the branch its condition picks, reading the outer graph") {
  // y = cond ? x * w : -x, the branches reading x and w from the main graph.
  ModelBuilder then_g = subgraph({}, {"t"});
  then_g.node("Mul", {"x", "w"}, {"t"});
  ModelBuilder else_g = subgraph({}, {"e"});
  else_g.node("Neg", {"x"}, {"e"});
  ModelBuilder m;
  m.input("cond", {}, TP::TensorProto::BOOL).input("x", {2}).output("y").initializer("w", tensor({2.0, 3.0}));
  m.node("If", {"cond"}, {"y"},
         {attr_graph("then_branch", then_g.proto().graph()), attr_graph("else_branch", else_g.proto().graph())});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "if.onnx");
  const Tensor x = tensor({1.0, -4.0});
  test::check_close(model->forward(std::vector<Tensor>{scalar_tensor(1, kBool), x})[0], {2, -12}, 0);
  test::check_close(model->forward(std::vector<Tensor>{scalar_tensor(0, kBool), x})[0], {-1, 4}, 0);
  // The gradient reaches the initializer through the branch taken.
  sum(model->forward(std::vector<Tensor>{scalar_tensor(1, kBool), x})[0]).backward();
  test::check_close(model->named_parameters()[0].second.grad(), {1, -4}, 0);
}

TEST_CASE("onnx import control flow: Loop carries values and stacks its scan outputs") {
  // for i in range(M): acc = acc * 2 + i; scan out acc. With M = 4 from acc = 1: 2, 5, 12, 27.
  ModelBuilder body =
      subgraph({{"i", TP::TensorProto::INT64}, {"c", TP::TensorProto::BOOL}, {"acc", TP::TensorProto::FLOAT}},
               {"c_out", "acc_out", "scan"});
  body.node("Identity", {"c"}, {"c_out"}).node("Mul", {"acc", "two"}, {"a2"});
  body.node("Cast", {"i"}, {"fi"}, {attr_int("to", TP::TensorProto::FLOAT)}).node("Add", {"a2", "fi"}, {"acc_out"});
  body.node("Identity", {"acc_out"}, {"scan"});
  ModelBuilder m;
  m.input("acc0", {}).output("final").output("all").initializer("two", scalar_tensor(2.0));
  m.initializer("M", scalar_tensor(4, kInt64));
  m.node("Loop", {"M", "", "acc0"}, {"final", "all"}, {attr_graph("body", body.proto().graph())});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "loop.onnx");
  const auto outs = model->forward(std::vector<Tensor>{scalar_tensor(1.0)});
  test::check_close(outs[0], {27}, 0);
  CHECK(outs[1].shape() == Shape{4});
  test::check_close(outs[1], {2, 5, 12, 27}, 0);
}

TEST_CASE("onnx import control flow: a while-loop stops on its condition") {
  // while x < 100: x = x * 3, from x = 2: 6, 18, 54, 162.
  ModelBuilder body = subgraph(
      {{"i", TP::TensorProto::INT64}, {"c", TP::TensorProto::BOOL}, {"x", TP::TensorProto::FLOAT}}, {"c_out", "x_out"});
  body.node("Mul", {"x", "three"}, {"x_out"}).node("Less", {"x_out", "limit"}, {"c_out"});
  ModelBuilder m;
  m.input("x0", {}).output("x").initializer("three", scalar_tensor(3.0)).initializer("limit", scalar_tensor(100.0));
  m.initializer("go", scalar_tensor(1, kBool));
  m.node("Loop", {"", "go", "x0"}, {"x"}, {attr_graph("body", body.proto().graph())});
  test::check_close(ember::onnx::load_from_bytes(m.bytes(), "while.onnx")->forward(scalar_tensor(2.0)), {162}, 0);
}

TEST_CASE("onnx import control flow: Scan sums rows, in reverse too") {
  // state += row for each row of x [3, 2]; the running sums are the scan output.
  ModelBuilder body = subgraph({{"s", TP::TensorProto::FLOAT}, {"row", TP::TensorProto::FLOAT}}, {"s_out", "y"});
  body.node("Add", {"s", "row"}, {"s_out"}).node("Identity", {"s_out"}, {"y"});
  ModelBuilder m;
  m.input("s0", {2}).input("x", {3, 2}).output("s").output("ys");
  m.node("Scan", {"s0", "x"}, {"s", "ys"},
         {attr_graph("body", body.proto().graph()), attr_int("num_scan_inputs", 1),
          onnx_test::attr_ints("scan_input_directions", {1})});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "scan.onnx");
  const auto outs = model->forward(std::vector<Tensor>{zeros({2}), arange(0, 6, 1, kFloat32).reshape({3, 2})});
  test::check_close(outs[0], {6, 9}, 0);
  test::check_close(outs[1], {4, 5, 6, 8, 6, 9}, 0);  // rows taken last first: [4,5], [4+2,5+3], [6+0,8+1]
}

TEST_CASE("onnx import control flow: a nested subgraph reads the main graph through its parent") {
  // If(c1) { If(c2) { x + k } else { x } } else { -x }: the inner branch reads x and k two levels out.
  ModelBuilder inner_then = subgraph({}, {"a"});
  inner_then.node("Add", {"x", "k"}, {"a"});
  ModelBuilder inner_else = subgraph({}, {"b"});
  inner_else.node("Identity", {"x"}, {"b"});
  ModelBuilder outer_then = subgraph({}, {"o"});
  outer_then.node(
      "If", {"c2"}, {"o"},
      {attr_graph("then_branch", inner_then.proto().graph()), attr_graph("else_branch", inner_else.proto().graph())});
  ModelBuilder outer_else = subgraph({}, {"n"});
  outer_else.node("Neg", {"x"}, {"n"});
  ModelBuilder m;
  m.input("c1", {}, TP::TensorProto::BOOL).input("c2", {}, TP::TensorProto::BOOL).input("x", {1}).output("y");
  m.initializer("k", tensor({10.0}));
  m.node(
      "If", {"c1"}, {"y"},
      {attr_graph("then_branch", outer_then.proto().graph()), attr_graph("else_branch", outer_else.proto().graph())});
  auto model = ember::onnx::load_from_bytes(m.bytes(), "nested.onnx");
  auto run = [&](bool c1, bool c2) {
    return model->forward(std::vector<Tensor>{scalar_tensor(c1, kBool), scalar_tensor(c2, kBool), tensor({1.0})})[0];
  };
  test::check_close(run(true, true), {11}, 0);
  test::check_close(run(true, false), {1}, 0);
  test::check_close(run(false, true), {-1}, 0);
}

TEST_CASE("onnx import control flow: a Loop that could never end and a dangling name in a subgraph are refused") {
  ModelBuilder body = subgraph(
      {{"i", TP::TensorProto::INT64}, {"c", TP::TensorProto::BOOL}, {"v", TP::TensorProto::FLOAT}}, {"c_out", "v_out"});
  body.node("Identity", {"c"}, {"c_out"}).node("Identity", {"v"}, {"v_out"});
  ModelBuilder m;
  m.input("x", {1}).output("x_copy");
  m.node("Loop", {"", "", "x"}, {"x_copy"}, {attr_graph("body", body.proto().graph())}, "forever");
  auto model = ember::onnx::load_from_bytes(m.bytes(), "forever.onnx");
  CHECK(test::contains(test::error_of<ValueError>([&] { model->forward(tensor({1.0})); }),
                       "Loop (node 'forever'): a Loop with neither a trip count nor a condition never ends"));

  ModelBuilder then_g = subgraph({}, {"t"});
  then_g.node("Neg", {"nowhere"}, {"t"}, {}, "lost");
  ModelBuilder else_g = subgraph({}, {"e"});
  else_g.node("Identity", {"x"}, {"e"});
  ModelBuilder d;
  d.input("cond", {}, TP::TensorProto::BOOL).input("x", {1}).output("y");
  d.node("If", {"cond"}, {"y"},
         {attr_graph("then_branch", then_g.proto().graph()), attr_graph("else_branch", else_g.proto().graph())});
  const std::string msg = test::error_of<IOError>([&] { ember::onnx::load_from_bytes(d.bytes(), "lost.onnx"); });
  CHECK_MESSAGE(test::contains(msg, "lost.onnx: node 'lost' (Neg) reads 'nowhere'"), msg);
}
