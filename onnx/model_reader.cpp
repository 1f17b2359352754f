// Parsing and validating an ONNX ModelProto (model_reader.h): the checks run
// in the order a broken file is most usefully reported (does it parse, which
// opsets, are its sizes sane, is the graph well formed, can Ember run every
// op), each failure one exception naming the file.
#include <ember/onnx/model_reader.h>

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include <onnx/checker.h>

#include <ember/onnx/import_ops.h>
#include <ember/onnx/import_sequence.h>

namespace ember::onnx::detail {

namespace {

// The most elements one tensor may claim (2^40: terabytes, beyond any memory this runs in). Checked before
// multiplying, so the product never overflows.
constexpr int64_t kMaxElements = int64_t{1} << 40;

[[noreturn]] void bad(const std::string& what, const std::string& msg) { throw IOError(what + ": " + msg); }

bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// The default domain's opset; unknown opsets are IOError, other domains are Unsupported only when a node uses one.
int read_opset(const ::onnx::ModelProto& m, const std::string& what) {
  int opset = -1;
  for (const auto& o : m.opset_import()) {
    if (!default_domain(o.domain())) continue;
    if (o.version() < 1 || o.version() > kMaxReadOpset)
      bad(what, "opset " + std::to_string(o.version()) +
                    " of the default ONNX domain is unknown (Ember reads opsets 1 to " + std::to_string(kMaxReadOpset) +
                    ")");
    opset = std::max(opset, static_cast<int>(o.version()));
  }
  if (opset < 0) {
    // IR version 1 and 2 files predate opset_import and mean opset 1; later ones must import the default
    // domain if a node uses it (the nodes' domains are checked before this).
    if (m.ir_version() >= 3 && m.has_graph() && m.graph().node_size() > 0)
      bad(what, "the model imports no opset of the default ONNX domain");
    opset = 1;
  }
  return opset;
}

// Negative dims, and products beyond kMaxElements, in a tensor's dims or a value's declared shape.
void check_dims(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what,
                const std::string& whose) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) bad(what, whose + " has a negative dim (" + std::to_string(d) + ")");
    if (d > 0 && n > kMaxElements / d) bad(what, whose + " claims more elements than any memory holds");
    n *= d;
  }
}

void check_value_info(const ::onnx::ValueInfoProto& v, const std::string& what) {
  if (!v.has_type() || !v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
  for (const auto& d : v.type().tensor_type().shape().dim())
    if (d.has_dim_value() && d.dim_value() < 0)
      bad(what, "graph value '" + v.name() + "' declares a negative dim (" + std::to_string(d.dim_value()) + ")");
}

std::string node_label(const ::onnx::NodeProto& n) {
  return "node '" + n.name() + "' (" + (n.domain().empty() ? "" : n.domain() + ".") + n.op_type() + ")";
}

}  // namespace

