// Conformance rows: activations and reductions.
#include "conformance.h"

namespace conformance {
using namespace ember;
namespace {

Register rows({
    {"relu", {F({3, 4})}, [](const In& x) { return relu(x[0]); }},
    {"sigmoid", {F({3, 4})}, [](const In& x) { return sigmoid(x[0]); }},
    {"tanh", {F({3, 4})}, [](const In& x) { return tanh(x[0]); }},
    {"gelu", {F({3, 4})}, [](const In& x) { return gelu(x[0]); }},
    {"gelu tanh", {F({3, 4})}, [](const In& x) { return gelu(x[0], "tanh"); }},
    {"softplus", {F({3, 4})}, [](const In& x) { return softplus(x[0], 2.0, 3.0); }},
    {"silu", {F({3, 4})}, [](const In& x) { return silu(x[0]); }},
    {"sum all", {F({3, 4})}, [](const In& x) { return sum(x[0]); }},
    {"sum dim 1", {F({3, 4})}, [](const In& x) { return sum(x[0], {1}); }},
    {"sum dims 0,2 keepdim",
     {F({2, 3, 4})},
     [](const In& x) {
       return sum(x[0], {0, 2}, true);
     }},
    {"sum dim 0 of 3", {F({4, 3, 2})}, [](const In& x) { return sum(x[0], {0}); }},
    {"mean dims -1", {F({3, 5})}, [](const In& x) { return mean(x[0], {-1}); }},
    {"var dim 1", {F({3, 5})}, [](const In& x) { return var(x[0], {1}); }, true, 1e-5, 1e-4},
    {"std dims 0,1",
     {F({3, 5})},
     [](const In& x) {
       return ember::std(x[0], {0, 1}, 0);
     },
     true,
     1e-5,
     1e-4},
    {"logsumexp dim 1", {F({3, 5})}, [](const In& x) { return logsumexp(x[0], {1}); }},
    {"amax dim 0", {F({4, 3})}, [](const In& x) { return amax(x[0], {0}); }},
    {"amin all", {F({4, 3})}, [](const In& x) { return amin(x[0], {}); }},
    {"max along dim", {F({3, 5})}, [](const In& x) { return max(x[0], 1).values; }},
    {"min along dim keepdim", {F({3, 5})}, [](const In& x) { return min(x[0], 0, true).values; }},
    {"argmax dim 1", {F({3, 5})}, [](const In& x) { return argmax(x[0], 1); }, false},
    {"argmax all", {F({3, 5})}, [](const In& x) { return argmax(x[0]); }, false},
    {"argmin dim 0 keepdim", {F({4, 3})}, [](const In& x) { return argmin(x[0], 0, true); }, false},
});

}  // namespace
}  // namespace conformance
