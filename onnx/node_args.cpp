// NodeArgs: a node's inputs and attributes as an op implementation reads them.
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

namespace {
const char* attr_type_name(int t) {
  switch (t) {
    case ::onnx::AttributeProto::FLOAT:
      return "float";
    case ::onnx::AttributeProto::INT:
      return "int";
    case ::onnx::AttributeProto::STRING:
      return "string";
    case ::onnx::AttributeProto::TENSOR:
      return "tensor";
    case ::onnx::AttributeProto::GRAPH:
      return "graph";
    case ::onnx::AttributeProto::FLOATS:
      return "floats";
    case ::onnx::AttributeProto::INTS:
      return "ints";
    case ::onnx::AttributeProto::STRINGS:
      return "strings";
    default:
      return "another type";
  }
}
}  // namespace

NodeArgs::NodeArgs(const ::onnx::NodeProto& node, std::vector<Tensor> inputs, int opset)
    : node_(node), inputs_(std::move(inputs)), opset_(opset) {}

const Tensor& NodeArgs::input(size_t i) const {
  if (!has_input(i)) invalid(ember::detail::cat_str("input ", i, " is required but not given"));
  return inputs_[i];
}

bool NodeArgs::wants_output(size_t i) const { return i < num_outputs() && !node_.output(static_cast<int>(i)).empty(); }

const ::onnx::AttributeProto* NodeArgs::find(const std::string& name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool NodeArgs::has_attr(const std::string& name) const { return find(name) != nullptr; }

namespace {
// The attribute, checked to be of type `type`.
const ::onnx::AttributeProto& typed(const NodeArgs& n, const ::onnx::AttributeProto* a, const std::string& name,
                                    ::onnx::AttributeProto::AttributeType type) {
  if (!a) n.invalid("attribute '" + name + "' is required but not given");
  // Files from old exporters leave `type` unset; the field that is filled then says it.
  if (a->type() != type && a->type() != ::onnx::AttributeProto::UNDEFINED)
    n.invalid("attribute '" + name + "' is a " + attr_type_name(a->type()) + ", expected a " + attr_type_name(type));
  return *a;
}
}  // namespace

int64_t NodeArgs::attr_int(const std::string& name) const {
  return typed(*this, find(name), name, ::onnx::AttributeProto::INT).i();
}
int64_t NodeArgs::attr_int(const std::string& name, int64_t fallback) const {
  return has_attr(name) ? attr_int(name) : fallback;
}
float NodeArgs::attr_float(const std::string& name) const {
  return typed(*this, find(name), name, ::onnx::AttributeProto::FLOAT).f();
}
float NodeArgs::attr_float(const std::string& name, float fallback) const {
  return has_attr(name) ? attr_float(name) : fallback;
}
std::string NodeArgs::attr_string(const std::string& name) const {
  return typed(*this, find(name), name, ::onnx::AttributeProto::STRING).s();
}
std::string NodeArgs::attr_string(const std::string& name, const std::string& fallback) const {
  return has_attr(name) ? attr_string(name) : fallback;
}
std::vector<int64_t> NodeArgs::attr_ints(const std::string& name) const {
  const auto& a = typed(*this, find(name), name, ::onnx::AttributeProto::INTS);
  return {a.ints().begin(), a.ints().end()};
}
std::vector<int64_t> NodeArgs::attr_ints(const std::string& name, const std::vector<int64_t>& fallback) const {
  return has_attr(name) ? attr_ints(name) : fallback;
}
std::vector<float> NodeArgs::attr_floats(const std::string& name) const {
  const auto& a = typed(*this, find(name), name, ::onnx::AttributeProto::FLOATS);
  return {a.floats().begin(), a.floats().end()};
}
std::vector<float> NodeArgs::attr_floats(const std::string& name, const std::vector<float>& fallback) const {
  return has_attr(name) ? attr_floats(name) : fallback;
}
Tensor NodeArgs::attr_tensor(const std::string& name) const {
  const auto& a = typed(*this, find(name), name, ::onnx::AttributeProto::TENSOR);
  return from_proto(a.t(), op_type() + " attribute '" + name + "'");
}

std::vector<int64_t> NodeArgs::ints_input(size_t i) const {
  const Tensor& t = input(i);
  if (t.dtype() != DType::Int64) invalid(ember::detail::cat_str("input ", i, " must be an integer tensor"));
  const Tensor c = t.cpu().contiguous();
  const int64_t* p = c.data<int64_t>();
  return {p, p + c.numel()};
}

void NodeArgs::unsupported(const std::string& what) const {
  throw Unsupported(op_type() + " (node '" + node_.name() + "'): " + what);
}
void NodeArgs::invalid(const std::string& what) const {
  throw ValueError(op_type() + " (node '" + node_.name() + "'): " + what);
}

}  // namespace ember::onnx::detail
