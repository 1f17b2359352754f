// The lowerings many ops share (ops/onnx_lowerings.h).
#include <ember/ops/onnx_lowerings.h>

#include <cmath>
#include <limits>

#include <ember/core/error.h>
#include <ember/core/op.h>

namespace ember::lowering {

std::string cast_to(Graph& g, const Tensor& t, DType dt) {
  const std::string v = g.value(t);
  if (t.dtype() == dt) return v;
  return g.node("Cast", {v}, {{"to", int64_t{onnx_dtype(dt)}}})[0];
}

std::string operand(Graph& g, const Call& c, size_t i, DType dt) {
  const Arg& a = c.args.at(i);
  if (a.kind == Arg::Kind::Tensor) return cast_to(g, a.tensor, dt);
  return g.scalar(c.f(i), dt);
}

void unary_node(Graph& g, const Call& c, const char* op) {
  g.bind(c.outputs[0], g.node(op, {g.value(c.tensor(0))})[0]);
}

void binary_node(Graph& g, const Call& c, const char* op, bool compare) {
  DType dt = c.outputs[0].dtype();
  if (compare) {
    const bool t0 = c.has_tensor(0), t1 = c.has_tensor(1);
    dt = t0 && t1 ? promote_types(c.tensor(0).dtype(), c.tensor(1).dtype()) : c.tensor(t0 ? 0 : 1).dtype();
  }
  g.bind(c.outputs[0], g.node(op, {operand(g, c, 0, dt), operand(g, c, 1, dt)})[0]);
}

void identity(Graph& g, const Call& c) { g.bind(c.outputs[0], g.node("Identity", {g.value(c.tensor(0))})[0]); }

void reshape_to_result(Graph& g, const Call& c) {
  g.bind(c.outputs[0], g.node("Reshape", {g.value(c.tensor(0)), g.shape(c, 0)})[0]);
}

void reduce_node(Graph& g, const Call& c, const char* op, bool axes_as_input) {
  const Tensor& x = c.tensor(0);
  std::vector<int64_t> axes = c.ints(1);
  if (axes.empty())  // every dim
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  const int64_t keep = c.args.size() > 2 ? c.i(2) : 0;
  std::vector<std::string> in{g.value(x)};
  std::vector<Attr> attrs{{"keepdims", keep}};
  if (axes_as_input) in.push_back(g.constant_ints(axes));
  else attrs.push_back({"axes", axes});
  g.bind(c.outputs[0], g.node(op, in, attrs)[0]);
}

std::string attention(Graph& g, const std::string& q, const std::string& k, const std::string& v, int64_t heads,
                      int64_t head_dim, const std::string& mask, bool causal) {
  // (N, L, E) -> (N, L, H, D) -> (N, H, L, D); Reshape's 0 keeps N and L whatever their sizes.
  auto split_heads = [&](const std::string& x, std::vector<int64_t> perm) {
    const std::string r = g.node("Reshape", {x, g.constant_ints({0, 0, heads, head_dim})})[0];
    return g.node("Transpose", {r}, {{"perm", perm}})[0];
  };
  const std::string qh = split_heads(q, {0, 2, 1, 3});
  const std::string kt = split_heads(k, {0, 2, 3, 1});  // (N, H, D, S)
  const std::string vh = split_heads(v, {0, 2, 1, 3});
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::string s = g.node("MatMul", {qh, kt})[0];
  s = g.node("Mul", {s, g.scalar(scale, DType::Float32)})[0];
  std::string masked = mask;
  if (causal) {
    // Key j is hidden from query i when j > i + (S - L): from the shapes, so any length works.
    const std::string L = g.node("Shape", {q}, {{"start", int64_t{1}}, {"end", int64_t{2}}})[0];
    const std::string S = g.node("Shape", {k}, {{"start", int64_t{1}}, {"end", int64_t{2}}})[0];
    const std::string zero = g.scalar(0, DType::Int64), one = g.scalar(1, DType::Int64);
    auto range = [&](const std::string& n) {
      const std::string n0 = g.node("Squeeze", {n, g.constant_ints({0})})[0];
      return g.node("Range", {zero, n0, one})[0];
    };
    const std::string i = g.node("Unsqueeze", {range(L), g.constant_ints({1})})[0];  // (L, 1)
    const std::string j = g.node("Unsqueeze", {range(S), g.constant_ints({0})})[0];  // (1, S)
    const std::string shift = g.node("Sub", {S, L})[0];
    const std::string hidden = g.node("Greater", {j, g.node("Add", {i, shift})[0]})[0];
    masked = mask.empty() ? hidden : g.node("Or", {mask, hidden})[0];
  }
  if (!masked.empty()) {
    const std::string inf = g.scalar(-std::numeric_limits<double>::infinity(), DType::Float32);
    s = g.node("Where", {masked, inf, s})[0];
  }
  std::string p = g.node("Softmax", {s}, {{"axis", int64_t{-1}}})[0];
  // A row with every key masked is NaN after Softmax; Ember gives it zero weights.
  if (!masked.empty()) p = g.node("Where", {masked, g.scalar(0, DType::Float32), p})[0];
  const std::string o = g.node("MatMul", {p, vh})[0];                                   // (N, H, L, D)
  const std::string ot = g.node("Transpose", {o}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}})[0];  // (N, L, H, D)
  return g.node("Reshape", {ot, g.constant_ints({0, 0, heads * head_dim})})[0];
}

}  // namespace ember::lowering
