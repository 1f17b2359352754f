// Module and training checkpoints through safetensors.
#include <ember/nn/checkpoint.h>

#include <cmath>
#include <cstring>

namespace ember::nn {

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

LoadResult load(Module& module, const std::string& path, bool strict) {
  const StateDict sd = load_safetensors(path);
  try {
    return module.load_state_dict(sd, strict);
  } catch (const ShapeError& e) {
    throw ShapeError("checkpoint '" + path + "': " + e.what());
  } catch (const ValueError& e) {
    throw ValueError("checkpoint '" + path + "': " + e.what());
  }
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

std::vector<std::string> suspicious_tensors(const StateDict& sd) {
  std::vector<std::string> out;
  for (const auto& [name, t] : sd) {
    if (!t.is_floating_point() || t.numel() == 0) continue;
    const Tensor d = t.detach().cpu().to(kFloat64).contiguous();
    const double* p = static_cast<const double*>(d.data_ptr());
    bool nonfinite = false, negative = false;
    for (int64_t i = 0; i < d.numel(); ++i) {
      nonfinite = nonfinite || !std::isfinite(p[i]);
      negative = negative || p[i] < 0;
    }
    const bool second_moment = name.size() >= 10 && name.compare(name.size() - 10, 10, "exp_avg_sq") == 0;
    if (nonfinite)
      out.push_back(name + " (NaN or Inf)");
    else if (second_moment && negative)
      out.push_back(name + " (negative second moment)");
  }
  return out;
}

}  // namespace ember::nn
