// Running one ONNX backend test case (cases.h) and comparing its outputs as
// ONNX's backend test runner does: the same shape and element type, values
// within rtol 1e-3, atol 1e-7 (|actual - expected| <= atol + rtol |expected|),
// NaN matching NaN and infinities matching themselves; integers and bools
// exactly. float16 and bfloat16 carry 11 and 8 bits of mantissa, so they are
// compared in float32 with rtol 1e-2, atol 1e-3 (their rounding alone is
// 5e-4 and 4e-3 relative).
#include "cases.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ember/ember.h>
#include <ember/onnx/import_ops.h>
#include <ember/onnx/onnx.h>

namespace fs = std::filesystem;

namespace conformance {

const char* status_name(Status s) {
  switch (s) {
    case Status::Passed:
      return "passed";
    case Status::Failed:
      return "failed";
    case Status::Unsupported:
      return "unsupported";
  }
  return "?";
}

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw ember::IOError("cannot open " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A data set's tensor. NumPy has no bfloat16, so ONNX's generator saved bfloat16 values as uint16 bits:
// where the graph declares bfloat16 (declared, a TensorProto::DataType) those bits are read as bfloat16.
::onnx::TensorProto read_proto(const fs::path& p, int declared) {
  ::onnx::TensorProto t;
  if (!t.ParseFromString(read_bytes(p))) throw ember::IOError(p.string() + ": not a TensorProto");
  if (declared == ::onnx::TensorProto::BFLOAT16 && t.data_type() == ::onnx::TensorProto::UINT16)
    t.set_data_type(::onnx::TensorProto::BFLOAT16);
  return t;
}

int declared_type(const ::onnx::ValueInfoProto& v) {
  return v.type().has_tensor_type() ? v.type().tensor_type().elem_type() : 0;
}

// input_0.pb, input_1.pb, ... (or output_*) in numeric order.
std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (int k = 0;; ++k) {
    fs::path p = dir / (prefix + std::to_string(k) + ".pb");
    if (!fs::exists(p)) break;
    out.push_back(p);
  }
  return out;
}

struct Compared {
  bool ok = true;
  double max_abs = 0;
  std::string why;
};

// The comparison of the file comment; expected and actual on the host.
Compared compare(const ember::Tensor& expected, const ember::Tensor& actual) {
  Compared c;
  if (expected.dtype() != actual.dtype()) {
    c.ok = false;
    c.why =
        std::string("dtype ") + ember::dtype_name(actual.dtype()) + ", expected " + ember::dtype_name(expected.dtype());
    return c;
  }
  if (expected.shape() != actual.shape()) {
    c.ok = false;
    c.why = "shape " + actual.shape().str() + ", expected " + expected.shape().str();
    return c;
  }
  if (!expected.is_floating_point()) {
    const auto e = expected.to(ember::kInt64).to_vector<int64_t>();
    const auto a = actual.to(ember::kInt64).to_vector<int64_t>();
    for (size_t i = 0; i < e.size(); ++i) {
      const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(e[i]));
      c.max_abs = std::max(c.max_abs, d);
      if (a[i] != e[i] && c.ok) {
        c.ok = false;
        c.why = "element " + std::to_string(i) + " is " + std::to_string(a[i]) + ", expected " + std::to_string(e[i]);
      }
    }
    return c;
  }
  const bool half = ember::is_half(expected.dtype());
  const double rtol = half ? 1e-2 : 1e-3, atol = half ? 1e-3 : 1e-7;
  const auto e = expected.to(ember::kFloat64).to_vector<double>();
  const auto a = actual.to(ember::kFloat64).to_vector<double>();
  for (size_t i = 0; i < e.size(); ++i) {
    bool good;
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      good = std::isnan(e[i]) && std::isnan(a[i]);
    } else if (std::isinf(e[i]) || std::isinf(a[i])) {
      good = e[i] == a[i];
    } else {
      const double d = std::abs(a[i] - e[i]);
      c.max_abs = std::max(c.max_abs, d);
      good = d <= atol + rtol * std::abs(e[i]);
    }
    if (!good && c.ok) {
      c.ok = false;
      std::ostringstream os;
      os.precision(9);
      os << "element " << i << " is " << a[i] << ", expected " << e[i];
      c.why = os.str();
    }
  }
  return c;
}

