// Building small ONNX models in tests: a ModelProto assembled field by field
// (graph inputs and outputs, initializers, nodes with attributes, subgraphs
// built the same way: builder.proto().graph()), so each test states exactly
// the file it reads, valid or broken.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include <ember/ember.h>
#include <ember/onnx/import_ops.h>

#include "test_util.h"

namespace onnx_test {

struct Attr {
  std::string name;
  enum Kind { Int, Float, Ints, String, TensorValue, Graph } kind;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
  std::string s;
  ember::Tensor t;
  ::onnx::GraphProto g;
};
inline Attr attr_int(const std::string& n, int64_t v) { return {n, Attr::Int, v, 0, {}, "", {}, {}}; }
inline Attr attr_float(const std::string& n, float v) { return {n, Attr::Float, 0, v, {}, "", {}, {}}; }
inline Attr attr_ints(const std::string& n, std::vector<int64_t> v) { return {n, Attr::Ints, 0, 0, v, "", {}, {}}; }
inline Attr attr_string(const std::string& n, const std::string& v) { return {n, Attr::String, 0, 0, {}, v, {}, {}}; }
inline Attr attr_tensor(const std::string& n, const ember::Tensor& v) {
  return {n, Attr::TensorValue, 0, 0, {}, "", v, {}};
}
inline Attr attr_graph(const std::string& n, const ::onnx::GraphProto& g) {
  return {n, Attr::Graph, 0, 0, {}, "", {}, g};
}

class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 17, int ir_version = 8) {
    m_.set_ir_version(ir_version);
    m_.set_producer_name("ember tests");
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m_.mutable_graph()->set_name("test");
  }
  // A graph input of element type elem (TensorProto::DataType) and shape (-1: a symbolic dim).
  ModelBuilder& input(const std::string& name, std::vector<int64_t> shape, int elem = ::onnx::TensorProto::FLOAT) {
    value(m_.mutable_graph()->add_input(), name, shape, elem);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int elem = ::onnx::TensorProto::FLOAT) {
    auto* v = m_.mutable_graph()->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    v->mutable_type()->mutable_tensor_type()->mutable_shape();  // unknown rank; the checker wants the field
    return *this;
  }
  ModelBuilder& initializer(const std::string& name, const ember::Tensor& t) {
    auto* p = m_.mutable_graph()->add_initializer();
    ember::onnx::detail::to_proto(t, *p);
    p->set_name(name);
    return *this;
  }
  ModelBuilder& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                     std::vector<Attr> attrs = {}, const std::string& name = "") {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(m_.graph().node_size()) : name);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    for (const auto& a : attrs) {
      auto* p = n->add_attribute();
      p->set_name(a.name);
      switch (a.kind) {
        case Attr::Int:
          p->set_type(::onnx::AttributeProto::INT), p->set_i(a.i);
          break;
        case Attr::Float:
          p->set_type(::onnx::AttributeProto::FLOAT), p->set_f(a.f);
          break;
        case Attr::Ints:
          p->set_type(::onnx::AttributeProto::INTS);
          for (int64_t v : a.ints) p->add_ints(v);
          break;
        case Attr::String:
          p->set_type(::onnx::AttributeProto::STRING), p->set_s(a.s);
          break;
        case Attr::TensorValue:
          p->set_type(::onnx::AttributeProto::TENSOR);
          ember::onnx::detail::to_proto(a.t, *p->mutable_t());
          break;
        case Attr::Graph:
          p->set_type(::onnx::AttributeProto::GRAPH);
          *p->mutable_g() = a.g;
          break;
      }
    }
    return *this;
  }
  ::onnx::ModelProto& proto() { return m_; }
  std::string bytes() const { return m_.SerializeAsString(); }
  // Writes the model to a file in the suite's scratch folder; returns its path.
  std::string save(const std::string& file) const { return write_file(file, bytes()); }

  static std::string write_file(const std::string& file, const std::string& bytes) {
    const std::string path = test::scratch_path("ember_onnx_import", file).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

 private:
  static void value(::onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& shape, int elem) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* s = t->mutable_shape();
    for (int64_t d : shape) {
      auto* dim = s->add_dim();
      if (d < 0)
        dim->set_dim_param("batch");
      else
        dim->set_dim_value(d);
    }
  }
  ::onnx::ModelProto m_;
};

}  // namespace onnx_test
