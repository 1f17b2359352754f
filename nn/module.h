// Module: the base of every layer, as torch.nn.Module. Parameters, buffers
// and submodules are registered by name, so named_parameters() and state
// dicts use PyTorch's dotted names ("blocks.0.attn.in_proj_weight") and
// weights carry over from PyTorch by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::nn {

// Name -> tensor, in PyTorch's order: a module's parameters, then its
// buffers, then each submodule's entries in registration order.
using StateDict = ember::StateDict;

struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The layer's computation on one input. Layers with other signatures
  // (attention) add their own overloads; calling this on a module that has
  // no one-input forward throws ValueError.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  virtual std::string type_name() const { return "Module"; }

  // ---- registration (returns the stored handle) -----------------------------
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // ---- traversal --------------------------------------------------------------
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module (name "") and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;

  // ---- mode and gradients ---------------------------------------------------
  // Sets training mode here and in every descendant (dropout, batch norm).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad(bool set_to_none = true);

  // ---- device -----------------------------------------------------------------
  // Moves every parameter and buffer (recursively) to device, in place as
  // PyTorch's module.to(device): the handles that layers (and optimizers)
  // hold see the move. Gradients are dropped. Create the optimizer after
  // moving (its state is allocated where the parameters are at the first
  // step). Parameters that shared storage are moved separately.
  Module& to(Device device);

  // ---- state ----------------------------------------------------------------
  StateDict state_dict() const;
  // Copies values into the registered tensors (in place, so optimizers keep
  // their handles). A shape mismatch always throws ShapeError naming the key;
  // with strict, missing or unexpected keys throw ValueError listing them.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect(const std::string& prefix, bool params, bool buffers, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace ember::nn
