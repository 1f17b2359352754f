// GraphBuilder: lowering::Graph over a protobuf GraphProto (export_graph.h),
// with the sizes that follow dynamic axes written as arithmetic on Shape.
#include <ember/onnx/export_graph.h>

#include <cmath>

#include <ember/core/autograd.h>
#include <ember/core/op.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/reduce.h>

namespace ember::onnx::detail {

namespace {
using AttrProto = ::onnx::AttributeProto;

void set_attr(::onnx::NodeProto& n, const lowering::Attr& a) {
  AttrProto* p = n.add_attribute();
  p->set_name(a.name);
  if (auto* i = std::get_if<int64_t>(&a.value)) {
    p->set_type(AttrProto::INT), p->set_i(*i);
  } else if (auto* f = std::get_if<double>(&a.value)) {
    p->set_type(AttrProto::FLOAT), p->set_f(static_cast<float>(*f));
  } else if (auto* s = std::get_if<std::string>(&a.value)) {
    p->set_type(AttrProto::STRING), p->set_s(*s);
  } else if (auto* is = std::get_if<std::vector<int64_t>>(&a.value)) {
    p->set_type(AttrProto::INTS);
    for (int64_t v : *is) p->add_ints(v);
  } else {
    p->set_type(AttrProto::FLOATS);
    for (double v : std::get<std::vector<double>>(a.value)) p->add_floats(static_cast<float>(v));
  }
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  if (a.numel() == 0) return true;
  const Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}
}  // namespace

GraphBuilder::GraphBuilder(::onnx::GraphProto& g, const std::vector<Trace>& traces, std::vector<Symbol> symbols,
                           const std::map<const TensorImpl*, std::string>& initializers,
                           const std::vector<std::string>& inputs)
    : g_(g), traces_(traces), symbols_(std::move(symbols)), initializers_(initializers) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    values_[traces_[0].inputs[i].unsafe_impl()] = inputs[i];
    used_names_.insert(inputs[i]);
  }
  for (const auto& [impl, name] : initializers_) used_names_.insert(name);
}

std::string GraphBuilder::fresh(const std::string& base) {
  for (;;) {
    std::string name = base + "_" + std::to_string(counter_++);
    if (used_names_.insert(name).second) return name;
  }
}

// Constants are Constant nodes, not initializers: an importer (Ember's, PyTorch's) makes initializers
// trainable parameters, and only the module's own tensors should be.
std::string GraphBuilder::add_constant(const Tensor& t, const std::string& name) {
  ::onnx::NodeProto* n = g_.add_node();
  n->set_op_type("Constant");
  n->set_name(fresh("/Constant"));
  n->add_output(name);
  AttrProto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(AttrProto::TENSOR);
  to_proto(t.detach(), *a->mutable_t());
  return name;
}

std::string GraphBuilder::add_initializer(const Tensor& t, const std::string& name) {
  ::onnx::TensorProto* p = g_.add_initializer();
  to_proto(t.detach(), *p);
  p->set_name(name);
  return name;
}

const Tensor* GraphBuilder::corner_arg_tensor(size_t corner, const Tensor& t) const {
  const lowering::Call& here = traces_[0].calls[call_];
  const lowering::Call& there = traces_[corner].calls[call_];
  for (size_t i = 0; i < here.args.size(); ++i) {
    const lowering::Arg& a = here.args[i];
    if (a.kind == lowering::Arg::Kind::Tensor && a.tensor.unsafe_impl() == t.unsafe_impl())
      return &there.args[i].tensor;
    if (a.kind == lowering::Arg::Kind::Tensors)
      for (size_t j = 0; j < a.tensors.size(); ++j)
        if (a.tensors[j].unsafe_impl() == t.unsafe_impl()) return &there.args[i].tensors[j];
  }
  return nullptr;
}

