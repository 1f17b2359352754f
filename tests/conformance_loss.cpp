// Conformance rows: mse_loss, cross_entropy, nll_loss and
// binary_cross_entropy_with_logits, each reduction. Class targets are Int
// inputs; the ignore_index rows build their targets in the row's function so
// a known set of rows is ignored.
#include "conformance.h"

namespace conformance {
namespace {

using ember::Reduction;

// targets with every third entry replaced by ignore_index.
Tensor with_ignored(const Tensor& target, int64_t ignore_index) {
  std::vector<int64_t> v = target.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 3) v[i] = ignore_index;
  return ember::from_vector(v, target.shape()).to(target.device());
}

Register rows({
    {"mse_loss none", {F({3, 4}), C({3, 4})}, [](const In& x) { return mse_loss(x[0], x[1], Reduction::None); }},
    {"mse_loss mean", {F({3, 4}), F({3, 4})}, [](const In& x) { return mse_loss(x[0], x[1]); }},
    {"mse_loss sum", {F({5}), C({5})}, [](const In& x) { return mse_loss(x[0], x[1], Reduction::Sum); }},
    {"cross_entropy mean", {F({4, 5}), I({4}, 0, 5)}, [](const In& x) { return cross_entropy(x[0], x[1]); }},
    {"cross_entropy none",
     {F({4, 5}), I({4}, 0, 5)},
     [](const In& x) { return cross_entropy(x[0], x[1], Reduction::None); }},
    {"cross_entropy sum smoothing",
     {F({4, 5}), I({4}, 0, 5)},
     [](const In& x) { return cross_entropy(x[0], x[1], Reduction::Sum, -100, 0.1); }},
    {"cross_entropy smoothing ignore_index",
     {F({6, 5}), I({6}, 0, 5)},
     [](const In& x) { return cross_entropy(x[0], with_ignored(x[1], -100), Reduction::Mean, -100, 0.1); }},
    {"cross_entropy 3-D smoothing ignore_index",
     {F({3, 4, 5}), I({3, 5}, 0, 4)},
     [](const In& x) { return cross_entropy(x[0], with_ignored(x[1], 7), Reduction::Mean, 7, 0.2); }},
    {"cross_entropy 3-D none",
     {F({2, 3, 4}), I({2, 4}, 0, 3)},
     [](const In& x) { return cross_entropy(x[0], x[1], Reduction::None); }},
    {"nll_loss mean ignore_index",
     {F({6, 4}), I({6}, 0, 4)},
     [](const In& x) { return nll_loss(x[0], with_ignored(x[1], -100)); }},
    {"nll_loss 3-D none",
     {F({2, 3, 4}), I({2, 4}, 0, 3)},
     [](const In& x) { return nll_loss(x[0], x[1], Reduction::None); }},
    {"nll_loss sum", {F({4, 3}), I({4}, 0, 3)}, [](const In& x) { return nll_loss(x[0], x[1], Reduction::Sum); }},
    {"binary_cross_entropy_with_logits mean",
     {F({3, 4}), C({3, 4})},
     [](const In& x) { return binary_cross_entropy_with_logits(x[0], ember::div(ember::add(x[1], 2.0), 4.0)); }},
    {"binary_cross_entropy_with_logits none target grad",
     {F({3, 4}), F({3, 4})},
     [](const In& x) { return binary_cross_entropy_with_logits(x[0], x[1], Reduction::None); }},
    {"binary_cross_entropy_with_logits sum pos_weight",
     {F({3, 4}), C({3, 4}), P({4})},
     [](const In& x) {
       return binary_cross_entropy_with_logits(x[0], ember::div(ember::add(x[1], 2.0), 4.0), Reduction::Sum, x[2]);
     }},
});

}  // namespace
}  // namespace conformance
