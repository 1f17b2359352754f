// Conformance rows: softmax family and normalisation.
#include "conformance.h"

namespace conformance {
using namespace ember;
namespace {

Register rows({
    {"softmax last dim", {F({3, 5})}, [](const In& x) { return softmax(x[0], -1); }},
    {"softmax dim 1 of 3", {F({2, 4, 3})}, [](const In& x) { return softmax(x[0], 1); }},
    {"log_softmax last dim", {F({3, 5})}, [](const In& x) { return log_softmax(x[0], 1); }},
    {"log_softmax dim 0", {F({4, 3})}, [](const In& x) { return log_softmax(x[0], 0); }},
    {"masked_softmax lens",
     {F({2, 3, 4})},
     [](const In& x) {
       return masked_softmax(x[0], from_vector(std::vector<int64_t>{2, 3}).to(x[0].device()));
     }},
    {"masked_softmax bool", {F({2, 3, 4}), B({3, 4})}, [](const In& x) { return masked_softmax(x[0], x[1]); }},
    {"masked_softmax causal",
     {F({2, 4, 4})},
     [](const In& x) { return masked_softmax(x[0], causal_mask(4, 4).to(x[0].device())); }},
    {"layer_norm", {F({3, 5})}, [](const In& x) { return layer_norm(x[0], {5}); }},
    {"layer_norm affine 2 dims",
     {F({2, 3, 4}), F({3, 4}), F({3, 4})},
     [](const In& x) {
       return layer_norm(x[0], {3, 4}, x[1], x[2]);
     }},
    {"batch_norm train (N,C)",
     {F({4, 3}), F({3}), F({3})},
     [](const In& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); }},
    {"batch_norm train (N,C,L)",
     {F({3, 2, 4})},
     [](const In& x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); }},
    {"dropout fixed seed",
     {F({4, 5})},
     [](const In& x) {
       Generator g(3);
       return dropout(x[0], 0.4, true, &g);
     }},
});

}  // namespace
}  // namespace conformance
