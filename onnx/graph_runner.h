/// \file
/// Running a graph read by model_reader.h (internal to ember_onnx): nodes in
/// order, each through the op table, the sequence ops or a control-flow op
/// (If, Loop, Scan, which run their subgraphs through this same runner);
/// values kept by id and dropped once their last reader ran.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ember/onnx/model_reader.h>

namespace ember::onnx::detail {

/// A value of a graph: a tensor, or a sequence of tensors.
struct Value {
  Tensor tensor;
  std::shared_ptr<const TensorSeq> seq;
  bool defined() const { return tensor.defined() || seq != nullptr; }
};

/// What every graph of one forward call shares.
struct RunContext {
  const std::string& what;  // the model, for errors
  int opset;
  /// Where the run happens: values made on another device (constants, shapes) are moved here.
  Device device;
  /// Each graph's initializer values by id (the main graph's are the module's own handles).
  const std::unordered_map<const Body*, std::vector<std::pair<int, Tensor>>>& initializers;
};

/// Runs body: inputs holds one value per graph input (an undefined one keeps that input's initializer), and
/// outer the values of the enclosing graph (for the body's captures; null for the main graph). Returns the
/// body's outputs.
std::vector<Value> run_body(const RunContext& ctx, const Body& body, const std::vector<Value>& inputs,
                            const std::vector<Value>* outer);

/// A control-flow node (If, Loop, Scan) on its inputs; vals are the values of the graph it is in (its
/// subgraphs' captures read them).
std::vector<Value> run_control_flow(const RunContext& ctx, const GraphNode& node, const std::vector<Value>& inputs,
                                    const std::vector<Value>& vals);

/// "node 'name' (OpType)".
std::string node_label(const ::onnx::NodeProto& n);

}  // namespace ember::onnx::detail