std::string GraphBuilder::value(const Tensor& t) {
  EMBER_CHECK(t.defined(), ValueError, "ONNX export: the lowering of '", traces_[0].calls[call_].name(),
              "' asks for an undefined tensor");
  if (auto it = values_.find(t.unsafe_impl()); it != values_.end()) return it->second;
  if (auto it = initializers_.find(t.unsafe_impl()); it != initializers_.end()) {
    values_[t.unsafe_impl()] = it->second;
    return add_initializer(t, it->second);
  }
  const char* op = traces_[0].calls[call_].name();
  if (t.grad_fn())
    throw Unsupported(ember::detail::cat_str("ONNX export: '", op, "' takes a tensor computed by '",
                                             t.grad_fn()->name(),
                                             "', which export cannot record: that op needs a declaration (OpDef) "
                                             "with an ONNX lowering"));
  // A tensor made outside any recorded op (a factory, a mask built on the host) becomes a constant; it must
  // be the same at every corner of the dynamic sizes, or the graph would be right at one size only.
  for (size_t k = 1; k < traces_.size(); ++k) {
    // (A tensor that is no argument of the call was made by its lowering: a constant at every size.)
    const Tensor* other = corner_arg_tensor(k, t);
    if (other && !same_values(t, *other))
      throw Unsupported(ember::detail::cat_str(
          "ONNX export: '", op, "' takes a constant tensor of shape ", t.shape(),
          " that changes with the dynamic axes; make it with recorded ops (from the input's shape) or export "
          "without dynamic axes"));
  }
  const std::string name = fresh("const");
  values_[t.unsafe_impl()] = name;
  return add_constant(t, name);
}

std::vector<int64_t> GraphBuilder::fit(const std::vector<int64_t>& v, const std::string& what) const {
  // v[k] is the value at corner k, where symbol s has size x_s = size_s + delta_s * bit_s(k). Möbius
  // inversion gives the multilinear form in (x_s - size_s) / delta_s; expanding it gives the coefficient of
  // each monomial prod_{s in mask} x_s, which must be an integer.
  const size_t n = symbols_.size(), corners = size_t{1} << n;
  std::vector<double> coeff(corners, 0.0);
  for (size_t t = 0; t < corners; ++t) {
    double e = 0;
    for (size_t u = t;; u = (u - 1) & t) {
      e += ((__builtin_popcountll(t ^ u) & 1) ? -1.0 : 1.0) * static_cast<double>(v[u]);
      if (u == 0) break;
    }
    for (size_t s = 0; s < n; ++s)
      if (t >> s & 1) e /= static_cast<double>(symbols_[s].delta);
    // prod_{s in t} (x_s - size_s) = sum over subsets m of t of prod_{s in m} x_s * prod_{s in t\m} (-size_s)
    for (size_t m = t;; m = (m - 1) & t) {
      double c = e;
      for (size_t s = 0; s < n; ++s)
        if ((t >> s & 1) && !(m >> s & 1)) c *= -static_cast<double>(symbols_[s].size);
      coeff[m] += c;
      if (m == 0) break;
    }
  }
  std::vector<int64_t> out(corners);
  for (size_t m = 0; m < corners; ++m) {
    const double r = std::round(coeff[m]);
    if (std::abs(coeff[m] - r) > 1e-6)
      throw Unsupported("ONNX export: " + what + " is not a whole-number multiple of the dynamic sizes");
    out[m] = static_cast<int64_t>(r);
  }
  return out;
}

std::string GraphBuilder::symbol_value(size_t s) {
  if (auto it = symbol_values_.find(s); it != symbol_values_.end()) return it->second;
  const Symbol& sym = symbols_[s];
  const std::string in = values_.at(traces_[0].inputs[sym.input].unsafe_impl());
  const std::string v = node("Shape", {in}, {{"start", int64_t{sym.axis}}, {"end", int64_t{sym.axis + 1}}}, 1)[0];
  return symbol_values_[s] = v;
}

