/// \file
/// The graph ONNX export builds (internal to ember_onnx): an implementation
/// of lowering::Graph over a protobuf GraphProto, fed one recorded call at a
/// time by export.cpp.
///
/// Dynamic axes. Export records the forward pass once per corner of the
/// dynamic sizes (each symbol at its example size and at a size one off),
/// so that every integer argument is known at each corner. An argument
/// that differs between corners is a multilinear polynomial in the symbols
/// (B, T, B*T, ..., with integer coefficients: what reshapes of a batch
/// produce); `ints()` writes it as arithmetic on the input's Shape, so the
/// graph works at any size. An argument a lowering reads as a constant must
/// not differ, and a constant tensor (made by an op export does not see)
/// must be the same at every corner: otherwise the export is refused, since
/// the graph would be right at one size only.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <ember/core/onnx_lowering.h>
#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

/// A dynamic size named `name`: graph input `input`'s axis `axis` (and the axes in `shared`).
struct Symbol {
  std::string name;
  size_t input = 0;
  int axis = 0;
  int64_t size = 0;   ///< at the example
  int64_t delta = 0;  ///< the other corner's size minus size
  /// Other inputs' axes given the same name (a batch shared by a model's
  /// inputs): they move with it at each corner, or the inputs would disagree.
  std::vector<std::pair<size_t, int>> shared = {};
};

/// The recorded calls of one forward pass, and its inputs and outputs.
struct Trace {
  std::vector<Tensor> inputs;
  std::vector<lowering::Call> calls;
  std::vector<Tensor> outputs;
};

class GraphBuilder : public lowering::Graph {
 public:
  /// traces[k] ran at corner k (bit s of k: symbol s moved by its delta); traces[0] is the example.
  GraphBuilder(::onnx::GraphProto& g, const std::vector<Trace>& traces, std::vector<Symbol> symbols,
               const std::map<const TensorImpl*, std::string>& initializers, const std::vector<std::string>& inputs);

  /// Lowers every call of traces[0] in order.
  void lower_all();
  /// Names the graph outputs (renaming the values that hold them where it can).
  void finish_outputs(const std::vector<std::string>& names);

  std::string value(const Tensor& t) override;
  std::string ints(const lowering::Call& call, size_t i) override;
  std::string shape(const lowering::Call& call, size_t j) override;
  std::string constant_ints(const std::vector<int64_t>& v) override;
  std::string scalar(double v, DType dt) override;
  std::vector<std::string> node(const std::string& op_type, const std::vector<std::string>& inputs,
                                const std::vector<lowering::Attr>& attrs, int n_outputs) override;
  void bind(const Tensor& t, const std::string& value) override;

  /// The polynomial of sizes for dim d of the j-th output (or input) at every corner: "" when constant,
  /// else the symbol's name when it is exactly one symbol, else a new name.
  std::string dim_param(const std::vector<int64_t>& corner_values);

 private:
  std::string fresh(const std::string& base);
  std::string add_initializer(const Tensor& t, const std::string& name);
  std::string add_constant(const Tensor& t, const std::string& name);
  // The polynomial's coefficients (one per subset of symbols) for values at every corner.
  std::vector<int64_t> fit(const std::vector<int64_t>& corner_values, const std::string& what) const;
  std::string symbol_value(size_t s);
  std::string poly_value(const std::vector<int64_t>& coeffs);
  // A list of integers known at every corner, as a 1-D int64 value.
  std::string corner_ints(const std::vector<std::vector<int64_t>>& corners, const std::string& what);
  const Tensor* corner_arg_tensor(size_t corner, const Tensor& t) const;

  ::onnx::GraphProto& g_;
  const std::vector<Trace>& traces_;
  std::vector<Symbol> symbols_;
  std::map<const TensorImpl*, std::string> values_;
  const std::map<const TensorImpl*, std::string>& initializers_;
  std::set<std::string> used_names_;
  std::map<size_t, std::string> symbol_values_;
  size_t call_ = 0;                 // the call being lowered
  std::set<size_t> symbolic_args_;  // its arguments read through ints()
  int counter_ = 0;
};

}  // namespace ember::onnx::detail
