// Module registration, traversal, train/eval and state dicts.
#include <ember/nn/module.h>

#include <algorithm>
#include <unordered_map>

#include <ember/core/autograd.h>

namespace ember::nn {

Tensor Module::forward(const Tensor&) {
  throw ValueError(type_name() + ": this module has no single-input forward(x)");
}

namespace {
void check_name(const std::string& name, const std::string& owner) {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, owner, ": invalid attribute name '",
              name, "' (must be non-empty and contain no '.')");
}
template <class V>
bool has_name(const V& v, const std::string& name) {
  return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, type_name());
  EMBER_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name), ValueError,
              type_name(), ": attribute '", name, "' is already registered");
  if (t.defined() && requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Module& Module::to(Device device) {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", true, true, true, all);
  for (auto& [name, t] : all) {
    if (!t.defined() || t.device() == device) continue;
    Tensor moved = t.detach().to(device);
    // Swap the storage under the existing impl: every handle follows.
    TensorImpl* impl = t.unsafe_impl();
    impl->storage = moved.storage();
    impl->strides = moved.strides();
    impl->offset = moved.offset();
    t.zero_grad(true);
  }
  return *this;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, type_name());
  EMBER_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name), ValueError,
              type_name(), ": attribute '", name, "' is already registered");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, type_name());
  EMBER_CHECK(m != nullptr, ValueError, type_name(), ": submodule '", name, "' is null");
  EMBER_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name), ValueError,
              type_name(), ": attribute '", name, "' is already registered");
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, bool buffers, bool recurse,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  if (params)
    for (const auto& [n, t] : params_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, m] : children_) m->collect(prefix + n + ".", params, buffers, true, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, false, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, true, recurse, out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, m] : children_)
    for (auto& [sub, ptr] : m->named_modules()) out.emplace_back(sub.empty() ? n : n + "." + sub, ptr);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& t : parameters()) t.zero_grad(set_to_none);
}

StateDict Module::state_dict() const {
  StateDict out;
  collect("", true, true, true, out);
  return out;
}

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  const StateDict own = state_dict();
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [n, t] : dict) given[n] = &t;
  LoadResult r;
  std::string mismatches, dtype_mismatches;
  std::unordered_map<std::string, bool> known;
  for (const auto& [n, t] : own) {
    known[n] = true;
    auto it = given.find(n);
    if (it == given.end()) {
      r.missing_keys.push_back(n);
      continue;
    }
    if (it->second->shape() != t.shape())
      mismatches += " size mismatch for " + n + ": the checkpoint has shape " + it->second->shape().str() +
                    ", the model has " + t.shape().str() + ".";
    if (it->second->is_floating_point() != t.is_floating_point())
      dtype_mismatches += std::string(" dtype mismatch for ") + n + ": the checkpoint has " +
                          dtype_name(it->second->dtype()) + ", the model has " + dtype_name(t.dtype()) + ".";
  }
  for (const auto& [n, t] : dict)
    if (!known.count(n)) r.unexpected_keys.push_back(n);
  // Report every problem at once, as PyTorch does; shapes fail even when
  // not strict, since such a tensor cannot be loaded at all.
  const bool key_problems = strict && (!r.missing_keys.empty() || !r.unexpected_keys.empty());
  if (!dtype_mismatches.empty())
    throw DTypeError("load_state_dict: error(s) in loading the state dict for " + type_name() + ":" + dtype_mismatches +
                     mismatches);
  if (!mismatches.empty() || key_problems) {
    std::string msg = "load_state_dict: error(s) in loading the state dict for " + type_name() + ":" + mismatches;
    if (strict && !r.missing_keys.empty()) {
      msg += " missing keys:";
      for (const auto& k : r.missing_keys) msg += " \"" + k + "\"";
      msg += ".";
    }
    if (strict && !r.unexpected_keys.empty()) {
      msg += " unexpected keys:";
      for (const auto& k : r.unexpected_keys) msg += " \"" + k + "\"";
      msg += ".";
    }
    if (!mismatches.empty()) throw ShapeError(msg);
    throw ValueError(msg);
  }
  // Validated: now copy, in place.
  NoGradGuard no_grad;
  for (const auto& [n, t] : own) {
    auto it = given.find(n);
    if (it == given.end()) continue;
    Tensor dst = t;
    dst.copy_(*it->second);
  }
  return r;
}

}  // namespace ember::nn
