/// \file
/// Lowerings many ops share (core/onnx_lowering.h): one ONNX node per op for
/// the pointwise and comparison ops, views as Reshape to the result's shape,
/// reductions, and the attention core the fused attention ops are written
/// as. An op's declaration names one of these, or a function of its own
/// beside it. Custom ops use them too (docs/CUSTOM_OPS.md).
#pragma once

#include <cstddef>
#include <string>

#include <ember/core/onnx_lowering.h>

namespace ember::lowering {

/// A string literal as a template argument: unary<"Relu">.
template <size_t N>
struct OpName {
  char s[N];
  constexpr OpName(const char (&v)[N]) {  // NOLINT: implicit by design
    for (size_t i = 0; i < N; ++i) s[i] = v[i];
  }
};

/// Argument i as a value of dtype dt: a tensor (cast when its dtype differs) or a number (a 0-d constant).
std::string operand(Graph& g, const Call& c, size_t i, DType dt);
/// t's value cast to dt when its dtype differs.
std::string cast_to(Graph& g, const Tensor& t, DType dt);

/// One node of type op on argument 0.
void unary_node(Graph& g, const Call& c, const char* op);
/// One node on arguments 0 and 1 (tensors or numbers), computed in the result's dtype, or in the
/// operands' promoted dtype for comparisons (whose result is bool).
void binary_node(Graph& g, const Call& c, const char* op, bool compare);

template <OpName Op>
void unary(Graph& g, const Call& c) {
  unary_node(g, c, Op.s);
}
template <OpName Op>
void binary(Graph& g, const Call& c) {
  binary_node(g, c, Op.s, false);
}
template <OpName Op>
void compare(Graph& g, const Call& c) {
  binary_node(g, c, Op.s, true);
}

/// x W^T + b of a call whose arguments 0, 1 and 2 are x, W and b (b optional): linear's nodes.
std::string linear_value(Graph& g, const Call& c);
/// GELU of value x of dtype dt, exact (erf) or in the tanh form: gelu's nodes.
std::string gelu_value(Graph& g, const std::string& x, DType dt, bool tanh);

/// The result is argument 0 (contiguous, clone: the same values).
void identity(Graph& g, const Call& c);
/// The result is argument 0 reshaped to the result's shape (view, reshape, flatten, unflatten, squeeze,
/// unsqueeze): Reshape to Graph::shape of the result.
void reshape_to_result(Graph& g, const Call& c);

/// Reduce<op> over argument 1's dims (empty: every dim), keepdim argument 2. Since opset 13 ReduceSum takes
/// its axes as an input; the others take an attribute until opset 18.
void reduce_node(Graph& g, const Call& c, const char* op, bool axes_as_input);

/// Scaled dot-product attention over heads, as the fused attention ops compute it: q (N, L, E), k and v
/// (N, S, E) values, E = heads * D; mask a bool value broadcastable to (N, H, L, S), true where masked
/// (a row with every key masked gets zero weights), or "" for none; causal adds key j > i + (S - L).
/// Returns the (N, L, E) value.
std::string attention(Graph& g, const std::string& q, const std::string& k, const std::string& v, int64_t heads,
                      int64_t head_dim, const std::string& mask, bool causal);

}  // namespace ember::lowering
