// Parsing and validating an ONNX ModelProto (model_reader.h): the checks run
// in the order a broken file is most usefully reported (does it parse, which
// opsets, are its sizes sane, is each graph well formed, can Ember run every
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

// Calls f on every node of graph and of the subgraphs in its nodes' attributes.
template <class F>
void for_each_node(const ::onnx::GraphProto& graph, const F& f) {
  for (const auto& n : graph.node()) {
    f(n);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) for_each_node(a.g(), f);
      for (const auto& g : a.graphs()) for_each_node(g, f);
    }
  }
}

bool control_flow(const std::string& op) { return op == "If" || op == "Loop" || op == "Scan"; }

// A name read in a graph, looked up in the graphs around it: its id in the enclosing graph (captured there
// from further out when needed), or -1.
using Outer = std::function<int(const std::string&)>;

// Reads one graph into a Body, its subgraphs recursively; collects the op types nobody implements.
class BodyReader {
 public:
  explicit BodyReader(const std::string& what) : what_(what) {}
  std::set<std::string> missing;

  std::shared_ptr<Body> read(::onnx::GraphProto& graph, const Outer& outer) {
    auto b = std::make_shared<Body>();
    std::unordered_map<std::string, int> id;
    auto intern = [&](const std::string& name) {
      auto [it, fresh] = id.emplace(name, static_cast<int>(b->values.size()));
      if (fresh) b->values.push_back(name);
      return it->second;
    };
    std::set<int> initialized, inputs;
    for (const auto& t : graph.initializer()) {
      if (t.name().empty()) bad(what_, "an initializer has no name");
      const int v = intern(t.name());
      if (!initialized.insert(v).second) bad(what_, "initializer '" + t.name() + "' is given twice");
      b->initializers.emplace_back(&t, v);
    }
    for (const auto& in : graph.input()) {
      if (in.name().empty()) bad(what_, "a graph input has no name");
      const int v = intern(in.name());
      if (!inputs.insert(v).second) bad(what_, "graph input '" + in.name() + "' is listed twice");
      b->inputs.push_back(v);
      if (!initialized.count(v)) b->required.push_back(v);
    }
    // ---- producers ------------------------------------------------------------
    const int num_nodes = graph.node_size();
    std::unordered_map<int, int> producer;  // value id -> node index
    for (int i = 0; i < num_nodes; ++i)
      for (const auto& o : graph.node(i).output()) {
        if (o.empty()) continue;
        const int v = intern(o);
        if (inputs.count(v) || initialized.count(v))
          bad(what_, node_label(graph.node(i)) + " writes '" + o + "', which is a graph input or initializer");
        if (!producer.emplace(v, i).second)
          bad(what_, "value '" + o + "' is written by two nodes (" + node_label(graph.node(producer[v])) + " and " +
                         node_label(graph.node(i)) + ")");
      }
    // A name defined here, or one of an enclosing graph (captured), or -1.
    std::function<int(const std::string&)> resolve = [&](const std::string& name) {
      auto it = id.find(name);
      if (it != id.end()) return it->second;
      const int o = outer ? outer(name) : -1;
      if (o < 0) return -1;
      const int v = intern(name);
      b->captures.emplace_back(o, v);
      return v;
    };
    // ---- nodes: inputs resolved (dangling ones refused), subgraphs read --------
    b->nodes.resize(num_nodes);
    std::vector<std::set<int>> deps(num_nodes);
    for (int i = 0; i < num_nodes; ++i) {
      ::onnx::NodeProto& n = *graph.mutable_node(i);
      GraphNode& gn = b->nodes[i];
      gn.proto = &n;
      for (const auto& in : n.input()) {
        if (in.empty()) {
          gn.inputs.push_back(-1);
          continue;
        }
        const int v = resolve(in);
        if (v < 0)
          bad(what_, node_label(n) + " reads '" + in +
                         "', which is neither a graph input, an initializer nor any node's output (a dangling input)");
        gn.inputs.push_back(v);
        if (producer.count(v)) deps[i].insert(producer[v]);
      }
      for (auto& a : *n.mutable_attribute()) {
        if (a.graphs_size() > 0) bad(what_, node_label(n) + " has a list of graphs (attribute '" + a.name() + "')");
        if (!a.has_g()) continue;
        auto sub = read(*a.mutable_g(), resolve);
        for (const auto& [there, here] : sub->captures) {
          gn.captured.push_back(there);
          if (producer.count(there)) deps[i].insert(producer[there]);
        }
        gn.graphs.emplace_back(a.name(), std::move(sub));
      }
      for (const auto& o : n.output()) gn.outputs.push_back(o.empty() ? -1 : id.at(o));
      gn.seq_op = find_sequence_op(n.op_type());
      gn.op = gn.seq_op ? nullptr : op_table().find(n.op_type());
      if (!gn.op && !gn.seq_op && !control_flow(n.op_type())) missing.insert(n.op_type());
    }
    for (const auto& out : graph.output()) {
      const int v = resolve(out.name());
      if (v < 0) bad(what_, "graph output '" + out.name() + "' is not produced by any node");
      b->outputs.push_back(v);
    }
    sort_nodes(graph, *b, deps);
    declare_types(graph, *b, id);
    plan_frees(*b);
    return b;
  }

