// Conformance rows: elementwise arithmetic, math, selection and comparisons.
#include "conformance.h"

namespace conformance {
namespace {

Register rows({
    {"add", {F({3, 4}), F({3, 4})}, [](const In& x) { return add(x[0], x[1]); }},
    {"add broadcast", {F({3, 1}), F({4})}, [](const In& x) { return add(x[0], x[1]); }},
    {"add scalar", {F({2, 3})}, [](const In& x) { return add(x[0], 1.5); }},
    {"sub", {F({2, 3}), F({1, 3})}, [](const In& x) { return sub(x[0], x[1]); }},
    {"rsub scalar", {F({2, 3})}, [](const In& x) { return sub(2.0, x[0]); }},
    {"mul", {F({2, 3, 4}), F({3, 1})}, [](const In& x) { return mul(x[0], x[1]); }},
    {"mul scalar", {F({5})}, [](const In& x) { return mul(x[0], -3.0); }},
    {"div", {F({3, 4}), P({4})}, [](const In& x) { return div(x[0], x[1]); }},
    {"rdiv scalar", {P({3, 2})}, [](const In& x) { return div(2.0, x[0]); }},
    {"neg", {F({4, 3})}, [](const In& x) { return neg(x[0]); }},
    {"square", {F({4, 3})}, [](const In& x) { return square(x[0]); }},
    {"pow scalar", {P({3, 4})}, [](const In& x) { return pow(x[0], 2.5); }},
    {"pow square", {F({3, 4})}, [](const In& x) { return pow(x[0], 2.0); }},
    {"pow tensor", {P({3, 4}), F({4})}, [](const In& x) { return pow(x[0], x[1]); }},
    {"exp", {F({3, 4})}, [](const In& x) { return exp(x[0]); }},
    {"log", {P({3, 4})}, [](const In& x) { return log(x[0]); }},
    {"sqrt", {P({4, 3})}, [](const In& x) { return sqrt(x[0]); }},
    {"rsqrt", {P({4, 3})}, [](const In& x) { return rsqrt(x[0]); }},
    {"abs", {F({3, 4})}, [](const In& x) { return abs(x[0]); }},
    {"sin", {F({3, 4})}, [](const In& x) { return sin(x[0]); }},
    {"cos", {F({3, 4})}, [](const In& x) { return cos(x[0]); }},
    {"clamp", {F({4, 5})}, [](const In& x) { return clamp(x[0], -0.5, 0.7); }},
    {"maximum", {F({3, 4}), F({4})}, [](const In& x) { return maximum(x[0], x[1]); }},
    {"minimum", {F({3, 4}), F({3, 1})}, [](const In& x) { return minimum(x[0], x[1]); }},
    {"floor", {F({3, 4})}, [](const In& x) { return floor(x[0]); }},
    {"remainder", {F({3, 4}), P({4})}, [](const In& x) { return remainder(x[0], x[1]); }},
    {"remainder scalar", {F({3, 4})}, [](const In& x) { return remainder(x[0], -0.75); }},
    {"remainder int", {I({3, 4}, -9, 9), I({4}, 1, 4)}, [](const In& x) { return remainder(x[0], x[1]); }, false},
    {"fmod", {F({3, 4}), P({3, 1})}, [](const In& x) { return fmod(x[0], x[1]); }},
    {"fmod scalar", {F({3, 4})}, [](const In& x) { return fmod(x[0], 0.6); }},
    {"where", {B({3, 4}), F({3, 4}), F({4})}, [](const In& x) { return where(x[0], x[1], x[2]); }},
    {"masked_fill", {F({2, 3, 4}), B({3, 1})}, [](const In& x) { return masked_fill(x[0], x[1], -7.0); }},
    {"gt", {F({3, 4}), F({4})}, [](const In& x) { return gt(x[0], x[1]); }, false},
    {"eq scalar", {I({3, 4}, 0, 3)}, [](const In& x) { return eq(x[0], 1.0); }, false},
    {"ne", {I({3, 4}, 0, 3), I({4}, 0, 3)}, [](const In& x) { return ne(x[0], x[1]); }, false},
    {"lt", {F({3, 4}), F({3, 1})}, [](const In& x) { return lt(x[0], x[1]); }, false},
    {"le scalar", {F({3, 4})}, [](const In& x) { return le(x[0], 0.25); }, false},
    {"ge", {F({3, 4}), F({4})}, [](const In& x) { return ge(x[0], x[1]); }, false},
    {"logical_and", {B({3, 4}), B({4})}, [](const In& x) { return logical_and(x[0], x[1]); }, false},
    {"logical_or", {B({3, 4}), B({3, 4})}, [](const In& x) { return logical_or(x[0], x[1]); }, false},
    {"logical_not", {B({3, 4})}, [](const In& x) { return logical_not(x[0]); }, false},
});

}  // namespace
}  // namespace conformance