ReadGraph read_graph(const std::string& bytes, const std::string& what) {
  ReadGraph g;
  g.model = std::make_unique<::onnx::ModelProto>();
  ::onnx::ModelProto& m = *g.model;
  // A protobuf parse accepts some garbage (any bytes that happen to be valid fields); the checks below reject
  // what is not a model.
  if (bytes.empty() || !m.ParseFromString(bytes))
    bad(what, "not an ONNX model (wrong magic: the bytes do not parse as a ModelProto; truncated or not protobuf)");
  if (!m.has_graph() || m.ir_version() <= 0)
    bad(what, std::string("not an ONNX model (wrong magic: ") + (m.has_graph() ? "no IR version" : "no graph") + ")");
  ::onnx::GraphProto& graph = *m.mutable_graph();
  for (const auto& n : graph.node())
    if (!default_domain(n.domain()))
      throw Unsupported(what + ": " + node_label(n) + " is in domain '" + n.domain() +
                        "'; Ember implements the default ONNX domain only");
  g.opset = read_opset(m, what);
  if (graph.sparse_initializer_size() > 0) throw Unsupported(what + ": sparse initializers are not supported");

  // ---- sizes, before anything is converted or allocated ----------------------
  for (const auto& t : graph.initializer()) check_dims(t.dims(), what, "initializer '" + t.name() + "'");
  for (const auto& v : graph.input()) check_value_info(v, what);
  for (const auto& v : graph.output()) check_value_info(v, what);
  for (const auto& n : graph.node())
    for (const auto& a : n.attribute())
      if (a.has_t()) check_dims(a.t().dims(), what, node_label(n) + " attribute '" + a.name() + "'");

  // ---- names -> ids ----------------------------------------------------------
  std::unordered_map<std::string, int> id;
  auto intern = [&](const std::string& name) {
    auto [it, fresh] = id.emplace(name, static_cast<int>(g.values.size()));
    if (fresh) g.values.push_back(name);
    return it->second;
  };
  std::set<int> initialized;
  for (const auto& t : graph.initializer()) {
    if (t.name().empty()) bad(what, "an initializer has no name");
    const int v = intern(t.name());
    if (!initialized.insert(v).second) bad(what, "initializer '" + t.name() + "' is given twice");
    g.initializers.emplace_back(&t, v);
  }
  std::set<int> graph_inputs;
  for (const auto& in : graph.input()) {
    if (in.name().empty()) bad(what, "a graph input has no name");
    const int v = intern(in.name());
    if (!graph_inputs.insert(v).second) bad(what, "graph input '" + in.name() + "' is listed twice");
    g.all_inputs.push_back(v);
    if (!initialized.count(v)) g.inputs.push_back(v);
  }

  // ---- producers, dangling inputs, cycles ------------------------------------
  const int num_nodes = graph.node_size();
  std::unordered_map<int, int> producer;  // value id -> node index
  for (int i = 0; i < num_nodes; ++i)
    for (const auto& o : graph.node(i).output()) {
      if (o.empty()) continue;
      const int v = intern(o);
      if (graph_inputs.count(v) || initialized.count(v))
        bad(what, node_label(graph.node(i)) + " writes '" + o + "', which is a graph input or initializer");
      if (!producer.emplace(v, i).second)
        bad(what, "value '" + o + "' is written by two nodes (" + node_label(graph.node(producer[v])) + " and " +
                      node_label(graph.node(i)) + ")");
    }
  std::vector<std::vector<int>> readers(num_nodes);
  std::vector<int> pending(num_nodes, 0);  // producers not yet placed
  for (int i = 0; i < num_nodes; ++i) {
    std::set<int> deps;
    for (const auto& in : graph.node(i).input()) {
      if (in.empty()) continue;
      const int v = intern(in);
      if (graph_inputs.count(v) || initialized.count(v)) continue;
      auto p = producer.find(v);
      if (p == producer.end())
        bad(what, node_label(graph.node(i)) + " reads '" + in +
                      "', which is neither a graph input, an initializer nor any node's output (a dangling input)");
      deps.insert(p->second);
    }
    for (int d : deps) readers[d].push_back(i);
    pending[i] = static_cast<int>(deps.size());
  }
  // Kahn's algorithm, smallest index first: a file already in order keeps it.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < num_nodes; ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int r : readers[i])
      if (--pending[r] == 0) ready.push(r);
  }
  if (static_cast<int>(order.size()) != num_nodes) {
    std::string names;
    int listed = 0;
    for (int i = 0; i < num_nodes && listed < 5; ++i)
      if (pending[i] > 0) names += (listed++ ? ", " : "") + node_label(graph.node(i));
    bad(what, "the graph has a cycle (nodes that wait on each other: " + names + ")");
  }
  for (const auto& out : graph.output()) {
    const int v = intern(out.name());
    if (!graph_inputs.count(v) && !initialized.count(v) && !producer.count(v))
      bad(what, "graph output '" + out.name() + "' is not produced by any node");
    g.outputs.push_back(v);
  }

  // ---- ops Ember lacks: all of them at once, by type -------------------------
  std::set<std::string> missing;
  for (const auto& n : graph.node())
    if (!op_table().find(n.op_type()) && !find_sequence_op(n.op_type())) missing.insert(n.op_type());
  if (!missing.empty()) {
    std::string list;
    for (const auto& s : missing) list += (list.empty() ? "" : ", ") + s;
    throw Unsupported(what + ": Ember has no implementation of the ONNX op" + (missing.size() > 1 ? "s " : " ") + list);
  }

  // Nodes in run order, in the proto too, which libonnx's checker requires.
  if (!std::is_sorted(order.begin(), order.end())) {
    google::protobuf::RepeatedPtrField<::onnx::NodeProto> sorted;
    for (int i : order) *sorted.Add() = graph.node(i);
    graph.mutable_node()->Swap(&sorted);
  }
  try {
    ::onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    bad(what, std::string("the ONNX checker rejects the model: ") + e.what());
  }

  // ---- the runner's view: ids, and when each value is last read ---------------
  std::vector<int> last_reader(g.values.size(), -1);
  g.nodes.resize(num_nodes);
  for (int k = 0; k < num_nodes; ++k) {
    const auto& n = graph.node(k);
    GraphNode& gn = g.nodes[k];
    gn.proto = &n;
    for (const auto& in : n.input()) {
      gn.inputs.push_back(in.empty() ? -1 : id.at(in));
      if (!in.empty()) last_reader[id.at(in)] = k;
    }
    for (const auto& o : n.output()) gn.outputs.push_back(o.empty() ? -1 : id.at(o));
  }
  std::vector<bool> kept(g.values.size(), false);
  for (int v : g.outputs) kept[v] = true;
  for (int k = 0; k < num_nodes; ++k) {
    GraphNode& gn = g.nodes[k];
    for (int v : gn.inputs)
      if (v >= 0 && last_reader[v] == k && !kept[v]) gn.frees.push_back(v);
    // An output nothing reads is dropped as soon as it is made.
    for (int v : gn.outputs)
      if (v >= 0 && last_reader[v] < 0 && !kept[v]) gn.frees.push_back(v);
    std::sort(gn.frees.begin(), gn.frees.end());
    gn.frees.erase(std::unique(gn.frees.begin(), gn.frees.end()), gn.frees.end());
  }
  return g;
}

}  // namespace ember::onnx::detail
