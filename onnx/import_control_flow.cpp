// ONNX import: the control-flow ops If, Loop and Scan, which run their
// subgraphs (model_reader.h's bodies) through the graph runner. Their values
// are ordinary tensors, so gradients flow through the branch taken and
// through every iteration.
//
//   If(cond)                       the then_branch or the else_branch's outputs
//   Loop(M, cond, v...)            body(i, cond, v...) -> (cond, v..., scan...)
//                                  while i < M and cond; returns v... and each
//                                  scan output stacked along a new first dim
//   Scan(state..., x...)           body(state..., x_t...) -> (state..., y_t...)
//                                  for each slice t of the x along their scan
//                                  axes (forward or reverse); returns the final
//                                  state and the y_t stacked along their axes
#include <ember/onnx/graph_runner.h>
#include <ember/onnx/import_helpers.h>
#include <ember/ops/join.h>

namespace ember::onnx::detail {

namespace {

bool truth(const NodeArgs& a, const Tensor& t) {
  if (t.numel() != 1) a.invalid("the condition must hold one value; it has shape " + t.shape().str());
  return t.cpu().to(kFloat64).item<double>() != 0;
}

const Body& subgraph(const NodeArgs& a, const GraphNode& n, const std::string& name) {
  const Body* b = n.graph(name);
  if (!b) a.invalid("attribute '" + name + "' (a graph) is required but not given");
  return *b;
}

const Tensor& tensor_of(const NodeArgs& a, const Value& v, const std::string& what) {
  if (!v.tensor.defined()) a.unsupported(what + " is not a tensor");
  return v.tensor;
}

std::vector<Value> run_if(const RunContext& ctx, const NodeArgs& a, const GraphNode& n,
                          const std::vector<Value>& vals) {
  const Body& branch = subgraph(a, n, truth(a, a.input(0)) ? "then_branch" : "else_branch");
  std::vector<Value> outs = run_body(ctx, branch, {}, &vals);
  if (outs.size() != n.outputs.size())
    a.invalid("the branch taken has " + std::to_string(outs.size()) + " outputs, the node " +
              std::to_string(n.outputs.size()));
  return outs;
}

std::vector<Value> run_loop(const RunContext& ctx, const NodeArgs& a, const GraphNode& n, const std::vector<Value>& ins,
                            const std::vector<Value>& vals) {
  const Body& body = subgraph(a, n, "body");
  const bool has_m = a.has_input(0), has_cond = a.has_input(1);
  if (!has_m && !has_cond) a.invalid("a Loop with neither a trip count nor a condition never ends");
  const int64_t trips = has_m ? a.ints_input(0).at(0) : 0;
  bool cond = has_cond ? truth(a, a.input(1)) : true;
  const size_t carried = ins.size() >= 2 ? ins.size() - 2 : 0;
  if (body.inputs.size() != carried + 2 || body.outputs.size() < carried + 1)
    a.invalid("the body's inputs and outputs do not match the loop's " + std::to_string(carried) + " carried values");
  const size_t scans = body.outputs.size() - 1 - carried;
  std::vector<Value> state(ins.begin() + 2, ins.end());
  std::vector<std::vector<Tensor>> scanned(scans);
  for (int64_t i = 0; (!has_m || i < trips) && cond; ++i) {
    std::vector<Value> body_in = {{scalar_tensor(static_cast<double>(i), kInt64), nullptr},
                                  {scalar_tensor(cond ? 1.0 : 0.0, kBool), nullptr}};
    body_in.insert(body_in.end(), state.begin(), state.end());
    std::vector<Value> outs = run_body(ctx, body, body_in, &vals);
    // Without a condition input the body's condition is ignored (a for loop).
    if (has_cond) cond = truth(a, tensor_of(a, outs[0], "the body's condition"));
    std::copy(outs.begin() + 1, outs.begin() + 1 + static_cast<int64_t>(carried), state.begin());
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(tensor_of(a, outs[1 + carried + k], "a scan output"));
  }
  std::vector<Value> result = state;
  for (size_t k = 0; k < scans; ++k) {
    if (scanned[k].empty()) a.unsupported("scan outputs of a loop that ran no iteration (their shape is unknown)");
    result.push_back({stack(scanned[k], 0), nullptr});
  }
  return result;
}

// The scan itself: body over the slices of xs along axes (reversed where in_dirs says), the y_t stacked
// along out_axes (in reverse order where out_dirs says). Returns the final state, then the stacked ys.
std::vector<Value> scan_core(const RunContext& ctx, const NodeArgs& a, const Body& body, std::vector<Value> state,
                             const std::vector<Tensor>& xs, const std::vector<int64_t>& axes,
                             const std::vector<int64_t>& in_dirs, const std::vector<int64_t>& out_axes,
                             const std::vector<int64_t>& out_dirs, const std::vector<Value>& vals) {
  int64_t steps = -1;
  for (size_t j = 0; j < xs.size(); ++j) {
    if (steps >= 0 && xs[j].size(axes[j]) != steps) a.invalid("the scan inputs differ in length");
    steps = xs[j].size(axes[j]);
  }
  if (steps <= 0) a.unsupported("a scan of length 0 (its outputs' shapes are unknown)");
  const size_t states = state.size(), k_out = out_axes.size();
  std::vector<std::vector<Tensor>> ys(k_out);
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<Value> body_in = state;
    for (size_t j = 0; j < xs.size(); ++j)
      body_in.push_back({xs[j].select(axes[j], in_dirs[j] ? steps - 1 - t : t), nullptr});
    std::vector<Value> outs = run_body(ctx, body, body_in, &vals);
    std::copy(outs.begin(), outs.begin() + static_cast<int64_t>(states), state.begin());
    for (size_t k = 0; k < k_out; ++k) ys[k].push_back(tensor_of(a, outs[states + k], "a scan output"));
  }
  std::vector<Value> result = state;
  for (size_t k = 0; k < k_out; ++k) {
    if (out_dirs[k]) std::reverse(ys[k].begin(), ys[k].end());
    result.push_back({stack(ys[k], norm_axis(a, out_axes[k], ys[k][0].dim() + 1)), nullptr});
  }
  return result;
}

// Scan-9 on: states and scan inputs as they are. Scan-8: a leading batch axis on every state, input and
// output, and an optional sequence_lens first (all sequences full length here); each batch entry is
// scanned on its own and the results stacked.
std::vector<Value> run_scan(const RunContext& ctx, const NodeArgs& a, const GraphNode& n, const std::vector<Value>& ins,
                            const std::vector<Value>& vals) {
  const Body& body = subgraph(a, n, "body");
  const bool batched = a.opset() < 9;
  const int64_t first = batched ? 1 : 0;  // Scan-8's sequence_lens
  const int64_t m = a.attr_int("num_scan_inputs");
  const int64_t states = static_cast<int64_t>(ins.size()) - first - m;
  if (m < 1 || states < 0 || static_cast<int64_t>(body.inputs.size()) != states + m ||
      static_cast<int64_t>(body.outputs.size()) < states)
    a.invalid("the body's inputs and outputs do not match the scan's states and inputs");
  const int64_t k_out = static_cast<int64_t>(body.outputs.size()) - states;
  auto list = [&](const char* name, int64_t count) {
    std::vector<int64_t> v = a.attr_ints(name, std::vector<int64_t>(count, 0));
    if (static_cast<int64_t>(v.size()) != count) a.invalid(std::string(name) + " must have one entry per scan value");
    return v;
  };
  std::vector<Tensor> xs;
  for (int64_t j = 0; j < m; ++j) xs.push_back(tensor_of(a, ins[first + states + j], "a scan input"));
  std::vector<Value> state(ins.begin() + first, ins.begin() + first + states);
  if (!batched) {
    std::vector<int64_t> axes = list("scan_input_axes", m);
    for (int64_t j = 0; j < m; ++j) axes[j] = norm_axis(a, axes[j], xs[j].dim());
    return scan_core(ctx, a, body, state, xs, axes, list("scan_input_directions", m), list("scan_output_axes", k_out),
                     list("scan_output_directions", k_out), vals);
  }
  const std::vector<int64_t> dirs = list("directions", m);
  const int64_t batch = xs[0].dim() > 0 ? xs[0].size(0) : 0;
  if (a.has_input(0)) {
    for (int64_t len : a.ints_input(0))
      if (len != xs[0].size(1)) a.unsupported("sequence_lens shorter than the scan inputs");
  }
  std::vector<std::vector<Tensor>> per_output(states + k_out);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Value> sb;
    for (const Value& v : state) sb.push_back({tensor_of(a, v, "a scan state").select(0, b), nullptr});
    std::vector<Tensor> xb;
    for (const Tensor& x : xs) xb.push_back(x.select(0, b));
    const std::vector<Value> r = scan_core(ctx, a, body, sb, xb, std::vector<int64_t>(m, 0), dirs,
                                           std::vector<int64_t>(k_out, 0), std::vector<int64_t>(k_out, 0), vals);
    for (int64_t k = 0; k < states + k_out; ++k) per_output[k].push_back(tensor_of(a, r[k], "a scan output"));
  }
  if (batch == 0) a.unsupported("a scan over an empty batch");
  std::vector<Value> result;
  for (auto& ts : per_output) result.push_back({stack(ts, 0), nullptr});
  return result;
}

}  // namespace

std::vector<Value> run_control_flow(const RunContext& ctx, const GraphNode& node, const std::vector<Value>& inputs,
                                    const std::vector<Value>& vals) {
  std::vector<Tensor> tensors;
  for (const Value& v : inputs) tensors.push_back(v.tensor);
  const NodeArgs a(*node.proto, std::move(tensors), ctx.opset);
  const std::string& op = node.proto->op_type();
  if (op == "If") return run_if(ctx, a, node, vals);
  if (op == "Loop") return run_loop(ctx, a, node, inputs, vals);
  if (op == "Scan") return run_scan(ctx, a, node, inputs, vals);
  a.unsupported("no implementation");
}

}  // namespace ember::onnx::detail
