// --export-onnx for the demos (onnx_export.h).
#include "onnx_export.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

namespace ember::app {

namespace fs = std::filesystem;

void add_export_onnx(CLI::App& cli, OnnxExportFlags& flags, const std::string& what) {
  CLI::Option* file = output_file(
      cli.add_option("--export-onnx", flags.path,
                     "write the model as an ONNX file (opset 17, dynamic batch axis) at the end of the run: " + what));
  cli.add_flag("--export-onnx-check", flags.check,
               "with --export-onnx FILE: also write a real batch (FILE.inputs.safetensors) and Ember's outputs for it "
               "(FILE.expected.safetensors), for comparing with onnxruntime (tools/onnx_run.js)")
      ->needs(file);
}

void check_export_onnx(const OnnxExportFlags& flags) {
  if (flags.enabled()) check_output_file(flags.path, "--export-onnx");
}

namespace {

// Every module's training mode, put back on exit (the check batch runs in eval mode).
class ModeGuard {
 public:
  explicit ModeGuard(nn::Module& m) {
    for (auto& [name, mod] : m.named_modules()) modes_.emplace_back(mod, mod->is_training());
  }
  ~ModeGuard() {
    for (auto& [mod, on] : modes_) mod->train(on);  // pre-order: each after its ancestors
  }

 private:
  std::vector<std::pair<nn::Module*, bool>> modes_;
};

// "images[batch,1,28,28]": an input with its dynamic axes by name.
std::string describe_input(const std::string& name, const Tensor& x, const std::map<int, std::string>& axes) {
  std::string s = name + "[";
  for (int d = 0; d < x.dim(); ++d) {
    const auto it = axes.find(d);
    s += (d ? "," : "") + (it != axes.end() ? it->second : std::to_string(x.size(d)));
  }
  return s + "]";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

StateDict named(const std::vector<std::string>& names, const std::vector<Tensor>& tensors) {
  StateDict sd;
  for (size_t i = 0; i < names.size(); ++i) sd.emplace_back(names[i], tensors[i].cpu().contiguous());
  return sd;
}

}  // namespace

OnnxGraph image_classifier_graph(const Tensor& images, const std::string& what, const std::vector<double>& mean,
                                 const std::vector<double>& std) {
  const int64_t n = images.size(0);
  std::string doc = what +
                    ". Input images (batch, channels, height, width), each channel normalised as (x - mean) / std "
                    "with x in [0, 1], mean";
  for (double m : mean) doc += fmt(" %.6g", m);
  doc += ", std";
  for (double s : std) doc += fmt(" %.6g", s);
  doc += "; output logits (batch, classes).";
  return {.inputs = {"images"},
          .outputs = {"logits"},
          .dynamic_axes = {{"images", {{0, "batch"}}}, {"logits", {{0, "batch"}}}},
          .example = {images.narrow(0, 0, std::min<int64_t>(2, n))},
          .check = {images.narrow(0, 0, std::min<int64_t>(8, n))},
          .doc = doc};
}

void export_onnx(const char* app, nn::Module& module, const onnx::ForwardFn& forward, const OnnxGraph& graph,
                 const OnnxExportFlags& flags) {
  if (!flags.enabled()) return;
  const std::string& path = flags.path;
  try {
    onnx::export_model(module, forward, graph.example, path,
                       {.input_names = graph.inputs,
                        .output_names = graph.outputs,
                        .dynamic_axes = graph.dynamic_axes,
                        .doc_string = graph.doc});
    if (flags.check) {
      std::vector<Tensor> out;
      {
        const ModeGuard modes(module);
        module.eval();
        NoGradGuard ng;
        out = forward(graph.check);
      }
      EMBER_CHECK(out.size() == graph.outputs.size(), ValueError, "the model gave ", out.size(), " outputs for ",
                  graph.outputs.size(), " names");
      save_safetensors(path + ".inputs.safetensors", named(graph.inputs, graph.check));
      save_safetensors(path + ".expected.safetensors", named(graph.outputs, out));
    }
  } catch (const Error& e) {
    // Unsupported (an op without a lowering), IOError (the write), ValueError: one line naming the flag.
    throw IOError("--export-onnx " + path + ": " + e.what());
  }
  std::vector<std::string> ins;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const auto it = graph.dynamic_axes.find(graph.inputs[i]);
    ins.push_back(describe_input(graph.inputs[i], graph.example[i],
                                 it != graph.dynamic_axes.end() ? it->second : std::map<int, std::string>{}));
  }
  std::error_code ec;
  const double bytes = static_cast<double>(fs::file_size(path, ec));
  const std::string size = ec            ? "size unknown"
                           : bytes < 1e6 ? fmt("%.1f KB", bytes / 1e3)
                                         : fmt("%.1f MB", bytes / 1e6);
  std::printf("%s: exported %s -> %s to %s (ONNX opset %d, %s)%s\n", app, join(ins).c_str(),
              join(graph.outputs).c_str(), path.c_str(), onnx::kOpset, size.c_str(),
              flags.check ? "; check batch and Ember's outputs beside it" : "");
  std::fflush(stdout);
}

}  // namespace ember::app