// What the per-op table groups a case under: the op type of a case of one node (not counting Constant
// nodes that feed it); "" for a graph of several (main.cpp names those after the one-node case they
// expand, where there is one).
std::string group_of(const std::string& model_bytes, const std::string& suite) {
  if (suite != "node") return suite;
  ::onnx::ModelProto m;
  if (!m.ParseFromString(model_bytes) || !m.has_graph()) return "";
  std::string op;
  int ops = 0;
  for (const auto& n : m.graph().node())
    if (n.op_type() != "Constant" || m.graph().node_size() == 1) op = n.op_type(), ++ops;
  return ops == 1 ? op : "";
}

// Sequence, map and optional values are not tensors: Ember has none of them.
void require_tensor_values(const ::onnx::ModelProto& m) {
  auto check = [](const ::onnx::ValueInfoProto& v, const char* kind) {
    if (v.has_type() && !v.type().has_tensor_type())
      throw ember::onnx::Unsupported(std::string(kind) + " '" + v.name() +
                                     "' is not a tensor (sequence, map and optional values are not supported)");
  };
  for (const auto& v : m.graph().input()) check(v, "graph input");
  for (const auto& v : m.graph().output()) check(v, "graph output");
}

}  // namespace

CaseResult run_case(const std::string& dir, const std::string& suite, const std::string& name) {
  CaseResult r{suite, name, "", Status::Failed, "", 0};
  try {
    const std::string bytes = read_bytes(fs::path(dir) / "model.onnx");
    r.group = group_of(bytes, suite);
    ::onnx::ModelProto proto;
    if (proto.ParseFromString(bytes) && proto.has_graph()) require_tensor_values(proto);
    auto model = ember::onnx::load_from_bytes(bytes, name + "/model.onnx");
    model->eval();
    std::vector<std::string> all_inputs;
    for (const auto& v : proto.graph().input()) all_inputs.push_back(v.name());

    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) throw ember::IOError("no test_data_set_* folder");

    ember::NoGradGuard no_grad;
    for (const auto& set : sets) {
      std::vector<ember::Tensor> given;
      std::vector<std::string> names;
      const auto input_files = numbered(set, "input_");
      for (size_t i = 0; i < input_files.size(); ++i) {
        const fs::path& p = input_files[i];
        // The declared type of the graph input this file is for: by name, else by position.
        int declared = 0;
        ::onnx::TensorProto peek;
        if (peek.ParseFromString(read_bytes(p))) {
          for (const auto& v : proto.graph().input())
            if (v.name() == peek.name()) declared = declared_type(v);
          if (!declared && i < static_cast<size_t>(proto.graph().input_size()))
            declared = declared_type(proto.graph().input(static_cast<int>(i)));
        }
        const ::onnx::TensorProto t = read_proto(p, declared);
        given.push_back(ember::onnx::detail::from_proto(t, p.string()));
        names.push_back(t.name());
      }
      // The data sets give the inputs without initializers in order, or name them: a named set may give
      // some of the initialized inputs too (overrides), placed by name.
      std::vector<ember::Tensor> inputs = given;
      if (given.size() != model->input_names().size()) {
        inputs.assign(all_inputs.size(), ember::Tensor());
        for (size_t i = 0; i < given.size(); ++i) {
          auto it = std::find(all_inputs.begin(), all_inputs.end(), names[i]);
          if (it == all_inputs.end())
            throw ember::IOError(set.string() + ": input " + std::to_string(i) + " ('" + names[i] +
                                 "') names no graph input");
          inputs[it - all_inputs.begin()] = given[i];
        }
      }
      const std::vector<ember::Tensor> outs = model->forward(inputs);
      const std::vector<fs::path> expected = numbered(set, "output_");
      if (expected.size() != outs.size())
        throw ember::ValueError("the graph has " + std::to_string(outs.size()) + " outputs, the data set " +
                                std::to_string(expected.size()));
      for (size_t k = 0; k < outs.size(); ++k) {
        const int declared = declared_type(proto.graph().output(static_cast<int>(k)));
        const Compared c = compare(
            ember::onnx::detail::from_proto(read_proto(expected[k], declared), expected[k].string()), outs[k].cpu());
        r.max_abs_error = std::max(r.max_abs_error, c.max_abs);
        if (!c.ok) {
          r.status = Status::Failed;
          r.detail = set.filename().string() + " output " + std::to_string(k) + " ('" + model->output_names()[k] +
                     "'): " + c.why;
          return r;
        }
      }
    }
    r.status = Status::Passed;
  } catch (const ember::onnx::Unsupported& e) {
    r.status = Status::Unsupported;
    r.detail = e.what();
  } catch (const std::exception& e) {
    r.status = Status::Failed;
    r.detail = e.what();
  } catch (...) {
    r.status = Status::Failed;
    r.detail = "an exception that is not a std::exception";
  }
  return r;
}

}  // namespace conformance
