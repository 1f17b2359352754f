/// \file
/// Reverse-mode, define-by-run autograd: the graph, saved tensors, and the
/// one public way every op (built in or user-defined) records its backward.
///
/// The picture is micrograd's: each op that ran on a tensor needing a gradient
/// leaves a Node holding a closure that maps the gradient of its outputs to
/// the gradients of its inputs; backward() orders the nodes topologically and
/// walks them once in reverse. An op records itself like this:
///
/// \code
///   Tensor out = ...forward...;
///   if (autograd::needs_grad({a, b}))
///     autograd::record("mul", {a, b}, out,
///         [sa = autograd::SavedTensor(a), sb = autograd::SavedTensor(b)](autograd::BackwardContext& ctx) {
///           if (ctx.needs_grad(0)) ctx.set_grad(0, mul(ctx.grad_output(), sb.get()));
///           if (ctx.needs_grad(1)) ctx.set_grad(1, mul(ctx.grad_output(), sa.get()));
///         });
/// \endcode
///
/// What the engine does once, for all ops, so no backward formula has to:
///  - sums a gradient over broadcast dims back to its input's shape;
///  - skips inputs that need no gradient (needs_grad(i) is false for them: a
///    frozen weight costs no weight-gradient GEMM);
///  - accumulates gradients that reach a tensor along several paths;
///  - checks that tensors saved for backward were not modified in place since
///    (SavedTensor compares its storage's version counter);
///  - frees each node's saved tensors after it ran unless retain_graph is set,
///    and names the node if a second backward reaches it.
/// Backward formulas run with grad mode off, so they are not differentiated
/// again (no double backward), and they are written with Ember's own ops, so
/// they run on every device that has the forward kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::autograd {

// ---- grad mode --------------------------------------------------------------
/// Whether ops record the graph on this thread (on by default; NoGradGuard
/// turns it off for a scope, as torch.no_grad()).
///@{
bool grad_enabled();
void set_grad_enabled(bool enabled);
///@}

/// Disables graph recording in its scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class Node;

/// Where a gradient goes: input slot input_nr of node.
struct Edge {
  std::shared_ptr<Node> node;  ///< null when the input needs no gradient
  uint32_t input_nr = 0;       ///< which output of node the gradient is for
};

/// Autograd's data on a tensor, created only once autograd touches it.
struct AutogradMeta {
  Tensor grad;                           ///< the accumulated gradient (leaves, and non-leaves with retain_grad)
  std::shared_ptr<Node> grad_fn;         ///< null for leaves
  std::weak_ptr<Node> grad_accumulator;  ///< leaves: the node that adds into grad
  uint32_t output_nr = 0;                ///< which output of grad_fn this is
  bool requires_grad = false;            ///< leaves only; non-leaves have grad_fn
  bool retains_grad = false;             ///< retain_grad() was called
  /// Leaves: run after backward accumulated into grad(), with their ids
  /// (register_post_accumulate_grad_hook).
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;
};

/// A tensor kept for backward: a detached alias (sharing data, no graph edge,
/// so an op saving its own output makes no reference cycle) plus the version
/// of its storage at save time.
class SavedTensor {
 public:
  SavedTensor() = default;
  /// Saves t (an undefined t gives an undefined SavedTensor).
  explicit SavedTensor(const Tensor& t);
  /// The saved tensor; throws AutogradError if it was modified in place since
  /// it was saved (the engine adds the name of the op to the message).
  ///@{
  const Tensor& get() const;
  bool defined() const { return data_.defined(); }
  ///@}

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

/// Shape, dtype and device of a forward input or output, kept by the node so
/// the engine can reduce broadcast gradients and make zeros for unused outputs
/// without keeping the tensors alive.
struct TensorMeta {
  /// The tensor's shape, dtype and device.
  ///@{
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
  ///@}
  TensorMeta() = default;
  /// The metadata of t.
  explicit TensorMeta(const Tensor& t) : shape(t.shape()), dtype(t.dtype()), device(t.device()) {}
};

/// The inputs an op records: `{a, b}` (references, no copies) or a
/// std::vector<Tensor> (cat, user ops taking a list). needs_grad, record and
/// connect take this one range type; two words, so it travels in registers.
class TensorRefs {
 public:
  TensorRefs(std::initializer_list<std::reference_wrapper<const Tensor>> refs)  // NOLINT: {a, b}
      : p_(std::data(refs)), n_(static_cast<uint32_t>(refs.size())), list_(true) {}
  TensorRefs(const std::vector<Tensor>& tensors)  // NOLINT
      : p_(tensors.data()), n_(static_cast<uint32_t>(tensors.size())), list_(false) {}
  size_t size() const { return n_; }
  const Tensor& operator[](size_t i) const {
    return list_ ? static_cast<const std::reference_wrapper<const Tensor>*>(p_)[i].get()
                 : static_cast<const Tensor*>(p_)[i];
  }
  /// For range-for.
  struct iterator {
    const TensorRefs* r;
    size_t i;
    const Tensor& operator*() const { return (*r)[i]; }
    iterator& operator++() { return ++i, *this; }
    bool operator!=(const iterator& o) const { return i != o.i; }
  };
  ///@{
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, n_}; }
  ///@}

 private:
  // A view for the length of the call that takes it, as the list's array is.
  const void* p_;
  uint32_t n_;
  bool list_;  // p_ points at reference_wrappers (a braced list), else at Tensors
};