std::string GraphBuilder::poly_value(const std::vector<int64_t>& coeffs) {
  std::string acc;
  for (size_t m = 1; m < coeffs.size(); ++m) {
    if (coeffs[m] == 0) continue;
    std::string term;
    for (size_t s = 0; s < symbols_.size(); ++s)
      if (m >> s & 1) term = term.empty() ? symbol_value(s) : node("Mul", {term, symbol_value(s)}, {}, 1)[0];
    if (coeffs[m] != 1) term = node("Mul", {term, constant_ints({coeffs[m]})}, {}, 1)[0];
    acc = acc.empty() ? term : node("Add", {acc, term}, {}, 1)[0];
  }
  if (coeffs[0] != 0 || acc.empty())
    acc = acc.empty() ? constant_ints({coeffs[0]}) : node("Add", {acc, constant_ints({coeffs[0]})}, {}, 1)[0];
  return acc;
}

std::string GraphBuilder::corner_ints(const std::vector<std::vector<int64_t>>& corners, const std::string& what) {
  const std::vector<int64_t>& base = corners[0];
  std::vector<std::string> parts;
  std::vector<int64_t> run;  // constant elements waiting to be written as one piece
  auto flush = [&] {
    if (!run.empty()) parts.push_back(constant_ints(run)), run.clear();
  };
  for (size_t e = 0; e < base.size(); ++e) {
    std::vector<int64_t> at;
    for (const auto& c : corners) {
      EMBER_CHECK(c.size() == base.size(), onnx::Unsupported, "ONNX export: ", what,
                  " has a different length at another size of the dynamic axes");
      at.push_back(c[e]);
    }
    bool constant = true;
    for (int64_t x : at) constant = constant && x == base[e];
    if (constant) {
      run.push_back(base[e]);
      continue;
    }
    flush();
    parts.push_back(poly_value(fit(at, what)));
  }
  flush();
  if (parts.size() == 1) return parts[0];
  if (parts.empty()) return constant_ints({});
  return node("Concat", parts, {{"axis", int64_t{0}}}, 1)[0];
}

std::string GraphBuilder::ints(const lowering::Call& call, size_t i) {
  const lowering::Arg& a = call.args.at(i);
  using K = lowering::Arg::Kind;
  EMBER_CHECK(a.kind == K::Ints || a.kind == K::Int || (a.kind == K::Float && a.f == std::floor(a.f)), ValueError,
              "ONNX export of '", call.name(), "': argument ", i, " is not a list of integers");
  symbolic_args_.insert(i);
  std::vector<std::vector<int64_t>> corners;
  for (const Trace& t : traces_) {
    const lowering::Arg& x = t.calls[call_].args[i];
    if (x.kind == K::Ints)
      corners.push_back(x.ints);
    else
      corners.push_back({x.kind == K::Float ? static_cast<int64_t>(x.f) : x.i});
  }
  return corner_ints(corners, "argument " + std::to_string(i) + " of '" + call.name() + "'");
}

std::string GraphBuilder::shape(const lowering::Call& call, size_t j) {
  for (size_t i = 0; i < call.args.size(); ++i) {
    const auto k = call.args[i].kind;
    if (k == lowering::Arg::Kind::Int || k == lowering::Arg::Kind::Ints) symbolic_args_.insert(i);
  }
  std::vector<std::vector<int64_t>> corners;
  for (const Trace& t : traces_) {
    const Shape& s = t.calls[call_].outputs.at(j).shape();
    corners.emplace_back(s.begin(), s.end());
  }
  return corner_ints(corners, std::string("the shape of the result of '") + call.name() + "'");
}

std::string GraphBuilder::constant_ints(const std::vector<int64_t>& v) {
  const std::string name = fresh("ints");
  add_constant(from_vector(v, Shape{static_cast<int64_t>(v.size())}), name);
  return name;
}

std::string GraphBuilder::scalar(double v, DType dt) {
  const std::string name = fresh("scalar");
  add_constant(full(Shape{}, v, TensorOptions(dt)), name);
  return name;
}

