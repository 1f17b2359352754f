/// \file
/// ONNX's sequence values inside a graph (internal to ember_onnx): the ops
/// that make, read and take apart lists of tensors (SequenceConstruct,
/// SequenceAt, SplitToSequence, ConcatFromSequence, ...).
///
/// The op table's implementations take and return tensors only, so these
/// have a table of their own, which the graph runner consults first: a
/// value of the graph is a tensor or a sequence, and a sequence never leaves
/// the graph (its inputs and outputs are tensors). The tensors in a sequence
/// are ordinary Ember tensors, so gradients flow through them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ember/onnx/import_ops.h>

namespace ember::onnx::detail {

using TensorSeq = std::vector<Tensor>;

/// One output of a sequence op: a tensor, or a sequence.
struct SeqValue {
  Tensor tensor;
  std::shared_ptr<const TensorSeq> seq;
};

/// A sequence op: args holds the node's tensor inputs (undefined where the input is a sequence), seqs the
/// sequences (null where the input is a tensor).
using SeqOpImpl = std::vector<SeqValue> (*)(const NodeArgs& args, const std::vector<const TensorSeq*>& seqs);

/// The implementation of a sequence op type, or nullptr.
SeqOpImpl find_sequence_op(const std::string& op_type);

}  // namespace ember::onnx::detail
