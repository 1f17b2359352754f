// Conformance rows: joining, splitting, padding and convolution.
#include "conformance.h"

namespace conformance {
using namespace ember;
namespace {

Register rows({
    {"cat dim 0",
     {F({2, 3}), F({1, 3}), F({3, 3})},
     [](const In& x) {
       return cat({x[0], x[1], x[2]}, 0);
     }},
    {"cat dim -1",
     {F({2, 3}), F({2, 1}), F({2, 2})},
     [](const In& x) {
       return cat({x[0], x[1], x[2]}, -1);
     }},
    {"stack dim 1",
     {F({2, 3}), F({2, 3})},
     [](const In& x) {
       return stack({x[0], x[1]}, 1);
     }},
    {"split pieces",
     {F({5, 3})},
     [](const In& x) {
       const auto p = split(x[0], 2, 0);
       return add(mul(p[0], 2.0), mul(p[1], 3.0));
     }},
    {"chunk last piece", {F({3, 7})}, [](const In& x) { return chunk(x[0], 3, 1)[2]; }},
    {"pad",
     {F({2, 3})},
     [](const In& x) {
       return pad(x[0], {1, 2, 0, 1}, 0.5);
     }},
    {"unfold",
     {F({2, 2, 5, 4})},
     [](const In& x) {
       return unfold(x[0], {3, 2}, {2, 1}, {1, 0});
     }},
    {"conv2d bias",
     {F({2, 2, 5, 4}), F({3, 2, 3, 2}), F({3})},
     [](const In& x) {
       return conv2d(x[0], x[1], x[2], {2, 1}, {1, 0});
     },
     true,
     1e-4,
     1e-4},
    // 23 rows of 40 outputs: conv2d's CPU kernel runs them as tiles of 6
    // whole rows (6, 6, 6, then a ragged 5); CUDA composes im2row and linear.
    {"conv2d 3x3 tiles",
     {F({2, 3, 23, 40}), F({4, 3, 3, 3}), F({4})},
     [](const In& x) {
       return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1});
     },
     true,
     1e-4,
     1e-4},
    // Output rows wider than one GEMM call of the CPU kernel (256 columns).
    {"conv2d wide rows",
     {F({1, 2, 2, 300}), F({3, 2, 1, 3})},
     [](const In& x) {
       return conv2d(x[0], x[1], Tensor(), {1, 1}, {0, 1});
     },
     true,
     1e-4,
     1e-4},
    {"conv2d patches",
     {F({1, 3, 4, 6}), F({4, 3, 2, 3})},
     [](const In& x) {
       return conv2d(x[0], x[1], Tensor(), {2, 3});
     },
     true,
     1e-4,
     1e-4},
    // Patches that leave a ragged edge (rows 4 and columns 6 in no window),
    // with a bias: bfloat16 on the CPU runs it as bf16 im2row + the bf16 GEMM.
    {"conv2d patches, bias, ragged edge",
     {F({2, 3, 5, 7}), F({4, 3, 2, 3}), F({4})},
     [](const In& x) {
       return conv2d(x[0], x[1], x[2], {2, 3});
     },
     true,
     1e-4,
     1e-4},
});

}  // namespace
}  // namespace conformance
