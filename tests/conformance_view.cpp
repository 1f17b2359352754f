// Conformance rows: views and copies (their backward maps the gradient back
// through the inverse view, or sums it for expand).
#include "conformance.h"

namespace conformance {
using namespace ember;
namespace {

Register rows({
    {"reshape",
     {F({2, 6})},
     [](const In& x) {
       return x[0].reshape({3, 4});
     }},
    {"view -1",
     {F({3, 4})},
     [](const In& x) {
       return x[0].contiguous().view({-1, 2});
     }},
    {"transpose", {F({2, 3, 4})}, [](const In& x) { return x[0].transpose(0, 2); }},
    {"t", {F({3, 4})}, [](const In& x) { return x[0].t(); }},
    {"permute",
     {F({2, 3, 4})},
     [](const In& x) {
       return x[0].permute({1, 2, 0});
     }},
    {"narrow", {F({5, 3})}, [](const In& x) { return x[0].narrow(0, 1, 3); }},
    {"slice step", {F({7, 3})}, [](const In& x) { return x[0].slice(0, 1, 7, 2); }},
    {"select", {F({4, 3})}, [](const In& x) { return x[0].select(1, -1); }},
    {"unsqueeze squeeze", {F({3, 4})}, [](const In& x) { return x[0].unsqueeze(1).squeeze(1).unsqueeze(0); }},
    {"expand",
     {F({3, 1})},
     [](const In& x) {
       return x[0].expand({2, 3, 4});
     }},
    {"flatten", {F({2, 3, 4})}, [](const In& x) { return x[0].flatten(1); }},
    {"unflatten",
     {F({2, 12})},
     [](const In& x) {
       return x[0].unflatten(1, {3, 4});
     }},
    {"clone", {F({3, 4})}, [](const In& x) { return x[0].clone(); }},
});

}  // namespace
}  // namespace conformance
