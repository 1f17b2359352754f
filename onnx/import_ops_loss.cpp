// ONNX import: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss,
// composed from gather and reductions so they differentiate in the input.
//
// Both take input (N, C) or (N, C, d1, ..., dk), integer targets (N) or
// (N, d1, ..., dk), optional class weights (C) and ignore_index:
//   loss[n, d] = -input[n, target[n, d], d] * weight[target[n, d]]
// (0 where target == ignore_index), then reduction "none", "sum", or "mean",
// which divides the sum by the weights of the targets that were not ignored.
#include <ember/onnx/import_ops.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/indexing.h>
#include <ember/ops/reduce.h>
#include <ember/ops/softmax.h>

namespace ember::onnx::detail {

namespace {

Tensor nll(const NodeArgs& a, const Tensor& log_probs, const Tensor& target, const Tensor& weight) {
  if (log_probs.dim() < 2) a.invalid("the input must be (N, C, ...)");
  if (target.dim() != log_probs.dim() - 1 || target.size(0) != log_probs.size(0))
    a.invalid(ember::detail::cat_str("target ", target.shape(), " does not fit input ", log_probs.shape()));
  if (target.dtype() != kInt64) a.invalid("target must be an integer tensor");
  const int64_t c = log_probs.size(1);
  Tensor t = target, keep;
  if (a.has_attr("ignore_index")) {
    keep = ne(target, static_cast<double>(a.attr_int("ignore_index")));
    t = where(keep, target, 0.0).to(kInt64);  // ignored targets may lie outside [0, C)
  }
  if (auto bad = find_bad_index(t, c))
    a.invalid(ember::detail::cat_str("target ", *bad, " is out of range for ", c, " classes"));
  Tensor loss = neg(gather(log_probs, 1, t.unsqueeze(1)).squeeze(1));
  // Each target's weight: the class weight (or 1), 0 where ignored.
  Tensor w;
  if (weight.defined()) w = index_select(weight, 0, t.reshape({-1})).reshape(t.shape());
  if (keep.defined()) w = w.defined() ? mul(w, keep.to(w.dtype())) : keep.to(loss.dtype());
  if (w.defined()) loss = mul(loss, w);
  const std::string reduction = a.attr_string("reduction", "mean");
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  if (reduction != "mean") a.invalid("reduction '" + reduction + "' is not one of none, sum, mean");
  return w.defined() ? div(sum(loss), sum(w)) : mean(loss);
}

std::vector<Tensor> nll_op(const NodeArgs& a) {
  return {nll(a, a.input(0), a.input(1), a.has_input(2) ? a.input(2) : Tensor())};
}

// The loss of log_softmax(scores) along the class dim, and (the optional
// second output) those log-probabilities.
std::vector<Tensor> sce_op(const NodeArgs& a) {
  const Tensor& scores = a.input(0);
  if (scores.dim() < 2) a.invalid("scores must be (N, C, ...)");
  const Tensor lp = log_softmax(scores, 1);
  return {nll(a, lp, a.input(1), a.has_input(2) ? a.input(2) : Tensor()), lp};
}

}  // namespace

void register_loss_ops(OpTable& t) {
  t.add("NegativeLogLikelihoodLoss", nll_op);
  t.add("SoftmaxCrossEntropyLoss", sce_op);
}

}  // namespace ember::onnx::detail
