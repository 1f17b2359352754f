// ONNX export (onnx/onnx.h): records a forward pass with a tracer, lowers
// the recorded calls into a GraphProto (export_graph.cpp), checks the model
// with ONNX's checker and strict shape inference, and writes it atomically.
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <ember/core/autograd.h>
#include <ember/core/file_io.h>
#include <ember/core/version.h>
#include <ember/onnx/export_graph.h>
#include <ember/onnx/onnx.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/join.h>

namespace ember::onnx {

namespace {
using detail::Symbol;
using detail::Trace;

class Recorder : public lowering::Tracer {
 public:
  explicit Recorder(Trace& t) : trace_(t) {}
  void record(lowering::Call call) override { trace_.calls.push_back(std::move(call)); }

 private:
  Trace& trace_;
};

// Restores every module's training mode on exit.
class ModeGuard {
 public:
  explicit ModeGuard(nn::Module& m) {
    for (auto& [name, mod] : m.named_modules()) modes_.emplace_back(mod, mod->is_training());
  }
  ~ModeGuard() {
    // Pre-order: each module set after its ancestors keeps its own mode.
    for (auto& [mod, on] : modes_) mod->train(on);
  }

 private:
  std::vector<std::pair<nn::Module*, bool>> modes_;
};

// The example inputs at corner k: symbol s's axis one size off when bit s is set.
std::vector<Tensor> corner_inputs(const std::vector<Tensor>& inputs, const std::vector<Symbol>& symbols, size_t k) {
  std::vector<Tensor> out = inputs;
  for (size_t s = 0; s < symbols.size(); ++s) {
    if (!(k >> s & 1)) continue;
    const Symbol& sym = symbols[s];
    std::vector<std::pair<size_t, int>> axes = {{sym.input, sym.axis}};
    axes.insert(axes.end(), sym.shared.begin(), sym.shared.end());
    for (const auto& [input, axis] : axes) {
      Tensor& x = out[input];
      x = sym.delta < 0 ? x.narrow(axis, 0, sym.size - 1) : cat({x, x.narrow(axis, 0, 1)}, axis);
      x = x.contiguous();
    }
  }
  return out;
}

// Grad mode on for the recording, whatever the caller's (an app that exports after evaluating under
// NoGradGuard): the check that names a tensor computed by an op export cannot see reads its grad_fn, which
// only grad mode gives it; without it such a tensor would be frozen into a constant.
class GradModeOn {
 public:
  GradModeOn() : prev_(autograd::grad_enabled()) { autograd::set_grad_enabled(true); }
  ~GradModeOn() { autograd::set_grad_enabled(prev_); }
  GradModeOn(const GradModeOn&) = delete;
  GradModeOn& operator=(const GradModeOn&) = delete;

