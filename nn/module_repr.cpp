// What `std::cout << model` prints: PyTorch's repr(module) (the layout of
// print(model)), then the parameter count. Module::str() is
// torch.nn.Module.__repr__ line by line; the extra_repr() of each built-in
// layer is its PyTorch counterpart's, numbers written as Python writes them
// (1e-05, 0.1, True), so the two print the same text for the same model.
#include <cxxabi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <sstream>
#include <typeinfo>

#include <ember/nn/cnn.h>
#include <ember/nn/conv.h>
#include <ember/nn/layers.h>
#include <ember/nn/module.h>
#include <ember/nn/rnn.h>

namespace ember::nn {
namespace {

// Python's repr of a float: the shortest text that reads back to x, with
// ".0" on whole numbers and a two-digit exponent outside [1e-4, 1e16).
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  const double mag = std::fabs(x);
  if (mag != 0 && (mag < 1e-4 || mag >= 1e16) && s.find('e') == std::string::npos) {
    std::snprintf(buf, sizeof buf, "%.16e", x);  // %g kept the digits positional: force the exponent
    s = buf;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

const char* py_bool(bool b) { return b ? "True" : "False"; }

// (3, 3), or 3 when both sides are equal (what PyTorch shows for an int argument).
// (Appended piece by piece: GCC 12 warns, falsely, about "(" + to_string(...).)
std::string pair(const std::array<int64_t, 2>& v) {
  std::string s = "(";
  s += std::to_string(v[0]);
  s += ", ";
  s += std::to_string(v[1]);
  s += ")";
  return s;
}
std::string pair_or_int(const std::array<int64_t, 2>& v) { return v[0] == v[1] ? std::to_string(v[0]) : pair(v); }

// The class name without namespaces, for modules that keep the default
// type_name() (a user's `struct MLP : nn::Module`).
std::string class_name(const Module& m) {
  const char* mangled = typeid(m).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  const size_t args = name.find('<');
  const size_t colon = name.rfind("::", args);
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

// torch.nn.modules.module._addindent: every line but the first indented.
std::string add_indent(const std::string& s, int spaces) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out.append(spaces, ' ');
  }
  return out;
}

// 26496 -> "26,496".
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string Module::str() const {
  std::string name = type_name();
  if (name == "Module") name = class_name(*this);
  std::vector<std::string> lines;
  const std::string extra = extra_repr();
  if (!extra.empty()) lines.push_back(extra);
  for (const auto& [child, m] : children_) lines.push_back("(" + child + "): " + add_indent(m->str(), 2));
  std::string s = name + "(";
  if (lines.size() == 1 && children_.empty()) {
    s += lines[0];
  } else if (!lines.empty()) {
    for (const std::string& l : lines) s += "\n  " + l;
    s += "\n";
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  int64_t trainable = 0;
  for (const Tensor& p : m.parameters())
    if (p.requires_grad()) trainable += p.numel();
  return os << m.str() << "\nParameters: " << grouped(m.num_parameters()) << " (" << grouped(trainable)
            << " trainable)";
}

// ---- the built-in layers' extra_repr, as PyTorch's -------------------------
std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + py_bool(bias.defined());
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(weight.size(0)) + ", " + std::to_string(weight.size(1));
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

std::string LayerNorm::extra_repr() const {
  std::string shape = "(";
  for (int i = 0; i < normalized_shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(normalized_shape[i]);
  shape += normalized_shape.size() == 1 ? ",)" : ")";
  return shape + ", eps=" + py_float(eps) + ", elementwise_affine=" + py_bool(weight.defined());
}

std::string BatchNorm1d::extra_repr() const {
  const int64_t n = weight.defined() ? weight.size(0) : (running_mean.defined() ? running_mean.size(0) : 0);
  return std::to_string(n) + ", eps=" + py_float(eps) + ", momentum=" + py_float(momentum) +
         ", affine=" + py_bool(weight.defined()) + ", track_running_stats=" + py_bool(running_mean.defined());
}

std::string Dropout::extra_repr() const { return "p=" + py_float(p) + ", inplace=False"; }

std::string GELU::extra_repr() const {
  return std::string("approximate='") + (approximate == GeluApproximation::Tanh ? "tanh" : "none") + "'";
}

std::string Conv2d::extra_repr() const {
  std::ostringstream s;
  s << in_channels << ", " << out_channels << ", kernel_size=" << pair(kernel_size) << ", stride=" << pair(stride);
  if (padding[0] != 0 || padding[1] != 0) s << ", padding=" << pair(padding);
  if (!bias.defined()) s << ", bias=False";
  return s.str();
}

std::string MaxPool2d::extra_repr() const {
  const std::array<int64_t, 2> st = stride[0] == 0 && stride[1] == 0 ? kernel : stride;
  return "kernel_size=" + pair_or_int(kernel) + ", stride=" + pair_or_int(st) + ", padding=" + pair_or_int(padding) +
         ", dilation=1, ceil_mode=False";
}

std::string AvgPool2d::extra_repr() const {
  const std::array<int64_t, 2> st = stride[0] == 0 && stride[1] == 0 ? kernel : stride;
  return "kernel_size=" + pair_or_int(kernel) + ", stride=" + pair_or_int(st) + ", padding=" + pair_or_int(padding);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_or_int(output_size); }

// torch.nn.RNNBase.extra_repr: the options that differ from the defaults.
std::string RNNBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (opts.num_layers != 1) s += ", num_layers=" + std::to_string(opts.num_layers);
  if (!opts.bias) s += ", bias=False";
  if (opts.batch_first) s += ", batch_first=True";
  if (opts.dropout != 0) s += ", dropout=" + py_float(opts.dropout);
  if (opts.bidirectional) s += ", bidirectional=True";
  return s;
}

// torch.nn.RNNCellBase.extra_repr.
std::string GRUCell::extra_repr() const {
  return std::to_string(input_size) + ", " + std::to_string(hidden_size) + (bias_ih.defined() ? "" : ", bias=False");
}
std::string LSTMCell::extra_repr() const {
  return std::to_string(input_size) + ", " + std::to_string(hidden_size) + (bias_ih.defined() ? "" : ", bias=False");
}

}  // namespace ember::nn
