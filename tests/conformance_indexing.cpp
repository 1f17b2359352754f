// Conformance rows: index_select, index_add, index_copy_, gather, scatter_add,
// embedding.
// Index inputs are Int rows (I(shape, low, high)) drawn in range, so every
// row is valid; repeats in them exercise the scatter-add backwards.
#include "conformance.h"

namespace conformance {
namespace {

Register rows({
    {"index_select dim 0", {F({4, 3}), I({5}, 0, 4)}, [](const In& x) { return index_select(x[0], 0, x[1]); }},
    {"index_select dim 1", {F({2, 4, 3}), I({6}, 0, 4)}, [](const In& x) { return index_select(x[0], 1, x[1]); }},
    {"index_select dim -1", {F({3, 5}), I({4}, 0, 5)}, [](const In& x) { return index_select(x[0], -1, x[1]); }},
    {"index_add", {F({4, 3}), F({6, 3}), I({6}, 0, 4)}, [](const In& x) { return index_add(x[0], 0, x[2], x[1]); }},
    // Past 64 entries CUDA sorts the index by destination (cuda/index_add.cu).
    {"index_add long index",
     {F({7, 3}), F({150, 3}), I({150}, 0, 7)},
     [](const In& x) { return index_add(x[0], 0, x[2], x[1]); }},
    {"embedding long index", {F({9, 4}), I({10, 20}, 0, 9)}, [](const In& x) { return embedding(x[0], x[1]); }},
    {"gather dim 0", {F({4, 3}), I({5, 3}, 0, 4)}, [](const In& x) { return gather(x[0], 0, x[1]); }},
    {"gather dim 1 smaller index", {F({3, 5}), I({2, 7}, 0, 5)}, [](const In& x) { return gather(x[0], 1, x[1]); }},
    {"gather 3-D dim 1", {F({2, 4, 3}), I({2, 5, 2}, 0, 4)}, [](const In& x) { return gather(x[0], 1, x[1]); }},
    {"scatter_add",
     {F({4, 3}), F({5, 3}), I({5, 3}, 0, 4)},
     [](const In& x) { return scatter_add(x[0], 0, x[2], x[1]); }},
    {"scatter_add partial src",
     {F({3, 4}), F({3, 5}), I({2, 3}, 0, 4)},
     [](const In& x) { return scatter_add(x[0], 1, x[2], x[1]); }},
    {"embedding", {F({6, 4}), I({3, 5}, 0, 6)}, [](const In& x) { return embedding(x[0], x[1]); }},
    // The padding row is treated as a constant (no gradient, as in PyTorch), so
    // gradcheck only holds when it is not looked up: indices in [1, 6), padding 0.
    {"embedding padding_idx", {F({6, 4}), I({2, 7}, 1, 6)}, [](const In& x) { return embedding(x[0], x[1], 0); }},
    // In place on a clone: the indexed rows replaced, the rest kept.
    {"index_copy dim 1",
     {C({2, 5, 3}), C({2, 3, 3}), I({3}, 0, 5)},
     [](const In& x) {
       Tensor out = x[0].clone();
       return index_copy_(out, 1, x[2], x[1]);
     },
     false},
    {"one_hot", {I({3, 4}, 0, 5)}, [](const In& x) { return one_hot(x[0], 5); }, false},
});

}  // namespace
}  // namespace conformance
