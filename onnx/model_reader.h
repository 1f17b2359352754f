/// \file
/// Reading an ONNX file into a graph the importer can run (internal to
/// ember_onnx): the ModelProto parsed and validated before anything runs,
/// its nodes in an order where every value is produced before it is read,
/// and every value named by a small integer so the runner keeps them in a
/// vector instead of a map.
///
/// Every problem with the bytes is one IOError naming the file (`what`) and
/// what is wrong; something valid that Ember does not implement (an op, a
/// domain, external data) is Unsupported. Nothing is allocated from a size
/// the file claims before that size has been checked against the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace ember::onnx::detail {

/// The newest opset of the default domain the reader accepts (what libonnx 1.12 knows).
inline constexpr int kMaxReadOpset = 17;

/// One node as the runner sees it: its proto and its values by id (-1 for an omitted optional one).
struct GraphNode {
  const ::onnx::NodeProto* proto = nullptr;
  std::vector<int> inputs;
  std::vector<int> outputs;
  /// Values whose last reader is this node: freed once it ran.
  std::vector<int> frees;
};

/// A validated graph, nodes in topological order.
struct ReadGraph {
  /// Owns the protos the nodes point into.
  std::unique_ptr<::onnx::ModelProto> model;
  /// The default domain's opset.
  int opset = 0;
  /// Value names by id.
  std::vector<std::string> values;
  /// Graph inputs that are not initializers (required at run time), and all graph inputs, as value ids.
  std::vector<int> inputs;
  std::vector<int> all_inputs;
  /// Graph outputs as value ids.
  std::vector<int> outputs;
  /// Initializers: the proto and the value id, in file order.
  std::vector<std::pair<const ::onnx::TensorProto*, int>> initializers;
  std::vector<GraphNode> nodes;
};

/// Parses and validates bytes (see the file comment); `what` names them in errors.
ReadGraph read_graph(const std::string& bytes, const std::string& what);

}  // namespace ember::onnx::detail
