/// \file
/// The importer's op table: for each ONNX op type, the function that runs
/// one node with Ember's ops (internal to ember_onnx).
///
/// An implementation receives the node's inputs as tensors and reads its
/// attributes through NodeArgs; it returns the node's outputs in order (as
/// many as the node names, or more; extra ones are dropped). Everything it
/// computes goes through Ember's public ops, so autograd, devices and dtypes
/// work through an imported graph as through a native model.
///
/// Data types: ONNX's integer types (int8 ... uint64) are held as int64 and
/// its bool as bool, float/double/float16/bfloat16 as themselves; the graph
/// runner converts at the edges. An implementation that meets something it
/// does not do throws Unsupported through args.unsupported(...), naming it.
///
/// Each group of ops lives in its own file with one registration function,
/// called from import_ops.cpp (a function, not a static registrar: a static
/// archive drops object files that nothing names).
///
/// Note: inside namespace ember::onnx, protobuf's namespace is `::onnx`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <onnx/onnx_pb.h>

#include <ember/core/tensor.h>
#include <ember/onnx/onnx.h>

namespace ember::onnx::detail {

/// One node's inputs and attributes, as its implementation sees them.
class NodeArgs {
 public:
  NodeArgs(const ::onnx::NodeProto& node, std::vector<Tensor> inputs, int opset);

  const std::string& op_type() const { return node_.op_type(); }
  /// The model's opset for the node's domain (attributes and inputs moved between versions).
  int opset() const { return opset_; }
  const ::onnx::NodeProto& proto() const { return node_; }

  /// How many inputs the node names (omitted optional ones, named "", count).
  size_t num_inputs() const { return inputs_.size(); }
  /// Whether input i is given (named and not "").
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].defined(); }
  /// Input i; throws ValueError naming the node when it is missing.
  const Tensor& input(size_t i) const;
  /// How many outputs the node names.
  size_t num_outputs() const { return static_cast<size_t>(node_.output_size()); }
  /// Whether output i is named (an optional output may be "").
  bool wants_output(size_t i) const;

  bool has_attr(const std::string& name) const;
  /// Attribute values; the overload with a default returns it when the attribute is absent, the other throws.
  int64_t attr_int(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  float attr_float(const std::string& name) const;
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& fallback) const;
  std::vector<float> attr_floats(const std::string& name) const;
  std::vector<float> attr_floats(const std::string& name, const std::vector<float>& fallback) const;
  /// A TENSOR attribute (Constant's value), converted as an initializer is.
  Tensor attr_tensor(const std::string& name) const;

  /// An int64 input's values on the host (shapes, axes, pads); throws ValueError when it is not int64-typed.
  std::vector<int64_t> ints_input(size_t i) const;

  /// The ONNX element type (TensorProto::DataType) of input i where the file says it (a graph input's or
  /// output's declared type, an initializer's, a Constant's, a Cast's target, value_info), else 0: tells
  /// an int8 held in int64 from a uint8 (QuantizeLinear's zero point).
  int input_type(size_t i) const { return i < input_types_.size() ? input_types_[i] : 0; }
  /// Set by the graph runner.
  void set_input_types(std::vector<int> types) { input_types_ = std::move(types); }

  /// Throws Unsupported: "<op_type> (node '<name>'): <what>".
  [[noreturn]] void unsupported(const std::string& what) const;
  /// Throws ValueError with the same prefix.
  [[noreturn]] void invalid(const std::string& what) const;

 private:
  const ::onnx::AttributeProto* find(const std::string& name) const;
  const ::onnx::NodeProto& node_;
  std::vector<Tensor> inputs_;
  int opset_;
  std::vector<int> input_types_;
};

using OpImpl = std::vector<Tensor> (*)(const NodeArgs& args);

/// ONNX op type -> implementation (default domain "" and "ai.onnx").
class OpTable {
 public:
  void add(const std::string& op_type, OpImpl fn) { ops_[op_type] = fn; }
  /// nullptr when Ember has no implementation.
  OpImpl find(const std::string& op_type) const {
    auto it = ops_.find(op_type);
    return it == ops_.end() ? nullptr : it->second;
  }
  size_t size() const { return ops_.size(); }

 private:
  std::unordered_map<std::string, OpImpl> ops_;
};

/// The table with every group registered (built once).
const OpTable& op_table();

/// The groups, one per file (import_ops_<group>.cpp).
void register_elementwise_ops(OpTable& t);  // arithmetic, math, comparison, logic
void register_activation_ops(OpTable& t);   // activation functions
void register_tensor_ops(OpTable& t);       // shape, views, concat/split, casts, constants
void register_indexing_ops(OpTable& t);     // gather/scatter, pad, tile, one-hot, trilu, nonzero
void register_quantize_ops(OpTable& t);     // QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear
void register_signal_ops(OpTable& t);       // window functions, DFT, STFT, MelWeightMatrix
void register_detection_ops(OpTable& t);    // NonMaxSuppression
void register_text_ops(OpTable& t);         // TfIdfVectorizer
void register_reduce_ops(OpTable& t);       // reductions, arg max/min, cumulative ops, top-k
void register_nn_ops(OpTable& t);           // matmul/Gemm, normalisations, softmax, dropout
void register_conv_ops(OpTable& t);         // convolutions and pools
void register_loss_ops(OpTable& t);         // NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
void register_resize_ops(OpTable& t);       // Resize, Upsample
void register_sampling_ops(OpTable& t);     // GridSample, RoiAlign
void register_rnn_ops(OpTable& t);          // RNN, GRU, LSTM

/// The dtype that holds ONNX element type t (TensorProto::DataType): float types as themselves, every integer
/// type as int64, bool as bool; nullopt for strings, complex numbers and unknown types.
std::optional<DType> dtype_of_element(int64_t t);
/// A TensorProto as an Ember tensor (float types kept; integer types as int64; bool as bool). Throws
/// Unsupported for strings and complex numbers, IOError for data that disagrees with its dims.
Tensor from_proto(const ::onnx::TensorProto& t, const std::string& what);
/// An Ember tensor as a TensorProto of ONNX element type elem_type (0: the tensor's own type).
void to_proto(const Tensor& t, ::onnx::TensorProto& out, int elem_type = 0);

}  // namespace ember::onnx::detail
