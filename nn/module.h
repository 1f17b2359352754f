/// \file
/// Module: the base of every layer, as torch.nn.Module. Parameters, buffers
/// and submodules are registered by name, so named_parameters() and state
/// dicts use PyTorch's dotted names ("blocks.0.attn.in_proj_weight") and
/// weights carry over from PyTorch by name.
#pragma once

#include <concepts>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::nn {

/// Name -> tensor, in PyTorch's order: a module's parameters, then its
/// buffers, then each submodule's entries in registration order.
using StateDict = ember::StateDict;

/// What load_state_dict found besides the keys it loaded.
struct LoadResult {
  std::vector<std::string> missing_keys;     ///< in the module, not in the dict
  std::vector<std::string> unexpected_keys;  ///< in the dict, not in the module
};

/// The base of every layer and model, as torch.nn.Module: it owns named
/// parameters, buffers and submodules, so that parameters(), state_dict(),
/// to(device) and train()/eval() reach the whole tree. Subclass it, register
/// what the layer holds in its constructor, and override forward.
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The layer's computation on one input. Layers with other signatures
  /// (attention) add their own overloads; calling this on a module that has
  /// no one-input forward throws ValueError.
  virtual Tensor forward(const Tensor& x);
  /// forward(x).
  Tensor operator()(const Tensor& x) { return forward(x); }
  /// The class name shown in messages ("Linear", "Sequential", ...).
  virtual std::string type_name() const { return "Module"; }
  /// The constructor's arguments as PyTorch's extra_repr() writes them
  /// ("in_features=2, out_features=16, bias=True"); empty by default.
  virtual std::string extra_repr() const { return ""; }
  /// PyTorch's repr(module), what print(model) shows: the name, extra_repr(),
  /// and each child as "(name): ..." indented below. A class that does not
  /// override type_name() shows its C++ class name.
  std::string str() const;

  // ---- registration (returns the stored handle) -----------------------------
  /// Adds a parameter named name (requires_grad unless told otherwise) and
  /// returns the stored handle, which the layer keeps in a member.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Adds a buffer: state that is saved and moved with the module but not
  /// trained (running statistics).
  Tensor register_buffer(const std::string& name, Tensor t);
  /// Adds a submodule; its entries appear under "name." in names and state dicts.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // ---- traversal --------------------------------------------------------------
  /// Parameters with their dotted names ("encoder.0.weight"), in registration
  /// order, own before the children's; only this module's when not recurse.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  /// The same handles without names (what an optimizer takes).
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Buffers with their dotted names.
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  /// The direct submodules with their names.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  /// This module (name "") and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// Number of parameter elements in the tree.
  int64_t num_parameters() const;

  // ---- mode and gradients ---------------------------------------------------
  /// Sets training mode here and in every descendant (dropout, batch norm).
  void train(bool on = true);
  /// train(false).
  void eval() { train(false); }
  /// Whether the module is in training mode.
  bool is_training() const { return training_; }
  /// Clears every parameter's gradient (to undefined, or to zeros when not
  /// set_to_none).
  void zero_grad(bool set_to_none = true);

  // ---- device -----------------------------------------------------------------
  /// Moves every parameter and buffer (recursively) to device, in place as
  /// PyTorch's module.to(device): the handles that layers (and optimizers)
  /// hold see the move. Gradients are dropped. Create the optimizer after
  /// moving (its state is allocated where the parameters are at the first
  /// step). Parameters that shared storage are moved separately.
  Module& to(Device device);
  /// PyTorch's module.to(dtype): every floating parameter and buffer
  /// (recursively) converted to dtype in place, as above; integer and bool
  /// buffers (BatchNorm's num_batches_tracked) keep theirs. dtype must be
  /// floating. Gradients are dropped. (nn/module_dtype.cpp)
  Module& to(DType dtype);
  /// to(device) then to(dtype).
  Module& to(Device device, DType dtype);
  /// PyTorch's .double(), .float(), .half(), .bfloat16() (renamed: double and
  /// float are C++ keywords, bfloat16 is the element type).
  ///@{
  Module& to_double() { return to(DType::Float64); }
  Module& to_float() { return to(DType::Float32); }
  Module& to_half() { return to(DType::Float16); }
  Module& to_bfloat16() { return to(DType::BFloat16); }
  ///@}

  // ---- state ----------------------------------------------------------------
  /// Parameters and buffers with their dotted names, in PyTorch's order (see
  /// StateDict); the tensors are the module's own handles, not copies.
  StateDict state_dict() const;
  /// Copies values into the registered tensors (in place, so optimizers keep
  /// their handles), converting each to the registered tensor's dtype as
  /// PyTorch's load_state_dict does (a bfloat16 checkpoint loads into a
  /// float32 model as float32); a floating tensor given for an integer or
  /// bool one, or the reverse, throws DTypeError naming the key. A shape
  /// mismatch always throws ShapeError naming the key;
  /// with strict, missing or unexpected keys throw ValueError listing them.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

 protected:
  /// Registers m as the child name (register_module's untyped part).
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect(const std::string& prefix, bool params, bool buffers, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// str(), then a line with the number of parameter elements ("Parameters:
/// 26,496 (26,496 trainable)"): `std::cout << model`.
std::ostream& operator<<(std::ostream& os, const Module& m);
/// The same through a module's shared_ptr, so `std::cout << model` prints the
/// model, not its address.
template <class M>
requires std::derived_from<M, Module> std::ostream& operator<<(std::ostream& os, const std::shared_ptr<M>& m) {
  return os << static_cast<const Module&>(*m);
}

}  // namespace ember::nn
