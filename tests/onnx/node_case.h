// Runs one of ONNX's backend node test cases (a folder with model.onnx and
// test_data_set_N/{input_K,output_K}.pb) through the importer's op table
// directly: the model's single node gets its inputs from the .pb files and
// its outputs are compared with the expected ones. A development harness
// for the op groups that needs no graph runner.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/onnx/import_ops.h>

namespace test::onnx_node {

enum class Status { Pass, Fail, Unsupported, Error };

struct Result {
  Status status = Status::Pass;
  std::string message;
};

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw ember::IOError("cannot open " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline ::onnx::ModelProto read_model(const std::filesystem::path& p) {
  ::onnx::ModelProto m;
  if (!m.ParseFromString(read_bytes(p))) throw ember::IOError("cannot parse " + p.string());
  return m;
}

// The tensor a .pb file holds; its ONNX element type in *type when asked.
inline ember::Tensor read_tensor(const std::filesystem::path& p, int* type = nullptr) {
  ::onnx::TensorProto t;
  if (!t.ParseFromString(read_bytes(p))) throw ember::IOError("cannot parse " + p.string());
  if (type) *type = t.data_type();
  return ember::onnx::detail::from_proto(t, p.string());
}

// The op type of a model with exactly one node, else "".
inline std::string single_op(const ::onnx::ModelProto& m) {
  return m.graph().node_size() == 1 ? m.graph().node(0).op_type() : std::string();
}

inline int model_opset(const ::onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return static_cast<int>(o.version());
  return 0;
}

// Whether got matches want: same shape, values within atol + rtol |want| (NaN
// matches NaN, equal infinities match); why not in `why`.
inline bool close(const ember::Tensor& got, const ember::Tensor& want, double rtol, double atol, std::string& why) {
  if (got.shape() != want.shape()) {
    why = ember::detail::cat_str("shape ", got.shape(), " but expected ", want.shape());
    return false;
  }
  const bool want_float = want.is_floating_point();
  if (want_float != got.is_floating_point() || (want.dtype() == ember::kBool) != (got.dtype() == ember::kBool)) {
    why = ember::detail::cat_str("dtype ", ember::dtype_name(got.dtype()), " but expected ",
                                 ember::dtype_name(want.dtype()));
    return false;
  }
  const auto g = got.cpu().to(ember::kFloat64).to_vector<double>();
  const auto w = want.cpu().to(ember::kFloat64).to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (g[i] == w[i]) continue;
    if (std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i])) continue;
    why = ember::detail::cat_str("element ", i, ": ", g[i], " but expected ", w[i]);
    return false;
  }
  return true;
}

// Runs every test_data_set_N of the case folder `dir`.
inline Result run_case(const std::filesystem::path& dir, double rtol = 1e-3, double atol = 1e-7) {
  namespace fs = std::filesystem;
  using namespace ember::onnx::detail;
  Result r;
  try {
    const ::onnx::ModelProto m = read_model(dir / "model.onnx");
    if (m.graph().node_size() != 1) return {Status::Error, "not a single-node model"};
    const ::onnx::NodeProto& node = m.graph().node(0);
    const OpImpl fn = op_table().find(node.op_type());
    if (!fn) return {Status::Unsupported, "no implementation of " + node.op_type()};
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) return {Status::Error, "no test data sets"};
    for (const auto& set : sets) {
      // Graph inputs in order, matched to input_K.pb; the node names them (or "" when omitted).
      std::map<std::string, ember::Tensor> values;
      std::map<std::string, int> types;
      int k = 0;
      for (const auto& in : m.graph().input()) {
        const fs::path p = set / ("input_" + std::to_string(k++) + ".pb");
        if (fs::exists(p)) values[in.name()] = read_tensor(p, &types[in.name()]);
      }
      std::vector<ember::Tensor> inputs;
      std::vector<int> input_types;
      for (const auto& name : node.input()) {
        inputs.push_back(name.empty() ? ember::Tensor() : values[name]);
        input_types.push_back(name.empty() ? 0 : types[name]);
      }
      NodeArgs args(node, inputs, model_opset(m));
      args.set_input_types(input_types);
      const std::vector<ember::Tensor> outs = fn(args);
      k = 0;
      for (const auto& out : m.graph().output()) {
        const ember::Tensor want = read_tensor(set / ("output_" + std::to_string(k++) + ".pb"));
        int idx = -1;
        for (int j = 0; j < node.output_size(); ++j)
          if (node.output(j) == out.name()) idx = j;
        if (idx < 0 || idx >= static_cast<int>(outs.size()) || !outs[idx].defined())
          return {Status::Fail, "output '" + out.name() + "' not produced"};
        std::string why;
        if (!close(outs[idx], want, rtol, atol, why))
          return {Status::Fail, set.filename().string() + " output '" + out.name() + "': " + why};
      }
    }
  } catch (const ember::onnx::Unsupported& e) {
    return {Status::Unsupported, e.what()};
  } catch (const std::exception& e) {
    return {Status::Error, e.what()};
  }
  return r;
}

}  // namespace test::onnx_node
