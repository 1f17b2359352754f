// ONNX import: the sequence ops (import_sequence.h). Positions may be
// negative (counted from the end); an insert position may also be the
// length (append).
#include <ember/onnx/import_sequence.h>

#include <unordered_map>

#include <ember/onnx/import_helpers.h>
#include <ember/ops/join.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<SeqValue>;
using Seqs = std::vector<const TensorSeq*>;

const TensorSeq& seq_input(const NodeArgs& a, const Seqs& s, size_t i) {
  if (i >= s.size() || !s[i]) a.invalid("input " + std::to_string(i) + " must be a sequence");
  return *s[i];
}

Outs make_seq(TensorSeq v) { return {SeqValue{Tensor(), std::make_shared<const TensorSeq>(std::move(v))}}; }

// A position input in [-n, n) (or [-n, n] when it may append).
int64_t position(const NodeArgs& a, size_t input, int64_t n, bool may_append) {
  const int64_t p = static_cast<int64_t>(scalar_value(a, input));
  const int64_t hi = may_append ? n : n - 1;
  if (p < -n || p > hi)
    a.invalid("position " + std::to_string(p) + " is out of range for a sequence of " + std::to_string(n));
  return p < 0 ? p + n : p;
}

Outs sequence_empty(const NodeArgs&, const Seqs&) { return make_seq({}); }

Outs sequence_construct(const NodeArgs& a, const Seqs&) {
  TensorSeq v;
  for (size_t i = 0; i < a.num_inputs(); ++i) v.push_back(a.input(i));
  return make_seq(std::move(v));
}

Outs sequence_insert(const NodeArgs& a, const Seqs& s) {
  TensorSeq v = seq_input(a, s, 0);
  const int64_t n = static_cast<int64_t>(v.size());
  const int64_t p = a.has_input(2) ? position(a, 2, n, true) : n;
  v.insert(v.begin() + p, a.input(1));
  return make_seq(std::move(v));
}

Outs sequence_erase(const NodeArgs& a, const Seqs& s) {
  TensorSeq v = seq_input(a, s, 0);
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0) a.invalid("cannot erase from an empty sequence");
  const int64_t p = a.has_input(1) ? position(a, 1, n, false) : n - 1;
  v.erase(v.begin() + p);
  return make_seq(std::move(v));
}

Outs sequence_at(const NodeArgs& a, const Seqs& s) {
  const TensorSeq& v = seq_input(a, s, 0);
  return {SeqValue{v[position(a, 1, static_cast<int64_t>(v.size()), false)], nullptr}};
}

Outs sequence_length(const NodeArgs& a, const Seqs& s) {
  return {SeqValue{scalar_tensor(static_cast<double>(seq_input(a, s, 0).size()), kInt64), nullptr}};
}

// cat along axis, or stack along a new axis (new_axis = 1, where axis may also be the new rank's last).
Outs concat_from_sequence(const NodeArgs& a, const Seqs& s) {
  const TensorSeq& v = seq_input(a, s, 0);
  if (v.empty()) a.invalid("cannot concatenate an empty sequence");
  const bool stack_new = a.attr_int("new_axis", 0) != 0;
  const int64_t rank = v[0].dim() + (stack_new ? 1 : 0);
  const int64_t axis = norm_axis(a, a.attr_int("axis"), rank);
  return {SeqValue{stack_new ? stack(v, axis) : cat(v, axis), nullptr}};
}

// Pieces of the given sizes (a 1-D split input), of one size (a scalar one, the last piece smaller), or
// of size 1 without the axis (no split input, keepdims = 0).
Outs split_to_sequence(const NodeArgs& a, const Seqs&) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 0), x.dim());
  if (!a.has_input(1)) {
    TensorSeq v = split(x, int64_t{1}, axis);
    if (a.attr_int("keepdims", 1) == 0)
      for (auto& t : v) t = t.squeeze(axis);
    return make_seq(std::move(v));
  }
  const Tensor& sp = a.input(1);
  const std::vector<int64_t> sizes = a.ints_input(1);
  if (sp.dim() == 0) {
    if (sizes[0] <= 0) a.invalid("split must be positive");
    return make_seq(split(x, sizes[0], axis));
  }
  int64_t total = 0;
  for (int64_t k : sizes) {
    if (k < 0) a.invalid("negative split size");
    total += k;
  }
  if (total != x.size(axis)) a.invalid("split sizes do not add up to the dim's size");
  return make_seq(split(x, sizes, axis));
}

}  // namespace

SeqOpImpl find_sequence_op(const std::string& op_type) {
  static const std::unordered_map<std::string, SeqOpImpl> table = {{"SequenceEmpty", sequence_empty},
                                                                   {"SequenceConstruct", sequence_construct},
                                                                   {"SequenceInsert", sequence_insert},
                                                                   {"SequenceErase", sequence_erase},
                                                                   {"SequenceAt", sequence_at},
                                                                   {"SequenceLength", sequence_length},
                                                                   {"ConcatFromSequence", concat_from_sequence},
                                                                   {"SplitToSequence", split_to_sequence}};
  auto it = table.find(op_type);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace ember::onnx::detail
