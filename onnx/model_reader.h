/// \file
/// Reading an ONNX file into a graph the importer can run (internal to
/// ember_onnx): the ModelProto parsed and validated before anything runs,
/// each graph's nodes in an order where every value is produced before it is
/// read, and every value named by a small integer so the runner keeps them
/// in a vector instead of a map.
///
/// A graph may hold subgraphs (If's branches, Loop's and Scan's bodies) as
/// node attributes; each is a Body of its own, with its own ids, which may
/// read values of the graphs around it (its captures).
///
/// Every problem with the bytes is one IOError naming the file (`what`) and
/// what is wrong; something valid that Ember does not implement (an op, a
/// domain, external data) is Unsupported. Nothing is allocated from a size
/// the file claims before that size has been checked against the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include <ember/onnx/import_ops.h>
#include <ember/onnx/import_sequence.h>

namespace ember::onnx::detail {

/// The newest opset of the default domain the reader accepts (what libonnx 1.12 knows).
inline constexpr int kMaxReadOpset = 17;

struct Body;

/// One node as the runner sees it: its proto, its implementation and its values by id (-1 for an
/// omitted optional one).
struct GraphNode {
  const ::onnx::NodeProto* proto = nullptr;
  OpImpl op = nullptr;         // from the op table, or
  SeqOpImpl seq_op = nullptr;  // a sequence op, or neither: a control-flow op (If, Loop, Scan)
  std::vector<int> inputs;
  std::vector<int> outputs;
  /// Values of this graph that the node's subgraphs read (kept until the node ran).
  std::vector<int> captured;
  /// The node's graph attributes by name (then_branch, else_branch, body).
  std::vector<std::pair<std::string, std::shared_ptr<const Body>>> graphs;
  /// Values whose last reader is this node: freed once it ran.
  std::vector<int> frees;

  /// The graph attribute `name`, or null.
  const Body* graph(const std::string& name) const {
    for (const auto& [n, b] : graphs)
      if (n == name) return b.get();
    return nullptr;
  }
};

/// One graph, validated, nodes in topological order.
struct Body {
  /// Value names by id, and each one's ONNX element type where the file says it, else 0.
  std::vector<std::string> values;
  std::vector<int> types;
  /// All graph inputs in order, and those without an initializer (required at run time).
  std::vector<int> inputs;
  std::vector<int> required;
  std::vector<int> outputs;
  /// Initializers: the proto and the value id, in file order.
  std::vector<std::pair<const ::onnx::TensorProto*, int>> initializers;
  /// Values read from the enclosing graph: (id there, id here).
  std::vector<std::pair<int, int>> captures;
  std::vector<GraphNode> nodes;
};

/// A validated model.
struct ReadGraph {
  /// Owns the protos the bodies point into.
  std::unique_ptr<::onnx::ModelProto> model;
  /// The default domain's opset.
  int opset = 0;
  /// The main graph.
  std::shared_ptr<const Body> main;
};

/// Parses and validates bytes (see the file comment); `what` names them in errors.
ReadGraph read_graph(const std::string& bytes, const std::string& what);

}  // namespace ember::onnx::detail
