// ember::onnx::Model: an ONNX graph read by model_reader.cpp and run by
// graph_runner.cpp, its initializers registered as the module's parameters
// and buffers under their file names.
//
// The main graph's initializer values are the module's own handles, read at
// every call, so to(device), to(dtype), load_state_dict and optimizer steps
// are seen by the next forward.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <ember/core/file_io.h>
#include <ember/onnx/graph_runner.h>
#include <ember/onnx/import_ops.h>

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

}  // namespace

struct Model::Impl {
  detail::ReadGraph graph;
  std::string what;
  /// Each graph's initializer values by id: the main graph's are the module's own handles.
  std::unordered_map<const detail::Body*, std::vector<std::pair<int, Tensor>>> init_values;
  std::vector<std::string> input_names, output_names;
  std::vector<std::pair<std::string, std::string>> keys;
};

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

const std::vector<std::string>& Model::input_names() const { return impl_->input_names; }
const std::vector<std::string>& Model::output_names() const { return impl_->output_names; }
int Model::opset() const { return impl_->graph.opset; }
const std::vector<std::pair<std::string, std::string>>& Model::state_dict_names() const { return impl_->keys; }

// The initializers of the subgraphs in body's nodes, recursively, as constants (not parameters: they are
// rare, and their names may repeat the main graph's).
static void subgraph_initializers(const detail::Body& body, const std::string& what,
                                  std::unordered_map<const detail::Body*, std::vector<std::pair<int, Tensor>>>& out) {
  for (const auto& n : body.nodes)
    for (const auto& [name, sub] : n.graphs) {
      for (const auto& [proto, v] : sub->initializers)
        out[sub.get()].emplace_back(v, detail::from_proto(*proto, what + ": initializer '" + proto->name() + "'"));
      subgraph_initializers(*sub, what, out);
    }
}

std::shared_ptr<Model> load_from_bytes(const std::string& bytes, const std::string& what) {
  std::shared_ptr<Model> model(new Model());
  Model::Impl& I = *model->impl_;
  I.what = what;
  I.graph = detail::read_graph(bytes, what);
  const detail::Body& g = *I.graph.main;
  for (int v : g.required) I.input_names.push_back(g.values[v]);
  for (int v : g.outputs) I.output_names.push_back(g.values[v]);

  // Running statistics are state, not weights: an initializer read only as BatchNormalization's mean or
  // variance (inputs 3 and 4) is a buffer, as in the module it came from (training must not move it).
  std::vector<int> stat_reads(g.values.size(), 0), other_reads(g.values.size(), 0);
  for (const auto& n : g.nodes) {
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0)
        ++((n.proto->op_type() == "BatchNormalization" && (i == 3 || i == 4)) ? stat_reads : other_reads)[n.inputs[i]];
    for (int v : n.captured) ++other_reads[v];  // read by a subgraph
  }
  Node root;
  root.module = model.get();
  auto& main_values = I.init_values[&g];
  for (const auto& [proto, v] : g.initializers) {
    const Tensor t = detail::from_proto(*proto, what + ": initializer '" + proto->name() + "'");
    const bool statistic = stat_reads[v] > 0 && other_reads[v] == 0;
    auto [key, handle] = place(root, proto->name(), t, t.is_floating_point() && !statistic);
    I.keys.emplace_back(proto->name(), key);
    main_values.emplace_back(v, handle);
  }
  subgraph_initializers(g, what, I.init_values);
  return model;
}

std::shared_ptr<Model> load(const std::string& path) {
  return load_from_bytes(read_file(path, "ONNX model"), "ONNX model '" + path + "'");
}

std::vector<Tensor> Model::forward(const std::vector<Tensor>& inputs) {
  const Impl& I = *impl_;
  const detail::Body& g = *I.graph.main;
  // One value per graph input: the required ones in order, or all of them (overrides of initializers).
  std::vector<detail::Value> all(g.inputs.size());
  if (inputs.size() == g.required.size()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      EMBER_CHECK(inputs[i].defined(), ValueError, I.what, ": input '", I.input_names[i], "' is undefined");
      const size_t pos = std::find(g.inputs.begin(), g.inputs.end(), g.required[i]) - g.inputs.begin();
      all[pos].tensor = inputs[i];
    }
  } else if (inputs.size() == g.inputs.size()) {
    for (size_t i = 0; i < inputs.size(); ++i) all[i].tensor = inputs[i];
    for (size_t i = 0; i < inputs.size(); ++i)
      EMBER_CHECK(
          inputs[i].defined() || std::find(g.required.begin(), g.required.end(), g.inputs[i]) == g.required.end(),
          ValueError, I.what, ": input '", g.values[g.inputs[i]], "' is undefined");
  } else {
    throw ValueError(ember::detail::cat_str(I.what, ": forward got ", inputs.size(), " inputs; the graph takes ",
                                            g.required.size(), " (or ", g.inputs.size(),
                                            " with its initializers' overrides)"));
  }
  // Everything runs where the first input is (or the first parameter): constants and shape tensors made on
  // the host follow it there.
  Device device = kCPU;
  bool found = false;
  for (const Tensor& t : inputs)
    if (!found && t.defined()) device = t.device(), found = true;
  for (const auto& [v, t] : I.init_values.at(&g))
    if (!found) device = t.device(), found = true;

  const detail::RunContext ctx{I.what, I.graph.opset, device, I.init_values};
  const std::vector<detail::Value> outs = detail::run_body(ctx, g, all, nullptr);
  std::vector<Tensor> out;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (outs[k].seq)
      throw Unsupported(I.what + ": graph output '" + I.output_names[k] +
                        "' is a sequence; Ember returns tensors only (read it with SequenceAt in the graph)");
    out.push_back(outs[k].tensor);
  }
  return out;
}

Tensor Model::forward(const Tensor& x) {
  EMBER_CHECK(impl_->input_names.size() == 1 && impl_->output_names.size() == 1, ValueError, impl_->what,
              ": forward(x) needs a graph of one input and one output; this one has ", impl_->input_names.size(),
              " and ", impl_->output_names.size(), " (use forward({...}))");
  return forward(std::vector<Tensor>{x})[0];
}

}  // namespace ember::onnx
