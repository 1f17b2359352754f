// Known answers for the importer's elementwise, tensor and indexing ops
// where ONNX's semantics are easy to get wrong (negative slice steps,
// reflect padding, integer division and modulo, rounding halves to even,
// casts that wrap, batched GatherND, ScatterND, one-hot of negative
// indices, int8 quantization), and gradients through the ops that move
// values by index or compose a formula (values worked out by hand in the
// comments).
#include <doctest/doctest.h>

#include <cmath>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnx_builder.h"
#include "test_util.h"

using namespace ember;
using onnx_test::attr_int;
using onnx_test::attr_ints;
using onnx_test::attr_string;
using onnx_test::ModelBuilder;
namespace TP = ::onnx;

namespace {

Tensor ints(std::vector<int64_t> v) { return from_vector(v, Shape{static_cast<int64_t>(v.size())}); }

// One node with inputs in0, in1, ... (the first `graph` of them graph inputs, the rest initializers) and
// one output, run on `inputs`.
Tensor run1(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<onnx_test::Attr>& attrs = {},
            size_t graph = 1, int opset = 17) {
  ModelBuilder m(opset);
  std::vector<std::string> names;
  std::vector<Tensor> fed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string n = "in" + std::to_string(i);
    names.push_back(n);
    if (i < graph) {
      m.input(n, std::vector<int64_t>(inputs[i].shape().begin(), inputs[i].shape().end()),
              inputs[i].is_floating_point() ? TP::TensorProto::FLOAT : TP::TensorProto::INT64);
      fed.push_back(inputs[i]);
    } else {
      m.initializer(n, inputs[i]);
    }
  }
  m.output("out").node(op, names, {"out"}, attrs, op);
  auto model = ember::onnx::load_from_bytes(m.bytes(), op + ".onnx");
  return model->forward(fed)[0];
}

}  // namespace

TEST_CASE("onnx import ops: Slice with a negative step, and its gradient") {
  const Tensor x = arange(0, 6, 1, kFloat32).requires_grad_();
  const Tensor y = run1("Slice", {x, ints({4}), ints({0}), ints({0}), ints({-2})});
  test::check_close(y, {4, 2}, 0);
  sum(mul(y, tensor({1.0, 10.0}))).backward();
  test::check_close(x.grad(), {0, 0, 10, 0, 1, 0}, 0);
  // Out-of-range starts and ends clamp: [::-1] as ONNX writes it.
  test::check_close(run1("Slice", {x.detach(), ints({-1}), ints({INT64_MIN}), ints({0}), ints({-1})}),
                    {5, 4, 3, 2, 1, 0}, 0);
}

TEST_CASE("onnx import ops: Pad's reflect, edge and wrap modes, crops, and reflect's gradient") {
  const Tensor x = tensor({1.0, 2.0, 3.0});
  test::check_close(run1("Pad", {x, ints({2, 1})}, {attr_string("mode", "reflect")}), {3, 2, 1, 2, 3, 2}, 0);
  test::check_close(run1("Pad", {x, ints({2, 1})}, {attr_string("mode", "edge")}), {1, 1, 1, 2, 3, 3}, 0);
  test::check_close(run1("Pad", {x, ints({2, 1})}, {attr_string("mode", "wrap")}), {2, 3, 1, 2, 3, 1}, 0);
  // Negative pads crop: drop one in front, add two of 9 at the end.
  test::check_close(run1("Pad", {x, ints({-1, 2}), scalar_tensor(9.0)}), {2, 3, 9, 9}, 0);
  // Reflect reads x[2], x[1], x[0], x[1], x[2], x[1]: the gradient of the sum counts the reads.
  const Tensor xg = tensor({1.0, 2.0, 3.0}).requires_grad_();
  sum(run1("Pad", {xg, ints({2, 1})}, {attr_string("mode", "reflect")})).backward();
  test::check_close(xg.grad(), {1, 3, 2}, 0);
}

TEST_CASE("onnx import ops: integer Div truncates, Mod follows the divisor's sign unless fmod") {
  test::check_close(run1("Div", {ints({-7, 7, 7}), ints({2, 2, -2})}), {-3, 3, -3}, 0);
  CHECK(run1("Div", {ints({-7}), ints({2})}).dtype() == kInt64);
  test::check_close(run1("Mod", {ints({-7, 7, -7}), ints({3, -3, -3})}), {2, -2, -1}, 0);
  test::check_close(run1("Mod", {ints({-7, 7}), ints({3, -3})}, {attr_int("fmod", 1)}), {-1, 1}, 0);
  test::check_close(run1("Mod", {tensor({-7.5, 7.5}), tensor({2.0, 2.0})}, {attr_int("fmod", 1)}), {-1.5, 1.5}, 0);
  // A zero divisor is undefined in ONNX; it gives 0 here instead of a trap.
  test::check_close(run1("Mod", {ints({5}), ints({0})}), {0}, 0);
}

