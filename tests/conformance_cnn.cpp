// Conformance rows: the CNN teacher's ops (2-d pooling, batch_norm over
// (N, C, H, W)) and drop_path (the same Philox draws on every backend).
#include "conformance.h"

namespace conformance {
using namespace ember;
namespace {

Register rows({
    {"max_pool2d pad stride",
     {F({2, 2, 5, 4})},
     [](const In& x) {
       return max_pool2d(x[0], {3, 2}, {2, 1}, {1, 1});
     }},
    {"max_pool2d default stride",
     {F({1, 3, 4, 6})},
     [](const In& x) {
       return max_pool2d(x[0], {2, 2});
     }},
    {"avg_pool2d count_include_pad",
     {F({2, 2, 5, 4})},
     [](const In& x) {
       return avg_pool2d(x[0], {3, 3}, {2, 1}, {1, 1});
     }},
    {"avg_pool2d exclude pad",
     {F({2, 2, 5, 4})},
     [](const In& x) {
       return avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1}, false);
     }},
    {"adaptive_avg_pool2d 3x2",
     {F({2, 2, 5, 4})},
     [](const In& x) {
       return adaptive_avg_pool2d(x[0], {3, 2});
     }},
    {"adaptive_avg_pool2d 1x1",
     {F({2, 3, 4, 5})},
     [](const In& x) {
       return adaptive_avg_pool2d(x[0], {1, 1});
     }},
    {"batch_norm 2d train",
     {F({3, 2, 2, 3}), F({2}), F({2})},
     [](const In& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2]); },
     true,
     1e-4,
     1e-4},
    {"drop_path fixed seed",
     {F({6, 3, 2})},
     [](const In& x) {
       Generator g(5);
       return nn::drop_path(x[0], 0.5, true, &g);
     }},
});

}  // namespace
}  // namespace conformance