 private:
  // Kahn's algorithm, smallest index first (a graph already in order keeps it); the protos are put in the
  // same order, which libonnx's checker requires, by swapping their pointers (the NodeProtos stay where
  // they are, so the GraphNodes' pointers hold).
  void sort_nodes(::onnx::GraphProto& graph, Body& b, const std::vector<std::set<int>>& deps) {
    const int num_nodes = static_cast<int>(b.nodes.size());
    std::vector<std::vector<int>> readers(num_nodes);
    std::vector<int> pending(num_nodes, 0);
    for (int i = 0; i < num_nodes; ++i) {
      for (int d : deps[i]) readers[d].push_back(i);
      pending[i] = static_cast<int>(deps[i].size());
    }
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
      bad(what_, "the graph has a cycle (nodes that wait on each other: " + names + ")");
    }
    if (std::is_sorted(order.begin(), order.end())) return;
    std::vector<GraphNode> sorted;
    for (int i : order) sorted.push_back(std::move(b.nodes[i]));
    b.nodes = std::move(sorted);
    // where[i]: the position of original node i in the proto now; at[p]: the original node at position p.
    std::vector<int> where(num_nodes), at(num_nodes);
    for (int i = 0; i < num_nodes; ++i) where[i] = at[i] = i;
    for (int p = 0; p < num_nodes; ++p) {
      const int q = where[order[p]];
      if (q == p) continue;
      graph.mutable_node()->SwapElements(p, q);
      std::swap(at[p], at[q]);
      where[at[p]] = p, where[at[q]] = q;
    }
  }

  // Element types the file states: declared values, initializers, Constant values and Cast targets.
  static void declare_types(const ::onnx::GraphProto& graph, Body& b, const std::unordered_map<std::string, int>& id) {
    b.types.assign(b.values.size(), 0);
    auto declare = [&](const std::string& name, int type) {
      auto it = id.find(name);
      if (it != id.end() && it->second < static_cast<int>(b.types.size()) && type > 0) b.types[it->second] = type;
    };
    auto declared = [&](const ::onnx::ValueInfoProto& v) {
      if (v.type().has_tensor_type()) declare(v.name(), v.type().tensor_type().elem_type());
    };
    for (const auto& v : graph.value_info()) declared(v);
    for (const auto& v : graph.input()) declared(v);
    for (const auto& v : graph.output()) declared(v);
    for (const auto& t : graph.initializer()) declare(t.name(), t.data_type());
    for (const auto& n : graph.node()) {
      if (n.output_size() < 1) continue;
      for (const auto& at : n.attribute()) {
        if (n.op_type() == "Constant" && at.name() == "value" && at.has_t()) declare(n.output(0), at.t().data_type());
        if (n.op_type() == "Cast" && at.name() == "to") declare(n.output(0), static_cast<int>(at.i()));
      }
    }
  }

  // When each value is last read (by a node's inputs or its subgraphs), so the runner can drop it then;
  // the graph's outputs are kept.
  static void plan_frees(Body& b) {
    const int num_nodes = static_cast<int>(b.nodes.size());
    std::vector<int> last_reader(b.values.size(), -1);
    for (int k = 0; k < num_nodes; ++k) {
      for (int v : b.nodes[k].inputs)
        if (v >= 0) last_reader[v] = k;
      for (int v : b.nodes[k].captured) last_reader[v] = k;
    }
    std::vector<bool> kept(b.values.size(), false);
    for (int v : b.outputs) kept[v] = true;
    for (int k = 0; k < num_nodes; ++k) {
      GraphNode& gn = b.nodes[k];
      for (const auto& reads : {gn.inputs, gn.captured})
        for (int v : reads)
          if (v >= 0 && last_reader[v] == k && !kept[v]) gn.frees.push_back(v);
      // An output nothing reads is dropped as soon as it is made.
      for (int v : gn.outputs)
        if (v >= 0 && last_reader[v] < 0 && !kept[v]) gn.frees.push_back(v);
      std::sort(gn.frees.begin(), gn.frees.end());
      gn.frees.erase(std::unique(gn.frees.begin(), gn.frees.end()), gn.frees.end());
    }
  }

  const std::string& what_;
};

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
  for_each_node(graph, [&](const ::onnx::NodeProto& n) {
    if (!default_domain(n.domain()))
      throw Unsupported(what + ": " + node_label(n) + " is in domain '" + n.domain() +
                        "'; Ember implements the default ONNX domain only");
  });
  g.opset = read_opset(m, what);
  if (graph.sparse_initializer_size() > 0) throw Unsupported(what + ": sparse initializers are not supported");

  // ---- sizes, before anything is converted or allocated ----------------------
  auto check_sizes = [&](const ::onnx::GraphProto& gr) {
    for (const auto& t : gr.initializer()) check_dims(t.dims(), what, "initializer '" + t.name() + "'");
    for (const auto& v : gr.input()) check_value_info(v, what);
    for (const auto& v : gr.output()) check_value_info(v, what);
  };
  check_sizes(graph);
  for_each_node(graph, [&](const ::onnx::NodeProto& n) {
    for (const auto& a : n.attribute()) {
      if (a.has_t()) check_dims(a.t().dims(), what, node_label(n) + " attribute '" + a.name() + "'");
      if (a.has_g()) check_sizes(a.g());
    }
  });

  // ---- each graph well formed; then the ops Ember lacks, all at once ---------
  BodyReader reader(what);
  g.main = reader.read(graph, nullptr);
  if (!reader.missing.empty()) {
    std::string list;
    for (const auto& s : reader.missing) list += (list.empty() ? "" : ", ") + s;
    throw Unsupported(what + ": Ember has no implementation of the ONNX op" + (reader.missing.size() > 1 ? "s " : " ") +
                      list);
  }
  try {
    ::onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    bad(what, std::string("the ONNX checker rejects the model: ") + e.what());
  }
  return g;
}

}  // namespace ember::onnx::detail