std::vector<std::string> GraphBuilder::node(const std::string& op_type, const std::vector<std::string>& inputs,
                                            const std::vector<lowering::Attr>& attrs, int n_outputs) {
  ::onnx::NodeProto* n = g_.add_node();
  n->set_op_type(op_type);
  const std::string base = call_ < traces_[0].calls.size() ? traces_[0].calls[call_].name() : "graph";
  n->set_name(fresh("/" + base + "/" + op_type));
  for (const auto& in : inputs) n->add_input(in);
  std::vector<std::string> outs;
  for (int i = 0; i < n_outputs; ++i) {
    outs.push_back(fresh(base));
    n->add_output(outs.back());
  }
  for (const auto& a : attrs) set_attr(*n, a);
  return outs;
}

void GraphBuilder::bind(const Tensor& t, const std::string& value) { values_[t.unsafe_impl()] = value; }

void GraphBuilder::lower_all() {
  const auto& calls = traces_[0].calls;
  for (call_ = 0; call_ < calls.size(); ++call_) {
    const lowering::Call& c = calls[call_];
    if (c.op->onnx == nullptr)
      throw Unsupported(ember::detail::cat_str("ONNX export: op '", c.name(),
                                               "' has no ONNX lowering (its OpDef declares none: docs/ONNX.md)"));
    symbolic_args_.clear();
    c.op->onnx(*this, c);
    for (size_t j = 0; j < c.outputs.size(); ++j)
      EMBER_CHECK(values_.count(c.outputs[j].unsafe_impl()), ValueError, "ONNX export: the lowering of '", c.name(),
                  "' did not bind its result ", j);
    // An integer or float argument that changes with the dynamic sizes must have been written through ints().
    for (size_t i = 0; i < c.args.size(); ++i) {
      const lowering::Arg& a = c.args[i];
      if (symbolic_args_.count(i) || a.kind == lowering::Arg::Kind::Tensor || a.kind == lowering::Arg::Kind::Tensors)
        continue;
      for (size_t k = 1; k < traces_.size(); ++k) {
        const lowering::Arg& b = traces_[k].calls[call_].args[i];
        if (a.i != b.i || a.f != b.f || a.ints != b.ints)
          throw Unsupported(ember::detail::cat_str("ONNX export: argument ", i, " of '", c.name(),
                                                   "' changes with the dynamic axes, but its lowering writes it "
                                                   "as a constant"));
      }
    }
  }
}

std::string GraphBuilder::dim_param(const std::vector<int64_t>& at) {
  bool constant = true;
  for (int64_t x : at) constant = constant && x == at[0];
  if (constant) return "";
  const std::vector<int64_t> c = fit(at, "an output size");
  std::string s;
  for (size_t m = c.size(); m-- > 0;) {
    if (c[m] == 0) continue;
    std::string term;
    for (size_t k = 0; k < symbols_.size(); ++k)
      if (m >> k & 1) term += (term.empty() ? "" : "*") + symbols_[k].name;
    if (term.empty())
      term = std::to_string(c[m]);
    else if (c[m] != 1)
      term = std::to_string(c[m]) + "*" + term;
    s += (s.empty() ? "" : "+") + term;
  }
  return s;
}

void GraphBuilder::finish_outputs(const std::vector<std::string>& names) {
  call_ = traces_[0].calls.size();
  std::set<std::string> claimed;
  for (size_t j = 0; j < names.size(); ++j) {
    const std::string v = value(traces_[0].outputs[j]);
    ::onnx::NodeProto* producer = nullptr;
    for (auto& n : *g_.mutable_node())
      for (const auto& o : n.output())
        if (o == v) producer = &n;
    if (producer && !claimed.count(v)) {
      // Rename the value to the output's name everywhere.
      for (auto& n : *g_.mutable_node()) {
        for (auto& in : *n.mutable_input())
          if (in == v) in = names[j];
        for (auto& o : *n.mutable_output())
          if (o == v) o = names[j];
      }
      for (auto& [impl, name] : values_)
        if (name == v) name = names[j];
      claimed.insert(names[j]);
    } else {
      ::onnx::NodeProto* n = g_.add_node();
      n->set_op_type("Identity");
      n->set_name(fresh("/output/Identity"));
      n->add_input(v);
      n->add_output(names[j]);
    }
  }
}

}  // namespace ember::onnx::detail