TEST_CASE("onnx import ops: Round halves to even, Sign, and Pow keeps the base's type") {
  test::check_close(run1("Round", {tensor({0.5, 1.5, 2.5, -0.5, -1.7})}), {0, 2, 2, 0, -2}, 0);
  test::check_close(run1("Sign", {tensor({-3.0, 0.0, 2.0})}), {-1, 0, 1}, 0);
  const Tensor p = run1("Pow", {ints({2, 3}), tensor({3.0, 2.0})});
  CHECK(p.dtype() == kInt64);
  test::check_close(p, {8, 9}, 0);
}

TEST_CASE("onnx import ops: Cast to narrow integer types wraps as they do") {
  // 300 -> uint8 44, -1 -> uint8 255; 200 -> int8 -56; 70000 -> int16 4464.
  test::check_close(run1("Cast", {tensor({300.0, -1.0})}, {attr_int("to", TP::TensorProto::UINT8)}), {44, 255}, 0);
  test::check_close(run1("Cast", {tensor({200.0})}, {attr_int("to", TP::TensorProto::INT8)}), {-56}, 0);
  test::check_close(run1("Cast", {ints({70000})}, {attr_int("to", TP::TensorProto::INT16)}), {4464}, 0);
  // Toward zero from floating point, as C's conversion.
  test::check_close(run1("Cast", {tensor({-2.7, 2.7})}, {attr_int("to", TP::TensorProto::INT32)}), {-2, 2}, 0);
}

TEST_CASE("onnx import ops: GatherND with batch_dims and ScatterND") {
  // ONNX's own example: data [[[0,1],[2,3]],[[4,5],[6,7]]], indices [[1],[0]], batch_dims 1 -> [[2,3],[4,5]].
  const Tensor data = arange(0, 8, 1, kFloat32).reshape({2, 2, 2});
  const Tensor idx = from_vector(std::vector<int64_t>{1, 0}, Shape{2, 1});
  const Tensor g = run1("GatherND", {data, idx}, {attr_int("batch_dims", 1)});
  CHECK(g.shape() == Shape{2, 2});
  test::check_close(g, {2, 3, 4, 5}, 0);
  // ScatterND: data 1..8, indices [[4],[3],[1],[7]], updates 9..12 -> [1, 11, 3, 10, 9, 6, 7, 12].
  const Tensor s =
      run1("ScatterND", {arange(1, 9, 1, kFloat32), from_vector(std::vector<int64_t>{4, 3, 1, 7}, Shape{4, 1}),
                         tensor({9.0, 10.0, 11.0, 12.0})});
  test::check_close(s, {1, 11, 3, 10, 9, 6, 7, 12}, 0);
}

TEST_CASE("onnx import ops: ScatterElements replaces, and gradients go to the updates where they land") {
  const Tensor data = zeros({3}).requires_grad_();
  const Tensor upd = tensor({5.0, 7.0}).requires_grad_();
  const Tensor y = run1("ScatterElements", {data, ints({2, 0}), upd}, {}, 3);
  test::check_close(y, {7, 0, 5}, 0);
  sum(mul(y, tensor({1.0, 2.0, 3.0}))).backward();
  test::check_close(data.grad(), {0, 2, 0}, 0);  // overwritten entries receive nothing
  test::check_close(upd.grad(), {3, 1}, 0);      // each update the weight of where it landed
}

TEST_CASE("onnx import ops: OneHot counts negative indices from the depth, Trilu keeps a triangle") {
  const Tensor oh = run1("OneHot", {ints({-1, 1, 3}), scalar_tensor(3, kInt64), tensor({0.0, 5.0})});
  CHECK(oh.shape() == Shape{3, 3});
  test::check_close(oh, {0, 0, 5, 0, 5, 0, 0, 0, 0}, 0);  // 3 is out of range: all off
  const Tensor x = arange(1, 10, 1, kFloat32).reshape({3, 3});
  test::check_close(run1("Trilu", {x, scalar_tensor(-1, kInt64)}, {attr_int("upper", 0)}, 1),
                    {0, 0, 0, 4, 0, 0, 7, 8, 0}, 0);
}

