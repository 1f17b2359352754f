/// \file
/// ONNX in and out (docs/ONNX.md): export_model writes an Ember model as an
/// ONNX file (opset 17) by recording the ops one forward pass runs; load
/// reads an ONNX file as an nn::Module whose forward runs the graph with
/// Ember's ops, so it trains, moves between devices and dtypes, and saves
/// like any other module.
///
/// The file format is Debian's libonnx (onnx.proto, the checker, shape
/// inference); this layer, ember_onnx, sits above nn/ and is the only one
/// that sees protobuf.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/error.h>
#include <ember/core/tensor.h>
#include <ember/nn/module.h>

namespace ember::onnx {

/// The opset export writes and the newest one load accepts.
inline constexpr int kOpset = 17;

/// Something the model uses that Ember does not implement (an op, an
/// attribute value, a data type): the message names it. Distinct from a
/// wrong result or a broken file (IOError, ValueError), so callers such as
/// the conformance runner can tell "not supported" from "failed".
class Unsupported : public ValueError {
 public:
  using ValueError::ValueError;
};

/// How export_model names and shapes the graph's inputs and outputs.
struct ExportOptions {
  /// Graph input names, one per example input; default "input", "input_1", ...
  std::vector<std::string> input_names = {};
  /// Graph output names; default "output", "output_1", ...
  std::vector<std::string> output_names = {};
  /// Axes whose size is left symbolic, by input or output name:
  /// {"input": {{0, "batch"}}}, as torch.onnx.export's dynamic_axes.
  std::map<std::string, std::map<int, std::string>> dynamic_axes = {};
  /// Written as the model's producer_name / doc_string.
  std::string doc_string = {};
};

/// The function export records: inputs to outputs, in order.
using ForwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Runs forward(example_inputs) once in eval mode, without gradients,
/// recording every op as ONNX nodes; module's parameters and buffers become
/// initializers under their state-dict names. The model is checked (the ONNX
/// checker, strict shape inference, and the graph run by load() at every
/// recorded size against the model's own outputs) before it is written,
/// atomically, to path. An op without an ONNX lowering throws Unsupported naming it, and
/// nothing is written. The module's training mode is restored afterwards.
void export_model(nn::Module& module, const ForwardFn& forward, const std::vector<Tensor>& example_inputs,
                  const std::string& path, const ExportOptions& options = {});
/// The same for module.forward(x).
void export_model(nn::Module& module, const Tensor& example_input, const std::string& path,
                  const ExportOptions& options = {});

/// An imported ONNX graph as a module. Its initializers of floating dtype
/// are parameters, the others buffers (and so are running statistics read
/// only by BatchNormalization), named as in the file: "fc1.weight"
/// is the parameter "weight" of a child module "fc1", so state_dict() keys
/// are the initializer names. A name that is not a module path (an empty
/// part, a character other than letters, digits and '_', as in
/// "onnx::Conv_12" or "/conv1/Conv_output_0") has each such character
/// replaced by '_' ("onnx__Conv_12"); a name that would clash with another
/// gets a suffix "_2", "_3", ... (state_dict_names() lists the mapping).
class Model : public nn::Module {
 public:
  ~Model() override;
  /// Runs the graph: inputs in the order of input_names(), outputs in the
  /// order of output_names(). Graph inputs that have an initializer are
  /// optional overrides (ONNX IR >= 4): given as many tensors as the graph
  /// has inputs in all, they are matched to all of them in file order, and
  /// an undefined tensor keeps the initializer.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs);
  /// Runs a graph with one input and one output.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "onnx::Model"; }
  /// The graph's inputs that are not initializers, and its outputs.
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;
  /// The model's opset (default domain).
  int opset() const;
  /// Every initializer's ONNX name with its state-dict key, in file order.
  const std::vector<std::pair<std::string, std::string>>& state_dict_names() const;

  struct Impl;

 private:
  friend std::shared_ptr<Model> load(const std::string& path);
  friend std::shared_ptr<Model> load_from_bytes(const std::string& bytes, const std::string& what);
  Model();
  std::unique_ptr<Impl> impl_;
};

/// Reads an ONNX file. A truncated or corrupt file, an unknown opset or
/// domain, a cycle, a dangling input, absurd dims or an initializer larger
/// than its file throw IOError naming the file and what is wrong; an op or
/// attribute Ember lacks throws Unsupported at load time, naming it.
std::shared_ptr<Model> load(const std::string& path);
/// The same from bytes in memory; `what` names them in errors (the fuzzer).
std::shared_ptr<Model> load_from_bytes(const std::string& bytes, const std::string& what = "ONNX model");

}  // namespace ember::onnx