 private:
  bool prev_;
};

Trace record(const ForwardFn& forward, const std::vector<Tensor>& inputs) {
  const GradModeOn grad_mode;
  Trace t;
  // Floating inputs require grad, so that a tensor computed from them by an op export does not record
  // carries a grad_fn, which the graph builder names instead of freezing it into a constant.
  for (const Tensor& x : inputs) {
    Tensor c = x.detach();
    if (c.is_floating_point()) c.requires_grad_(true);
    t.inputs.push_back(c);
  }
  Recorder rec(t);
  {
    lowering::TraceScope scope(&rec);
    t.outputs = forward(t.inputs);
  }
  return t;
}

void set_value_info(::onnx::ValueInfoProto& vi, const std::string& name, const Tensor& t,
                    const std::vector<std::string>& dim_params) {
  vi.set_name(name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(lowering::onnx_dtype(t.dtype()));
  auto* shape = tt->mutable_shape();
  for (int d = 0; d < t.dim(); ++d) {
    auto* dim = shape->add_dim();
    if (!dim_params[d].empty())
      dim->set_dim_param(dim_params[d]);
    else
      dim->set_dim_value(t.shape()[d]);
  }
}

// The graph run by Ember's importer at every recorded size must give what the model gave: a lowering that
// writes a wrong graph is caught here, before anything is written. (Tolerances: the graph's composed form
// rounds differently from fused kernels.)
void verify(const std::string& bytes, const std::vector<Trace>& traces, const std::string& path) {
  std::shared_ptr<Model> m = load_from_bytes(bytes, "the exported graph");
  m->eval();
  NoGradGuard no_grad;
  for (size_t k = 0; k < traces.size(); ++k) {
    // On the CPU, where the graph's initializers are, whatever device the model ran on.
    std::vector<Tensor> in;
    for (const Tensor& x : traces[k].inputs) in.push_back(x.detach().cpu());
    const std::vector<Tensor> out = m->forward(in);
    for (size_t j = 0; j < out.size(); ++j) {
      const Tensor want = traces[k].outputs[j].detach().cpu();
      const bool same = out[j].shape() == want.shape() &&
                        (want.is_floating_point() ? allclose(out[j], want, 1e-3, 1e-4) : equal(out[j], want));
      EMBER_CHECK(same, ValueError, "onnx::export_model: the graph Ember built gives output ", j, " of shape ",
                  out[j].shape(), " different from the model's (shape ", want.shape(),
                  "): a lowering is wrong; nothing was written to '", path, "'");
    }
  }
}

std::vector<std::string> names_or_default(const std::vector<std::string>& given, size_t n, const char* base,
                                          const char* what) {
  EMBER_CHECK(given.empty() || given.size() == n, ValueError, "onnx::export_model: ", given.size(), " ", what,
              " names for ", n, " ", what, "s");
  if (!given.empty()) return given;
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(i == 0 ? base : std::string(base) + "_" + std::to_string(i));
  return out;
}
}  // namespace

void export_model(nn::Module& module, const ForwardFn& forward, const std::vector<Tensor>& example_inputs,
                  const std::string& path, const ExportOptions& options) {
  EMBER_CHECK(!example_inputs.empty(), ValueError, "onnx::export_model: no example inputs");
  for (const Tensor& x : example_inputs)
    EMBER_CHECK(x.defined(), ValueError, "onnx::export_model: an example input is undefined");
  const std::vector<std::string> in_names =
      names_or_default(options.input_names, example_inputs.size(), "input", "input");

  // The dynamic axes of the inputs, one symbol per distinct name.
  std::vector<Symbol> symbols;
  std::map<std::string, size_t> symbol_of;
  for (const auto& [name, axes] : options.dynamic_axes) {
    size_t i = 0;
    while (i < in_names.size() && in_names[i] != name) ++i;
    if (i == in_names.size()) continue;  // an output's axes: named from the inputs' below
    for (const auto& [axis0, sym_name] : axes) {
      const Tensor& x = example_inputs[i];
      const int axis = axis0 < 0 ? axis0 + x.dim() : axis0;
      EMBER_CHECK(axis >= 0 && axis < x.dim(), IndexError, "onnx::export_model: dynamic axis ", axis0, " of input '",
                  name, "' of shape ", x.shape());
      const int64_t size = x.shape()[axis];
      if (symbol_of.count(sym_name)) {
        // The same size on another input (a shared batch): the first axis named defines it, this one follows.
        Symbol& sym = symbols[symbol_of.at(sym_name)];
        EMBER_CHECK(size == sym.size, ValueError, "onnx::export_model: dynamic axis '", sym_name, "' is ", sym.size,
                    " in input '", in_names[sym.input], "' but ", size, " in input '", name, "'");
        sym.shared.emplace_back(i, axis);
        continue;
      }
      symbol_of[sym_name] = symbols.size();
      symbols.push_back({sym_name, i, axis, size, size > 2 ? -1 : 1, {}});
    }
  }
  EMBER_CHECK(symbols.size() <= 3, onnx::Unsupported, "onnx::export_model: at most 3 distinct dynamic sizes, got ",
              symbols.size());

  // One recorded pass per corner of the dynamic sizes, in eval mode.
  ModeGuard modes(module);
  module.eval();
  std::vector<Trace> traces;
  for (size_t k = 0; k < (size_t{1} << symbols.size()); ++k) {
    traces.push_back(record(forward, corner_inputs(example_inputs, symbols, k)));
    const Trace& t = traces.back();
    EMBER_CHECK(!t.outputs.empty(), ValueError, "onnx::export_model: the forward function returned no tensors");
    if (k == 0) continue;
    const Trace& b = traces[0];
    bool same = t.calls.size() == b.calls.size() && t.outputs.size() == b.outputs.size();
    for (size_t j = 0; same && j < t.calls.size(); ++j) same = t.calls[j].op == b.calls[j].op;
    EMBER_CHECK(same, onnx::Unsupported,
                "onnx::export_model: the model runs different ops when a dynamic axis changes "
                "size; export it without dynamic axes");
  }
  const std::vector<std::string> out_names =
      names_or_default(options.output_names, traces[0].outputs.size(), "output", "output");

  std::map<const TensorImpl*, std::string> initializers;
  for (const auto& [name, t] : module.named_parameters()) initializers.emplace(t.unsafe_impl(), name);
  for (const auto& [name, t] : module.named_buffers()) initializers.emplace(t.unsafe_impl(), name);

  ::onnx::ModelProto model;
  model.set_ir_version(8);  // the IR version of opset 17
  model.set_producer_name("Ember");
  model.set_producer_version(version());
  if (!options.doc_string.empty()) model.set_doc_string(options.doc_string);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  ::onnx::GraphProto& g = *model.mutable_graph();
  g.set_name(module.type_name());

  detail::GraphBuilder builder(g, traces, symbols, initializers, in_names);
  // Dims of input i / output j at every corner, as dim_params.
  auto dims_of = [&](bool input, size_t i) {
    const Tensor& t0 = input ? traces[0].inputs[i] : traces[0].outputs[i];
    std::vector<std::string> params;
    for (int d = 0; d < t0.dim(); ++d) {
      std::vector<int64_t> at;
      for (const Trace& t : traces) {
        const Tensor& x = input ? t.inputs[i] : t.outputs[i];
        EMBER_CHECK(x.dim() == t0.dim(), onnx::Unsupported, "onnx::export_model: output ", i,
                    " changes rank with the dynamic axes");
        at.push_back(x.shape()[d]);
      }
      params.push_back(builder.dim_param(at));
    }
    return params;
  };
  for (size_t i = 0; i < in_names.size(); ++i)
    set_value_info(*g.add_input(), in_names[i], traces[0].inputs[i], dims_of(true, i));
  builder.lower_all();
  builder.finish_outputs(out_names);
  for (size_t j = 0; j < out_names.size(); ++j)
    set_value_info(*g.add_output(), out_names[j], traces[0].outputs[j], dims_of(false, j));

  // ONNX's own checks, the strict ones (onnx.checker.check_model(full_check=True)): a model that fails them
  // is Ember's bug, and is not written.
  try {
    ::onnx::checker::check_model(model);
    ::onnx::ShapeInferenceOptions opts{true, 1, false};
    ::onnx::ModelProto inferred = model;
    ::onnx::shape_inference::InferShapes(inferred, ::onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    throw ValueError(std::string("onnx::export_model: the graph Ember built fails ONNX's checks (") + e.what() +
                     "); nothing was written to '" + path + "'");
  }
  std::string bytes;
  EMBER_CHECK(model.SerializeToString(&bytes), ValueError, "onnx::export_model: could not serialise the model");
  verify(bytes, traces, path);
  write_file_atomic(path, bytes);
}

void export_model(nn::Module& module, const Tensor& example_input, const std::string& path,
                  const ExportOptions& options) {
  export_model(
      module, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{module.forward(in[0])}; },
      {example_input}, path, options);
}

}  // namespace ember::onnx