TEST_CASE("onnx import ops: QuantizeLinear saturates to the zero point's type") {
  const Tensor x = tensor({-300.0, 1.5, 2.5, 300.0});
  ModelBuilder m;
  m.input("x", {4}).output("q8", TP::TensorProto::INT8).output("qu8", TP::TensorProto::UINT8);
  m.initializer("s", scalar_tensor(1.0));
  auto* zp8 = m.proto().mutable_graph()->add_initializer();
  zp8->set_name("zp8"), zp8->set_data_type(TP::TensorProto::INT8), zp8->add_int32_data(0);
  auto* zpu8 = m.proto().mutable_graph()->add_initializer();
  zpu8->set_name("zpu8"), zpu8->set_data_type(TP::TensorProto::UINT8), zpu8->add_int32_data(0);
  m.node("QuantizeLinear", {"x", "s", "zp8"}, {"q8"}).node("QuantizeLinear", {"x", "s", "zpu8"}, {"qu8"});
  const auto outs = ember::onnx::load_from_bytes(m.bytes(), "quant.onnx")->forward(std::vector<Tensor>{x});
  test::check_close(outs[0], {-128, 2, 2, 127}, 0);  // halves round to even
  test::check_close(outs[1], {0, 2, 2, 255}, 0);
}

TEST_CASE("onnx import ops: gradients of the composed and importer-only math ops") {
  SUBCASE("Asin: 1 / sqrt(1 - x^2)") {
    const Tensor x = tensor({0.5, -0.25}).requires_grad_();
    sum(run1("Asin", {x})).backward();
    test::check_close(x.grad(), {1 / std::sqrt(0.75), 1 / std::sqrt(1 - 0.0625)}, 1e-6);
  }
  SUBCASE("Erf: 2 / sqrt(pi) exp(-x^2)") {
    const Tensor x = tensor({0.0, 1.0}).requires_grad_();
    sum(run1("Erf", {x})).backward();
    test::check_close(x.grad(), {2 / std::sqrt(M_PI), 2 / std::sqrt(M_PI) * std::exp(-1.0)}, 1e-6);
  }
  SUBCASE("Elu: no NaN from the exponential branch at a large x") {
    const Tensor x = tensor({100.0, -1.0}).requires_grad_();
    sum(run1("Elu", {x})).backward();
    test::check_close(x.grad(), {1, std::exp(-1.0)}, 1e-6);
  }
  SUBCASE("Floor: piecewise constant, no gradient recorded") {
    const Tensor x = tensor({1.5}).requires_grad_();
    CHECK_FALSE(run1("Floor", {x}).requires_grad());
  }
}

TEST_CASE("onnx import ops: gradients flow through sequences") {
  // y = SequenceAt(SplitToSequence(x, [1, 2]), 1): the last two entries.
  ModelBuilder m;
  m.input("x", {3}).output("y").initializer("split", ints({1, 2})).initializer("pos", scalar_tensor(1, kInt64));
  m.node("SplitToSequence", {"x", "split"}, {"s"}).node("SequenceAt", {"s", "pos"}, {"y"});
  const Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  const Tensor y = ember::onnx::load_from_bytes(m.bytes(), "seq.onnx")->forward(x);
  test::check_close(y, {2, 3}, 0);
  sum(mul(y, tensor({4.0, 5.0}))).backward();
  test::check_close(x.grad(), {0, 4, 5}, 0);
}

TEST_CASE("onnx import ops: scatter reductions mul, max and min, whose backward is refused by name") {
  // ScatterElements along axis 0 of [1, 2, 3, 4] at [1, 1, 3] with updates [10, 3, 0.5].
  const Tensor data = tensor({1.0, 2.0, 3.0, 4.0});
  const Tensor idx = ints({1, 1, 3});
  const Tensor upd = tensor({10.0, 3.0, 0.5});
  test::check_close(run1("ScatterElements", {data, idx, upd}, {attr_string("reduction", "mul")}), {1, 60, 3, 2}, 0);
  test::check_close(run1("ScatterElements", {data, idx, upd}, {attr_string("reduction", "max")}), {1, 10, 3, 4}, 0);
  test::check_close(run1("ScatterND", {data, from_vector(std::vector<int64_t>{3, 0}, Shape{2, 1}), tensor({9.0, -1.0})},
                         {attr_string("reduction", "min")}),
                    {-1, 2, 3, 4}, 0);
  const Tensor dg = tensor({1.0, 2.0, 3.0, 4.0}).requires_grad_();
  const Tensor y = run1("ScatterElements", {dg, idx, upd}, {attr_string("reduction", "mul")});
  CHECK(test::contains(test::error_of<AutogradError>([&] { sum(y).backward(); }), "ScatterReduce"));
}