/// The outputs an op records: one tensor, `{out1, out2}`, or a
/// std::vector<Tensor> (split, chunk); two words, like TensorRefs.
class OutputRefs {
 public:
  OutputRefs(Tensor& t) : p_(&t), n_(1), list_(false) {}                  // NOLINT: one output
  OutputRefs(std::initializer_list<std::reference_wrapper<Tensor>> refs)  // NOLINT: {out1, out2}
      : p_(std::data(refs)), n_(static_cast<uint32_t>(refs.size())), list_(true) {}
  OutputRefs(std::vector<Tensor>& tensors)  // NOLINT
      : p_(tensors.data()), n_(static_cast<uint32_t>(tensors.size())), list_(false) {}
  size_t size() const { return n_; }
  Tensor& operator[](size_t i) const {
    return list_ ? static_cast<const std::reference_wrapper<Tensor>*>(p_)[i].get()
                 : static_cast<Tensor*>(const_cast<void*>(p_))[i];
  }

 private:
  const void* p_;  // the Tensors are not const; void* only to hold either kind
  uint32_t n_;
  bool list_;  // p_ points at reference_wrappers (a braced list), else at Tensors
};

/// What a backward closure sees: the gradients of the op's outputs, and slots
/// for the gradients of its inputs.
class BackwardContext {
 public:
  /// The engine creates one per node it runs.
  BackwardContext(Node& node, std::vector<Tensor>& grad_outputs, std::vector<Tensor>& grad_inputs)
      : node_(node), grad_outputs_(grad_outputs), grad_inputs_(grad_inputs) {}
  /// Gradient w.r.t. output i (zeros when that output received none).
  const Tensor& grad_output(int i = 0);
  /// Whether input i needs a gradient; do not compute it otherwise.
  bool needs_grad(int i) const;
  /// Sets the gradient of input i. It may have the input's shape or any shape
  /// that broadcasts to it from the forward (the engine sums it back).
  ///@{
  void set_grad(int i, Tensor grad);
  int num_inputs() const;
  const TensorMeta& input_meta(int i) const;
  ///@}
  /// The gradient already summed for input i from its other uses, handed
  /// over so that this backward adds its own part into it in place and
  /// passes the sum on with set_grad(i, ...), instead of allocating a fresh
  /// gradient that the engine then adds to it. Undefined unless such a sum
  /// is waiting that nothing else can see, contiguous, with the input's
  /// shape, dtype and device (GPT-2's tied embedding: the lookup's sparse
  /// rows go straight into the output projection's 154 MB gradient).
  Tensor take_accumulated_grad(int i);

 private:
  Node& node_;
  std::vector<Tensor>& grad_outputs_;
  std::vector<Tensor>& grad_inputs_;
};

/// A node of the graph: one recorded op, with an edge per input and the metadata of its outputs.
/// Subclass it (apply) or, usually, use record().
class Node {
 public:
  /// A node named for errors (the op's name).
  Node(const char* name) : name_(name) {}  // NOLINT
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op's name.
  const char* name() const { return name_; }
  /// Computes input gradients from output gradients.
  virtual void apply(BackwardContext& ctx) = 0;
  /// Frees what backward needed (saved tensors); called after backward unless
  /// the graph is retained.
  ///@{
  virtual void release() { released_ = true; }
  bool released() const { return released_; }
  ///@}

