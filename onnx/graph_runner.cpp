// The graph runner (graph_runner.h): one pass over a body's nodes. Errors
// from a node are rethrown with the model and the node named, keeping their
// type, so a caller can still tell a shape error from an unsupported
// attribute.
#include <ember/onnx/graph_runner.h>

namespace ember::onnx::detail {

std::string node_label(const ::onnx::NodeProto& n) { return "node '" + n.name() + "' (" + n.op_type() + ")"; }

namespace {

[[noreturn]] void rethrow_in(const std::string& what, const ::onnx::NodeProto& n) {
  const std::string label = what + ": " + node_label(n);
  const std::string tag = "(node '" + n.name() + "')";
  auto msg = [&](const std::exception& e) {
    const std::string w = e.what();
    // Messages that already name the node (NodeArgs', a subgraph's) only get the model's name, once.
    if (w.rfind(what + ": ", 0) == 0) return w;
    return w.find(tag) != std::string::npos ? what + ": " + w : label + ": " + w;
  };
  try {
    throw;
  } catch (const Unsupported& e) {
    throw Unsupported(msg(e));
  } catch (const ShapeError& e) {
    throw ShapeError(msg(e));
  } catch (const IndexError& e) {
    throw IndexError(msg(e));
  } catch (const DTypeError& e) {
    throw DTypeError(msg(e));
  } catch (const DeviceError& e) {
    throw DeviceError(msg(e));
  } catch (const AutogradError& e) {
    throw AutogradError(msg(e));
  } catch (const IOError& e) {
    throw IOError(msg(e));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw ValueError(msg(e));
  }
}

}  // namespace

std::vector<Value> run_body(const RunContext& ctx, const Body& body, const std::vector<Value>& inputs,
                            const std::vector<Value>* outer) {
  std::vector<Value> vals(body.values.size());
  auto it = ctx.initializers.find(&body);
  if (it != ctx.initializers.end())
    for (const auto& [v, t] : it->second) vals[v].tensor = t;
  for (size_t i = 0; i < inputs.size() && i < body.inputs.size(); ++i)
    if (inputs[i].defined()) vals[body.inputs[i]] = inputs[i];
  if (outer)
    for (const auto& [there, here] : body.captures) vals[here] = (*outer)[there];

  for (const GraphNode& n : body.nodes) {
    std::vector<Value> outs;
    try {
      std::vector<Tensor> ins;
      std::vector<const TensorSeq*> seq_ins;
      std::vector<int> types;
      for (int v : n.inputs) {
        ins.push_back(v < 0 ? Tensor() : vals[v].tensor);
        seq_ins.push_back(v < 0 ? nullptr : vals[v].seq.get());
        types.push_back(v < 0 ? 0 : body.types[v]);
        if (seq_ins.back() && n.op)
          throw ValueError("reads the sequence '" + body.values[v] + "' where it takes a tensor");
        if (ins.back().defined() && ins.back().device() != ctx.device) ins.back() = ins.back().to(ctx.device);
      }
      if (n.op || n.seq_op) {
        NodeArgs args(*n.proto, std::move(ins), ctx.opset);
        args.set_input_types(std::move(types));
        if (n.seq_op) {
          for (SeqValue& s : n.seq_op(args, seq_ins)) outs.push_back({std::move(s.tensor), std::move(s.seq)});
        } else {
          for (Tensor& t : n.op(args)) outs.push_back({std::move(t), nullptr});
        }
      } else {
        std::vector<Value> cf_ins;
        for (size_t i = 0; i < ins.size(); ++i)
          cf_ins.push_back({ins[i], seq_ins[i] ? vals[n.inputs[i]].seq : nullptr});
        outs = run_control_flow(ctx, n, cf_ins, vals);
      }
    } catch (...) {
      rethrow_in(ctx.what, *n.proto);
    }
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      if (n.outputs[j] < 0) continue;
      EMBER_CHECK(j < outs.size() && outs[j].defined(), ValueError, ctx.what, ": ", node_label(*n.proto),
                  " did not produce its output ", j, " ('", body.values[n.outputs[j]], "')");
      vals[n.outputs[j]] = std::move(outs[j]);
    }
    for (int v : n.frees) vals[v] = Value();
  }
  std::vector<Value> out;
  for (int v : body.outputs) out.push_back(vals[v]);
  return out;
}

}  // namespace ember::onnx::detail
