// Module and training checkpoints through safetensors.
#include <ember/nn/checkpoint.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ember::nn {

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

LoadResult load(Module& module, const std::string& path, bool strict) {
  const StateDict sd = load_safetensors(path);
  try {
    return module.load_state_dict(sd, strict);
  } catch (const Error&) {
    rethrow_with_context("checkpoint '" + path + "': ");
  }
}

void rethrow_with_context(const std::string& where) {
  try {
    throw;
  } catch (const ShapeError& e) {
    throw ShapeError(where + e.what());
  } catch (const IndexError& e) {
    throw IndexError(where + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(where + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(where + e.what());
  } catch (const AutogradError& e) {
    throw AutogradError(where + e.what());
  } catch (const IOError& e) {
    throw IOError(where + e.what());
  } catch (const ValueError& e) {
    throw ValueError(where + e.what());
  } catch (const Error& e) {
    throw Error(where + e.what());
  }
  throw;  // not reached: each handler above throws
}

StateDict take_prefixed(const StateDict& in, const std::string& prefix) {
  StateDict out;
  for (const auto& [n, t] : in)
    if (n.rfind(prefix, 0) == 0) out.emplace_back(n.substr(prefix.size()), t);
  return out;
}

void add_prefixed(StateDict& out, const std::string& prefix, const StateDict& in) {
  for (const auto& [n, t] : in) out.emplace_back(prefix + n, t);
}

void check_exact_reload(const StateDict& stored, const StateDict& reloaded, const std::string& file,
                        const std::string& part) {
  const std::string where = "training checkpoint '" + file + "': " + part + " state";
  auto find = [](const StateDict& d, const std::string& k) -> const Tensor* {
    for (const auto& [n, t] : d)
      if (n == k) return &t;
    return nullptr;
  };
  for (const auto& [name, t] : reloaded)
    if (!find(stored, name)) throw IOError(where + ": '" + name + "' is missing from the file (it would be reset)");
  for (const auto& [name, t] : stored) {
    const Tensor* r = find(reloaded, name);
    if (!r) throw IOError(where + ": '" + name + "' is in the file but nothing reads it (a missing partner entry?)");
    if (r->dtype() != t.dtype() || r->shape() != t.shape())
      throw IOError(where + ": '" + name + "' is " + dtype_name(t.dtype()) + " " + t.shape().str() + " in the file, " +
                    dtype_name(r->dtype()) + " " + r->shape().str() + " once loaded");
    const Tensor a = t.cpu().contiguous(), b = r->detach().cpu().contiguous();
    const size_t bytes = static_cast<size_t>(a.numel()) * a.element_size();
    if (bytes && std::memcmp(a.data_ptr(), b.data_ptr(), bytes) != 0)
      throw IOError(where + ": '" + name + "' does not load back to the value stored (it would be converted)");
  }
}

namespace {

// One pass over a tensor's values: any NaN or Inf, any value below zero, the
// largest magnitude. float32 and float64 (nearly every stored tensor) are
// read in place, so a model's load costs one extra read of its bytes; other
// dtypes are converted first.
struct ValueScan {
  bool nonfinite = false, negative = false;
  double max_abs = 0;
};
template <class T>
ValueScan scan(const T* p, int64_t n) {
  ValueScan r;
  T lo = 0, hi = 0;
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    bad = bad || !std::isfinite(p[i]);
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  r.nonfinite = bad;
  r.negative = lo < 0;
  r.max_abs = std::max(-static_cast<double>(lo), static_cast<double>(hi));
  return r;
}
ValueScan scan(const Tensor& t) {
  const Tensor c = t.detach().cpu().contiguous();
  if (c.dtype() == kFloat32) return scan(static_cast<const float*>(c.data_ptr()), c.numel());
  const Tensor d = c.dtype() == kFloat64 ? c : c.to(kFloat64);
  return scan(static_cast<const double*>(d.data_ptr()), d.numel());
}
std::string shortest(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}
bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::vector<std::string> suspicious_tensors(const StateDict& sd) {
  // Beyond 1e19 a value's square overflows float32 (max 3.4e38), so a
  // matmul, a norm or a loss over it gives Inf or NaN: no trained weight,
  // running statistic or optimizer moment of a healthy run comes near it.
  constexpr double kOverflow = 1e19;
  std::vector<std::string> out;
  for (const auto& [name, t] : sd) {
    if (!t.is_floating_point() || t.numel() == 0) continue;
    const ValueScan v = scan(t);
    if (v.nonfinite)
      out.push_back(name + " (NaN or Inf)");
    else if (ends_with(name, "exp_avg_sq") && v.negative)
      out.push_back(name + " (negative second moment)");
    else if (ends_with(name, "running_var") && v.negative)
      out.push_back(name + " (negative running variance)");
    else if (v.max_abs >= kOverflow)
      out.push_back(name + " (values up to " + shortest(v.max_abs) + ", which overflow float32 when squared)");
  }
  return out;
}

}  // namespace ember::nn
