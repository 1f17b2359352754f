// --export-onnx FILE, as the demos share it: the flag (an output file,
// checked before any work so that a bad path fails in a second, not after
// training), and the export itself over onnx::export_model with named
// inputs and outputs and dynamic axes, followed by one line saying what was
// written. A failure (an op without an ONNX lowering, a path that cannot be
// written) is an ember::Error naming --export-onnx and the file: run_main
// prints it as one line and exits 1.
//
// --export-onnx-check adds, beside FILE, the real batch the app chose
// (FILE.inputs.safetensors, tensors named as the graph's inputs) and
// Ember's outputs for it (FILE.expected.safetensors, named as the graph's
// outputs), so that a test runs FILE in onnxruntime on the first
// (tools/onnx_run.js) and compares with the second, with nothing to rebuild.
// The check batch differs from the traced example in every dynamic axis, so
// the comparison also runs the graph at sizes it was not traced at.
//
// In its own library (ember_app_onnx) because it links ember_onnx, the
// layer with protobuf and libonnx, which the other demos do without.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "app.h"

namespace ember::app {

/// The two flags' values; an empty path exports nothing.
struct OnnxExportFlags {
  std::string path;
  bool check = false;
  bool enabled() const { return !path.empty(); }
};

/// Declares --export-onnx FILE (an output file; `what` ends its help: what
/// the graph maps, e.g. "images -> logits") and --export-onnx-check.
void add_export_onnx(CLI::App& cli, OnnxExportFlags& flags, const std::string& what);

/// Before any work: FILE's directory exists and takes a new file, and FILE
/// is not a directory (UsageError naming --export-onnx). No-op when unset.
void check_export_onnx(const OnnxExportFlags& flags);

/// The graph an app exports: input and output names (what they are:
/// "images", "tokens", "logits"), their dynamic axes (as
/// onnx::ExportOptions's), the example traced and the check batch (each one
/// tensor per input, on the module's device).
struct OnnxGraph {
  std::vector<std::string> inputs, outputs;
  std::map<std::string, std::map<int, std::string>> dynamic_axes;
  std::vector<Tensor> example, check;
  std::string doc;  ///< the model's doc_string: what it is and how to feed it
};

/// An image classifier's graph: "images" (batch, C, H, W) -> "logits"
/// (batch, classes), the batch axis dynamic; traced on the first 2 of
/// `images` (a real batch, normalised as the model was trained), checked on
/// up to the first 8. `what` starts the doc string (the model, its data),
/// followed by the normalisation the images need.
OnnxGraph image_classifier_graph(const Tensor& images, const std::string& what, const std::vector<double>& mean,
                                 const std::vector<double>& std);

/// Exports `forward` over `module` to flags.path (nothing when unset) and
/// prints "<app>: exported images[batch,1,28,28] -> logits to FILE (ONNX
/// opset 17, 84.2 KB)"; with flags.check, writes the check batch and Ember's
/// outputs for it beside FILE. The module's training mode is kept.
void export_onnx(const char* app, nn::Module& module, const onnx::ForwardFn& forward, const OnnxGraph& graph,
                 const OnnxExportFlags& flags);

}  // namespace ember::app
