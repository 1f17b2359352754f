// ember::onnx::Model: an ONNX graph read by model_reader.cpp, run node by
// node with the op table (import_ops.h), its initializers registered as the
// module's parameters and buffers under their file names.
//
// The runner keeps values in a vector indexed by the reader's value ids and
// drops each as soon as its last reader ran, so a deep graph holds only the
// tensors still needed (and those autograd saved). Initializer values are
// the module's own handles, read at every call, so to(device), to(dtype),
// load_state_dict and optimizer steps are seen by the next forward.
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <ember/core/file_io.h>
#include <ember/onnx/import_ops.h>
#include <ember/onnx/import_sequence.h>
#include <ember/onnx/model_reader.h>

namespace ember::onnx {

namespace {

// The child modules that give a dotted initializer name its place in the state dict.
class Scope : public nn::Module {
 public:
  std::string type_name() const override { return "onnx::Scope"; }
};

// A name part as a module attribute: letters, digits and '_' kept, anything else '_'; an empty part "_".
std::string clean_part(const std::string& s) {
  std::string out = s.empty() ? "_" : s;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return out;
}

std::vector<std::string> split_dots(const std::string& name) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : name) {
    if (c == '.') {
      parts.push_back(clean_part(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(clean_part(cur));
  return parts;
}

// The tree of scopes built while registering: which names each level holds, as a leaf or as a child.
struct Node {
  nn::Module* module = nullptr;
  std::map<std::string, std::unique_ptr<Node>> kids;
  std::set<std::string> leaves;
  bool taken(const std::string& n) const { return kids.count(n) || leaves.count(n); }
};

// Registers t under name's parts below root, creating scopes; returns the state-dict key and the stored
// handle. A name whose path runs into a leaf, or whose leaf is taken, goes flat at the root with a suffix.
std::pair<std::string, Tensor> place(Node& root, const std::string& name, const Tensor& t, bool param) {
  const std::vector<std::string> parts = split_dots(name);
  bool fits = true;
  {
    const Node* n = &root;
    for (size_t i = 0; i + 1 < parts.size() && fits; ++i) {
      if (n->leaves.count(parts[i])) fits = false;
      auto it = n->kids.find(parts[i]);
      n = it == n->kids.end() ? nullptr : it->second.get();
      if (!n) break;
    }
    if (fits && n && n->taken(parts.back())) fits = false;
  }
  Node* at = &root;
  std::string leaf, key;
  if (fits) {
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto& kid = at->kids[parts[i]];
      if (!kid) {
        auto scope = std::make_shared<Scope>();
        at->module->register_module(parts[i], scope);
        kid = std::make_unique<Node>();
        kid->module = scope.get();
      }
      at = kid.get();
      key += parts[i] + ".";
    }
    leaf = parts.back();
  } else {
    std::string flat;
    for (const auto& p : parts) flat += (flat.empty() ? "" : "_") + p;
    leaf = flat;
    for (int k = 2; root.taken(leaf); ++k) leaf = flat + "_" + std::to_string(k);
  }
  at->leaves.insert(leaf);
  key += leaf;
  Tensor stored = param ? at->module->register_parameter(leaf, t) : at->module->register_buffer(leaf, t);
  return {key, stored};
}

std::string node_label(const ::onnx::NodeProto& n) { return "node '" + n.name() + "' (" + n.op_type() + ")"; }

// Rethrows the exception in flight with the node named, keeping its type, so a caller can still tell a
// shape error from an unsupported attribute.
[[noreturn]] void rethrow_in(const std::string& what, const ::onnx::NodeProto& n) {
  const std::string label = what + ": " + node_label(n);
  const std::string tag = "(node '" + n.name() + "')";
  auto msg = [&](const std::exception& e) {
    const std::string w = e.what();
    return w.find(tag) != std::string::npos ? what + ": " + w : label + ": " + w;
  };
  try {
    throw;
  } catch (const Unsupported& e) {
    throw Unsupported(msg(e));
  } catch (const ShapeError& e) {
    throw ShapeError(msg(e));
  } catch (const IndexError& e) {
    throw IndexError(msg(e));
  } catch (const DTypeError& e) {
    throw DTypeError(msg(e));
  } catch (const DeviceError& e) {
    throw DeviceError(msg(e));
  } catch (const AutogradError& e) {
    throw AutogradError(msg(e));
  } catch (const IOError& e) {
    throw IOError(msg(e));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw ValueError(msg(e));
  }
}

}  // namespace

struct Model::Impl {
  detail::ReadGraph graph;
  std::string what;
  std::vector<detail::OpImpl> ops;                  // per node, in run order (null for a sequence op)
  std::vector<detail::SeqOpImpl> seq_ops;           // per node: the sequence op, or null
  std::vector<std::pair<int, Tensor>> init_values;  // value id -> the module's handle
  std::vector<std::string> input_names, output_names;
  std::vector<std::pair<std::string, std::string>> keys;
};

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

const std::vector<std::string>& Model::input_names() const { return impl_->input_names; }
const std::vector<std::string>& Model::output_names() const { return impl_->output_names; }
int Model::opset() const { return impl_->graph.opset; }
const std::vector<std::pair<std::string, std::string>>& Model::state_dict_names() const { return impl_->keys; }

std::shared_ptr<Model> load_from_bytes(const std::string& bytes, const std::string& what) {
  std::shared_ptr<Model> model(new Model());
  Model::Impl& I = *model->impl_;
  I.what = what;
  I.graph = detail::read_graph(bytes, what);
  const detail::ReadGraph& g = I.graph;
  for (int v : g.inputs) I.input_names.push_back(g.values[v]);
  for (int v : g.outputs) I.output_names.push_back(g.values[v]);
  for (const auto& n : g.nodes) {
    I.seq_ops.push_back(detail::find_sequence_op(n.proto->op_type()));
    I.ops.push_back(I.seq_ops.back() ? nullptr : detail::op_table().find(n.proto->op_type()));
  }

  // Running statistics are state, not weights: an initializer read only as BatchNormalization's mean or
  // variance (inputs 3 and 4) is a buffer, as in the module it came from (training must not move it).
  std::vector<int> stat_reads(g.values.size(), 0), other_reads(g.values.size(), 0);
  for (const auto& n : g.nodes)
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0)
        ++((n.proto->op_type() == "BatchNormalization" && (i == 3 || i == 4)) ? stat_reads : other_reads)[n.inputs[i]];
  Node root;
  root.module = model.get();
  for (const auto& [proto, v] : g.initializers) {
    const Tensor t = detail::from_proto(*proto, what + ": initializer '" + proto->name() + "'");
    const bool statistic = stat_reads[v] > 0 && other_reads[v] == 0;
    auto [key, handle] = place(root, proto->name(), t, t.is_floating_point() && !statistic);
    I.keys.emplace_back(proto->name(), key);
    I.init_values.emplace_back(v, handle);
  }
  return model;
}

std::shared_ptr<Model> load(const std::string& path) {
  require_regular_file(path, "ONNX model");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError("ONNX model '" + path + "': cannot be opened");
  std::ostringstream buf;
  buf << f.rdbuf();
  if (f.bad()) throw IOError("ONNX model '" + path + "': read failed");
  return load_from_bytes(buf.str(), "ONNX model '" + path + "'");
}

std::vector<Tensor> Model::forward(const std::vector<Tensor>& inputs) {
  const Impl& I = *impl_;
  const detail::ReadGraph& g = I.graph;
  std::vector<Tensor> vals(g.values.size());
  for (const auto& [v, t] : I.init_values) vals[v] = t;
  if (inputs.size() == g.inputs.size()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      EMBER_CHECK(inputs[i].defined(), ValueError, I.what, ": input '", I.input_names[i], "' is undefined");
      vals[g.inputs[i]] = inputs[i];
    }
  } else if (inputs.size() == g.all_inputs.size()) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) vals[g.all_inputs[i]] = inputs[i];
    for (int v : g.inputs)
      EMBER_CHECK(vals[v].defined(), ValueError, I.what, ": input '", g.values[v], "' is undefined");
  } else {
    throw ValueError(ember::detail::cat_str(I.what, ": forward got ", inputs.size(), " inputs; the graph takes ",
                                            g.inputs.size(), " (or ", g.all_inputs.size(),
                                            " with its initializers' overrides)"));
  }
  // Everything runs where the first input is (or the first parameter): constants and shape tensors made on
  // the host follow it there.
  Device device = kCPU;
  bool found = false;
  for (const Tensor& t : inputs)
    if (!found && t.defined()) device = t.device(), found = true;
  for (const auto& [v, t] : I.init_values)
    if (!found) device = t.device(), found = true;

  // Sequence values, by value id (see import_sequence.h); null where the value is a tensor.
  std::vector<std::shared_ptr<const detail::TensorSeq>> seqs(g.values.size());
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const detail::GraphNode& n = g.nodes[k];
    std::vector<Tensor> ins;
    std::vector<const detail::TensorSeq*> seq_ins;
    ins.reserve(n.inputs.size());
    for (int v : n.inputs) {
      ins.push_back(v < 0 ? Tensor() : vals[v]);
      seq_ins.push_back(v < 0 ? nullptr : seqs[v].get());
      if (seq_ins.back() && !I.seq_ops[k])
        throw ValueError(I.what + ": " + node_label(*n.proto) + " reads the sequence '" + g.values[v] +
                         "' where it takes a tensor");
      if (ins.back().defined() && ins.back().device() != device) ins.back() = ins.back().to(device);
    }
    std::vector<detail::SeqValue> outs;
    try {
      detail::NodeArgs args(*n.proto, std::move(ins), g.opset);
      if (I.seq_ops[k]) {
        outs = I.seq_ops[k](args, seq_ins);
      } else {
        for (Tensor& t : I.ops[k](args)) outs.push_back({std::move(t), nullptr});
      }
    } catch (...) {
      rethrow_in(I.what, *n.proto);
    }
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      if (n.outputs[j] < 0) continue;
      EMBER_CHECK(j < outs.size() && (outs[j].tensor.defined() || outs[j].seq), ValueError, I.what, ": ",
                  node_label(*n.proto), " did not produce its output ", j, " ('", g.values[n.outputs[j]], "')");
      vals[n.outputs[j]] = std::move(outs[j].tensor);
      seqs[n.outputs[j]] = std::move(outs[j].seq);
    }
    for (int v : n.frees) vals[v] = Tensor(), seqs[v] = nullptr;
  }
  for (int v : g.outputs)
    if (seqs[v])
      throw Unsupported(I.what + ": graph output '" + g.values[v] +
                        "' is a sequence; Ember returns tensors only (read it with SequenceAt in the graph)");
  std::vector<Tensor> out;
  for (int v : g.outputs) out.push_back(vals[v]);
  return out;
}

Tensor Model::forward(const Tensor& x) {
  EMBER_CHECK(impl_->graph.inputs.size() == 1 && impl_->graph.outputs.size() == 1, ValueError, impl_->what,
              ": forward(x) needs a graph of one input and one output; this one has ", impl_->graph.inputs.size(),
              " and ", impl_->graph.outputs.size(), " (use forward({...}))");
  return forward(std::vector<Tensor>{x})[0];
}

}  // namespace ember::onnx