  /// Inputs (edges) and outputs of the op.
  ///@{
  int num_inputs() const { return static_cast<int>(next_edges_.size()); }
  int num_outputs() const { return static_cast<int>(output_meta_.size()); }
  ///@}
  /// Where each input's gradient goes.
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  /// Shape, dtype and device of input i / output i.
  ///@{
  const TensorMeta& input_meta(int i) const { return input_meta_[i]; }
  const TensorMeta& output_meta(int i) const { return output_meta_[i]; }
  ///@}
  /// Adds an output (connect() calls it).
  void add_output_meta(const TensorMeta& m) { output_meta_.push_back(m); }

 private:
  friend class Engine;
  friend class BackwardContext;
  friend void connect(const std::shared_ptr<Node>& node, TensorRefs inputs, OutputRefs outputs);
  friend void retain_output_grad(Node&, uint32_t, const std::shared_ptr<TensorImpl>&);

  const char* name_;
  std::vector<Edge> next_edges_;  ///< per forward input; null node: no grad needed
  std::vector<TensorMeta> input_meta_;
  std::vector<TensorMeta> output_meta_;
  /// Non-leaf outputs whose grad() the user asked to keep (retain_grad).
  ///@{
  std::vector<std::weak_ptr<TensorImpl>> retained_;
  bool released_ = false;
  ///@}
  /// Engine scratch, valid during one backward pass.
  ///@{
  int dependencies_ = 0;
  bool seen_ = false;
  std::vector<Tensor> buffer_;
  ///@}
};

/// A node whose backward is a closure (all built-in ops use this).
template <class F>
class FunctionNode final : public Node {
 public:
  /// A node named name whose backward is fn.
  FunctionNode(const char* name, F fn) : Node(name), fn_(std::move(fn)) {}
  void apply(BackwardContext& ctx) override { (*fn_)(ctx); }
  void release() override {
    fn_.reset();
    Node::release();
  }

 private:
  std::optional<F> fn_;
};

/// True when grad mode is on and any input requires a gradient: the op must
/// record itself. Check this before building the closure, so ops on plain
/// tensors pay nothing for autograd.
bool needs_grad(TensorRefs inputs);

/// Wires node into the graph: one edge per input (to its grad_fn, or to its
/// gradient accumulator for a leaf that requires grad), and makes node the
/// grad_fn of each output.
void connect(const std::shared_ptr<Node>& node, TensorRefs inputs, OutputRefs outputs);

/// Makes backward store the gradient of output output_nr of node in t's grad().
void retain_output_grad(Node& node, uint32_t output_nr, const std::shared_ptr<TensorImpl>& t);

/// Records an op with its inputs and outputs whose backward is fn.
template <class F>
void record(const char* name, TensorRefs inputs, OutputRefs outputs, F&& fn) {
  connect(std::make_shared<FunctionNode<std::decay_t<F>>>(name, std::forward<F>(fn)), inputs, outputs);
}

/// Records an op that has no backward yet. Its outputs are part of the graph
/// as any differentiable op's are (so a forward with inputs that require grad,
/// e.g. evaluation without NoGradGuard, works and costs nothing more), but a
/// backward that sends a gradient into it throws AutogradError naming the op,
/// instead of leaving the inputs' gradients silently missing. Use it for a
/// user op whose derivative is not written yet; an op that records nothing at
/// all cuts the graph like detach() (see docs/CUSTOM_OPS.md).
void record_no_backward(const char* name, TensorRefs inputs, OutputRefs outputs);

/// A function run on a leaf each time a backward pass has accumulated a
/// gradient into its grad() (PyTorch's register_post_accumulate_grad_hook):
/// the leaf's gradient from this pass is then complete, while the rest of the
/// pass may still be running. DistributedDataParallel starts reducing a
/// bucket of gradients from here, so communication overlaps the remaining
/// backward. Hooks run in registration order, with grad mode off, on the
/// thread that runs backward; an exception from a hook ends the backward pass.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;
/// Adds a hook to a leaf that requires grad; returns an id for
/// remove_post_accumulate_grad_hook.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);
/// Removes the hook with that id; false if the leaf has no such hook.
bool remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t id);

/// Runs backward from roots, seeded with grads (undefined grads mean ones for
/// one-element roots). Gradients accumulate into the grad() of leaves.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

/// Gradient accumulation: a + b out of place, and acc += g in place (same
/// shape). Implemented with the elementwise ops (ops/elementwise.cpp).
///@{
Tensor accumulate(const Tensor& a, const Tensor& b);
void accumulate_(Tensor& acc, const Tensor& g);
///@}

/// Sums grad over the dims that broadcasting expanded so it has shape `shape`.
/// Implemented with the reduction ops (ops/reduce.cpp).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace ember::autograd

namespace ember {
using autograd::NoGradGuard;
}
