// Writes the ONNX reader fuzzer's seed corpus: small valid models covering
// the reader's paths (initializers of several element types stored raw and
// typed, Constant attributes, a shape computation, sequence ops, nodes out
// of order, an initializer that is also a graph input), plus a few cases of
// ONNX's backend test data when it is installed (control flow among them).
// Usage: seeds_onnx_reader DIR
#include <filesystem>
#include <fstream>
#include <string>

#include <onnx/onnx_pb.h>

#include "fuzz_util.h"

namespace {

using TP = ::onnx::TensorProto;

struct Model {
  ::onnx::ModelProto m;
  explicit Model(int opset = 17) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
  }
  ::onnx::GraphProto& g() { return *m.mutable_graph(); }
  void value(::onnx::ValueInfoProto* v, const std::string& name, int elem, std::initializer_list<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* s = t->mutable_shape();
    for (int64_t d : dims) s->add_dim()->set_dim_value(d);
  }
  Model& input(const std::string& n, int elem, std::initializer_list<int64_t> dims) {
    value(g().add_input(), n, elem, dims);
    return *this;
  }
  Model& output(const std::string& n, int elem, std::initializer_list<int64_t> dims) {
    value(g().add_output(), n, elem, dims);
    return *this;
  }
  ::onnx::NodeProto& node(const std::string& op, std::initializer_list<const char*> in,
                          std::initializer_list<const char*> out) {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(op);
    for (auto* i : in) n->add_input(i);
    for (auto* o : out) n->add_output(o);
    return *n;
  }
  void save(const std::string& path) {
    std::ofstream f(path, std::ios::binary);
    f << m.SerializeAsString();
  }
};

TP& floats(TP* t, const std::string& name, std::initializer_list<int64_t> dims, bool raw) {
  t->set_name(name);
  t->set_data_type(TP::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) t->add_dims(d), n *= d;
  std::string bytes;
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.25f * static_cast<float>(i) - 1.0f;
    if (raw)
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    else
      t->add_float_data(v);
  }
  if (raw) t->set_raw_data(bytes);
  return *t;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = fuzz::seed_dir(argc, argv);
  {  // y = relu(x * w + b), w raw, b typed
    Model m;
    m.input("x", TP::FLOAT, {2, 3}).output("y", TP::FLOAT, {2, 3});
    floats(m.g().add_initializer(), "fc.weight", {3}, true);
    floats(m.g().add_initializer(), "fc.bias", {3}, false);
    m.node("Mul", {"x", "fc.weight"}, {"a"});
    m.node("Add", {"a", "fc.bias"}, {"b"});
    m.node("Relu", {"b"}, {"y"});
    m.save(dir + "/mlp.onnx");
  }
  {  // Shape -> Gather -> Unsqueeze -> Concat -> Reshape, with int64, int32 and bool initializers
    Model m;
    m.input("x", TP::FLOAT, {4, 2, 3}).output("y", TP::FLOAT, {4, 6});
    auto* zero = m.g().add_initializer();
    zero->set_name("zero"), zero->set_data_type(TP::INT64), zero->add_int64_data(0);
    auto* rest = m.g().add_initializer();
    rest->set_name("rest"), rest->set_data_type(TP::INT64), rest->add_dims(1), rest->add_int64_data(-1);
    auto* axes = m.g().add_initializer();
    axes->set_name("axes"), axes->set_data_type(TP::INT32), axes->add_dims(1), axes->set_raw_data(std::string(4, '\0'));
    auto* mask = m.g().add_initializer();
    mask->set_name("mask"), mask->set_data_type(TP::BOOL), mask->add_dims(2), mask->add_int32_data(1),
        mask->add_int32_data(0);
    m.node("Shape", {"x"}, {"s"});
    m.node("Gather", {"s", "zero"}, {"n"});
    auto& c = m.node("Cast", {"axes"}, {"axes64"});
    auto* to = c.add_attribute();
    to->set_name("to"), to->set_type(::onnx::AttributeProto::INT), to->set_i(TP::INT64);
    m.node("Unsqueeze", {"n", "axes64"}, {"n1"});
    auto& cat = m.node("Concat", {"n1", "rest"}, {"shape"});
    auto* axis = cat.add_attribute();
    axis->set_name("axis"), axis->set_type(::onnx::AttributeProto::INT), axis->set_i(0);
    m.node("Reshape", {"x", "shape"}, {"y"});
    m.save(dir + "/shape.onnx");
  }
  {  // a Constant with a tensor attribute, nodes out of order, an overridable initializer (IR 4)
    Model m(13);
    m.input("x", TP::FLOAT, {3}).input("bias", TP::FLOAT, {3}).output("y", TP::FLOAT, {3});
    floats(m.g().add_initializer(), "bias", {3}, true);
    m.node("Add", {"c", "bias"}, {"y"});
    m.node("Mul", {"x", "k"}, {"c"});
    auto& k = m.node("Constant", {}, {"k"});
    auto* v = k.add_attribute();
    v->set_name("value"), v->set_type(::onnx::AttributeProto::TENSOR);
    floats(v->mutable_t(), "", {3}, false);
    m.save(dir + "/constant.onnx");
  }
  {  // sequences inside the graph
    Model m;
    m.input("a", TP::FLOAT, {2}).input("b", TP::FLOAT, {2}).output("y", TP::FLOAT, {4});
    m.node("SequenceConstruct", {"a", "b"}, {"s"});
    auto& c = m.node("ConcatFromSequence", {"s"}, {"y"});
    auto* axis = c.add_attribute();
    axis->set_name("axis"), axis->set_type(::onnx::AttributeProto::INT), axis->set_i(0);
    m.save(dir + "/sequence.onnx");
  }
  // A few real cases, when ONNX's backend test data is installed.
  const std::filesystem::path data = "/usr/share/libonnx-testdata/data/node";
  for (const char* c : {"test_add_bcast", "test_slice_neg_steps", "test_gather_0", "test_pad",
                        "test_cast_FLOAT_to_DOUBLE", "test_resize_upsample_scales_linear",
                        "test_conv_with_strides_padding", "test_if", "test_loop11", "test_scan9_sum"}) {
    const auto p = data / c / "model.onnx";
    if (std::filesystem::exists(p))
      std::filesystem::copy_file(p, std::filesystem::path(dir) / (std::string(c) + ".onnx"),
                                 std::filesystem::copy_options::overwrite_existing);
  }
  return 0;
}
