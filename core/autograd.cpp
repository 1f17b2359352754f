// The autograd engine: graph wiring, saved-tensor checks and the backward pass.
#include <ember/core/autograd.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include <ember/core/anomaly.h>

namespace ember::autograd {

namespace {
thread_local bool g_grad_enabled = true;

AutogradMeta& meta_of(const Tensor& t) {
  auto& m = t.unsafe_impl()->autograd;
  if (!m) m = std::make_unique<AutogradMeta>();
  return *m;
}

// Leaves that require grad get their gradient through this node, shared by
// every use of the leaf in the graph (cached weakly in the leaf's meta).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}
  void apply(BackwardContext& ctx) override {
    Tensor g = ctx.grad_output(0);
    Tensor leaf(leaf_);
    Tensor& acc = leaf.mutable_grad();
    if (!acc.defined()) {
      // Take the incoming buffer when nothing else can see it; otherwise copy,
      // so that later in-place accumulation never writes into another tensor.
      const bool exclusive = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 && g.is_contiguous() &&
                             g.shape() == leaf.shape();
      acc = exclusive ? g.detach() : g.contiguous().clone().detach();
      if (acc.shape() != leaf.shape()) acc = acc.reshape(leaf.shape());
    } else {
      accumulate_(acc, g);
    }
    if (const auto& m = leaf_->autograd; m && !m->post_accumulate_grad_hooks.empty()) {
      const auto hooks = m->post_accumulate_grad_hooks;  // a hook may remove itself
      for (const auto& [id, hook] : hooks) hook(leaf);
    }
  }
  void release() override {}  // holds no saved tensors; it may run again

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The node of an op recorded with record_no_backward: in the graph like any
// other, and an error naming the op once a gradient reaches it.
class NoBackwardNode final : public Node {
 public:
  using Node::Node;
  void apply(BackwardContext&) override {
    throw AutogradError(detail::cat_str(
        "backward of '", name(), "': this op has no backward (it was recorded with autograd::record_no_backward), ",
        "but the loss depends on its output, so its inputs' gradients cannot be computed. Write its backward ",
        "with autograd::record (docs/CUSTOM_OPS.md), or keep it out of training: call it under NoGradGuard or on ",
        "detach()ed inputs"));
  }
};

}  // namespace

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool enabled) { g_grad_enabled = enabled; }

// ---- SavedTensor ------------------------------------------------------------
SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.version();
}

namespace {
struct SavedTensorModified : AutogradError {
  using AutogradError::AutogradError;
};
}  // namespace

const Tensor& SavedTensor::get() const {
  if (data_.defined() && data_.version() != version_)
    throw SavedTensorModified(
        detail::cat_str("a tensor of shape ", data_.shape().str(), " saved for backward was modified by an in-place ",
                        "operation: it is at version ", data_.version(), ", expected version ", version_,
                        ". Use the out-of-place op or clone() the tensor before modifying it"));
  return data_;
}

// ---- BackwardContext --------------------------------------------------------
const Tensor& BackwardContext::grad_output(int i) {
  Tensor& g = grad_outputs_[i];
  if (!g.defined()) {
    const TensorMeta& m = node_.output_meta(i);
    g = empty(m.shape, TensorOptions(m.dtype, m.device));
    g.zero_();
  }
  return g;
}

bool BackwardContext::needs_grad(int i) const { return node_.next_edges()[i].node != nullptr; }

void BackwardContext::set_grad(int i, Tensor grad) { grad_inputs_[i] = std::move(grad); }

int BackwardContext::num_inputs() const { return node_.num_inputs(); }

const TensorMeta& BackwardContext::input_meta(int i) const { return node_.input_meta(i); }

namespace {
// A gradient waiting in a node's buffer that may be summed into in place:
// nothing but the buffer holds it (not a view, not saved for a double
// backward, not shared by two edges), and it is dense.
bool exclusive_gradient(const Tensor& b) {
  return !grad_enabled() && b.impl_ptr().use_count() == 1 && b.storage().use_count() == 1 && b.is_contiguous() &&
         !b.requires_grad();
}
}  // namespace

Tensor BackwardContext::take_accumulated_grad(int i) {
  const Edge& e = node_.next_edges()[static_cast<size_t>(i)];
  if (!e.node || e.node->buffer_.size() <= e.input_nr) return Tensor();
  Tensor& b = e.node->buffer_[e.input_nr];
  const TensorMeta& m = node_.input_meta(i);
  if (!b.defined() || !exclusive_gradient(b) || b.shape() != m.shape || b.dtype() != m.dtype || b.device() != m.device)
    return Tensor();
  return std::move(b);  // the slot is left empty: set_grad's sum refills it
}

// ---- graph wiring -----------------------------------------------------------
bool needs_grad(TensorRefs inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

// Where the gradient of t goes: the node that made it, or the gradient
// accumulator of a leaf that requires grad; nowhere for anything else.
static Edge edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  AutogradMeta& m = meta_of(t);
  if (m.grad_fn) return Edge{m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->add_output_meta(TensorMeta(t));
    m.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

void connect(const std::shared_ptr<Node>& node, TensorRefs inputs, OutputRefs outputs) {
  node->next_edges_.reserve(inputs.size());
  node->input_meta_.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next_edges_.push_back(edge_for(t));
    node->input_meta_.push_back(t.defined() ? TensorMeta(t) : TensorMeta());
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& out = outputs[k];
    node->add_output_meta(TensorMeta(out));
    EMBER_CHECK(out.is_floating_point(), DTypeError, node->name(), ": a differentiable op produced a ",
                dtype_name(out.dtype()), " output; only floating outputs can carry gradients");
    AutogradMeta& m = meta_of(out);
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(k);
    m.requires_grad = false;
  }
}

void record_no_backward(const char* name, TensorRefs inputs, OutputRefs outputs) {
  connect(std::make_shared<NoBackwardNode>(name), inputs, outputs);
}

void retain_output_grad(Node& node, uint32_t output_nr, const std::shared_ptr<TensorImpl>& t) {
  if (node.retained_.size() <= output_nr) node.retained_.resize(output_nr + 1);
  node.retained_[output_nr] = t;
}

// ---- hooks ------------------------------------------------------------------
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  EMBER_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(), AutogradError,
              "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad",
              leaf.defined()
                  ? detail::cat_str(" (shape ", leaf.shape().str(), leaf.is_leaf() ? ", a leaf" : ", not a leaf",
                                    leaf.requires_grad() ? ")" : ", requires_grad false)")
                  : std::string(" (undefined tensor)"));
  EMBER_CHECK(hook != nullptr, ValueError, "register_post_accumulate_grad_hook: empty hook");
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id++;
  meta_of(leaf).post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

bool remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t id) {
  if (!leaf.defined() || !leaf.unsafe_impl()->autograd) return false;
  auto& hooks = leaf.unsafe_impl()->autograd->post_accumulate_grad_hooks;
  const auto it = std::find_if(hooks.begin(), hooks.end(), [&](const auto& h) { return h.first == id; });
  if (it == hooks.end()) return false;
  hooks.erase(it);
  return true;
}

// ---- the backward pass ------------------------------------------------------
namespace {
// Anomaly mode: a node whose output gradients were finite must not produce a
// non-finite input gradient (composite backwards made of several kernels, or
// kernels that are not in a table, are caught here).
void check_gradients(const Node& n, const std::vector<Tensor>& grad_outputs, const std::vector<Tensor>& grad_inputs) {
  for (const Tensor& g : grad_outputs)
    if (!all_finite(g)) return;  // an earlier node's (or the seed's) value, not this node's
  for (size_t i = 0; i < grad_inputs.size(); ++i)
    EMBER_CHECK(all_finite(grad_inputs[i]), AnomalyError, "anomaly mode: backward of '", n.name(),
                "' produced a non-finite gradient (NaN or infinity) for its input ", i, " (shape ",
                grad_inputs[i].shape().str(), ") from finite output gradients");
}
}  // namespace

// The backward pass, micrograd's loop with Kahn's algorithm for the order:
// seed the roots, count the edges into every node reachable from them, then
// run each node once all its edges have delivered, passing its input
// gradients on. The per-node counters and gradient buffers live in the nodes
// (scratch, reset when the pass ends, also by an exception).
class Engine {
 public:
  static void run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

 private:
  Engine() = default;
  ~Engine();
  void seed(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);
  void count_dependencies();
  Node* next_ready();
  std::vector<Tensor> take_grad_outputs(Node& n);
  void call_backward(Node& n, std::vector<Tensor>& grad_outputs);
  void send_grad_inputs(Node& n);
  static void add_into(Node& n, uint32_t slot, Tensor g);

  std::vector<std::pair<Edge, Tensor>> seeds_;     // (root's edge, its gradient)
  std::vector<Node*> reached_;                     // every node reached, to reset its scratch
  std::vector<Node*> ready_;                       // nodes whose every incoming edge has delivered
  std::vector<std::shared_ptr<Node>> keep_alive_;  // a node may lose its last owner mid-pass
  std::vector<Tensor> grad_inputs_;                // the running node's input gradients
};

void Engine::run(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  Engine engine;
  engine.seed(roots, grads);
  engine.count_dependencies();
  NoGradGuard no_grad;  // backward formulas are not differentiated again
  while (Node* n = engine.next_ready()) {
    std::vector<Tensor> grad_outputs = engine.take_grad_outputs(*n);
    engine.call_backward(*n, grad_outputs);
    if (!retain_graph) n->release();
    engine.send_grad_inputs(*n);
  }
}

Engine::~Engine() {
  for (Node* n : reached_) {
    n->dependencies_ = 0;
    n->seen_ = false;
    n->buffer_.clear();
  }
}

// Each root's gradient: the one given, or 1 for a one-element root.
void Engine::seed(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  EMBER_CHECK(roots.size() == grads.size(), AutogradError, "backward: got ", roots.size(), " tensors but ",
              grads.size(), " gradients");
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    EMBER_CHECK(r.requires_grad(), AutogradError,
                "backward: the tensor does not require grad and has no grad_fn (shape ", r.shape().str(),
                "); did you forget requires_grad_() on an input, run the forward under NoGradGuard, or call an ",
                "op of your own that records no backward (autograd::record)?");
    Tensor g = grads[i];
    if (!g.defined()) {
      EMBER_CHECK(r.numel() == 1, AutogradError, "backward: grad can be implicitly created only for ",
                  "one-element outputs, but this tensor has shape ", r.shape().str(),
                  "; pass a gradient of that shape to backward()");
      g = empty(r.shape(), TensorOptions(r.dtype(), r.device()));
      g.fill_(1.0);
    } else {
      EMBER_CHECK(g.shape() == r.shape(), ShapeError, "backward: gradient of shape ", g.shape().str(),
                  " does not match the tensor's shape ", r.shape().str());
    }
    seeds_.emplace_back(edge_for(r), g);
  }
}

// Counts, for every node reachable from the roots, how many edges enter it;
// the roots' nodes with none are ready first.
void Engine::count_dependencies() {
  std::vector<Node*> stack;
  auto discover = [&](Node* n) {
    if (!n->seen_) {
      n->seen_ = true;
      reached_.push_back(n);
      stack.push_back(n);
    }
  };
  for (auto& [edge, g] : seeds_) discover(edge.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges_) {
      if (!e.node) continue;
      ++e.node->dependencies_;
      discover(e.node.get());
    }
  }
  for (auto& [edge, g] : seeds_) add_into(*edge.node, edge.input_nr, g);
  for (auto& [edge, g] : seeds_) {
    if (edge.node->dependencies_ == 0 && std::find(ready_.begin(), ready_.end(), edge.node.get()) == ready_.end())
      ready_.push_back(edge.node.get());
    keep_alive_.push_back(edge.node);
  }
}

Node* Engine::next_ready() {
  if (ready_.empty()) return nullptr;
  Node* n = ready_.back();
  ready_.pop_back();
  return n;
}

// The gradients sent to n's outputs (undefined where none arrived), also
// stored in the grad() of outputs that asked for it (retain_grad).
std::vector<Tensor> Engine::take_grad_outputs(Node& n) {
  std::vector<Tensor> grad_outputs = std::move(n.buffer_);
  n.buffer_.clear();
  grad_outputs.resize(static_cast<size_t>(n.num_outputs()));
  for (size_t k = 0; k < n.retained_.size(); ++k) {
    if (auto impl = n.retained_[k].lock(); impl && grad_outputs[k].defined()) {
      Tensor t(impl);
      Tensor& slot = t.mutable_grad();
      slot = slot.defined() ? accumulate(slot, grad_outputs[k]) : grad_outputs[k].clone();
    }
  }
  return grad_outputs;
}

// Runs n's backward into grad_inputs_ when any gradient reached it, naming
// the node in the errors a backward can raise.
void Engine::call_backward(Node& n, std::vector<Tensor>& grad_outputs) {
  grad_inputs_.assign(static_cast<size_t>(n.num_inputs()), Tensor());
  if (std::none_of(grad_outputs.begin(), grad_outputs.end(), [](const Tensor& g) { return g.defined(); })) return;
  EMBER_CHECK(!n.released(), AutogradError, "backward: trying to backward through the graph a ", "second time (at '",
              n.name(), "'): its saved tensors were freed by the first backward. ",
              "Pass retain_graph=true to the first backward() if you need to backward twice");
  BackwardContext ctx(n, grad_outputs, grad_inputs_);
  try {
    n.apply(ctx);
  } catch (const SavedTensorModified& e) {
    throw AutogradError(std::string("backward of '") + n.name() + "': " + e.what());
  } catch (const AnomalyError& e) {  // a kernel inside this backward produced it
    throw AnomalyError(std::string("backward of '") + n.name() + "': " + e.what());
  }
  // A backward that leaves out the gradient of an input that needs one
  // would make that input's gradient silently missing (a user op's
  // closure forgetting a set_grad): name the op instead.
  for (int i = 0; i < n.num_inputs(); ++i)
    EMBER_CHECK(!n.next_edges_[static_cast<size_t>(i)].node || grad_inputs_[static_cast<size_t>(i)].defined(),
                AutogradError, "backward of '", n.name(), "' set no gradient for its input ", i, " (shape ",
                n.input_meta(i).shape.str(), "), which requires grad: call ctx.set_grad(", i,
                ", ...) whenever ctx.needs_grad(", i, ") is true");
  if (__builtin_expect(detect_anomaly(), 0)) check_gradients(n, grad_outputs, grad_inputs_);
}

// Passes each input gradient along its edge, summed back over broadcast dims
// and cast to the input's dtype; a node whose last edge delivered is ready.
void Engine::send_grad_inputs(Node& n) {
  for (int i = 0; i < n.num_inputs(); ++i) {
    const Edge& e = n.next_edges_[static_cast<size_t>(i)];
    if (!e.node) continue;
    Tensor& g = grad_inputs_[static_cast<size_t>(i)];
    if (g.defined()) {
      const TensorMeta& m = n.input_meta(i);
      if (g.shape() != m.shape) {
        EMBER_CHECK(broadcast_shapes(m.shape, g.shape(), n.name()) == g.shape(), ShapeError, "backward of '", n.name(),
                    "': gradient for input ", i, " has shape ", g.shape().str(),
                    ", which does not reduce to the input's shape ", m.shape.str());
        g = sum_to(g, m.shape);
      }
      // A float32 input mixed into a float64 op gets a float32 gradient.
      if (g.dtype() != m.dtype) g = g.to(m.dtype);
      add_into(*e.node, e.input_nr, std::move(g));
    }
    if (--e.node->dependencies_ == 0) {
      keep_alive_.push_back(e.node);
      ready_.push_back(e.node.get());
    }
  }
}

// Gradients reaching one output of n along several paths are summed: in
// place into the first one when nothing else can see it (a fresh gradient,
// not saved for a double backward) and the sum has its shape and dtype,
// which saves allocating and writing a third buffer (GPT-2's tied 50257 x
// 768 embedding: 154 MB a step); otherwise into a new tensor.
void Engine::add_into(Node& n, uint32_t slot, Tensor g) {
  if (n.buffer_.empty()) n.buffer_.resize(static_cast<size_t>(n.num_outputs()));
  Tensor& b = n.buffer_[slot];
  if (!b.defined()) {
    b = std::move(g);
    return;
  }
  if (exclusive_gradient(b) && b.shape() == g.shape() && b.dtype() == g.dtype() && b.device() == g.device())
    accumulate_(b, g);
  else
    b = accumulate(b, g);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  Engine::run(roots, grads, retain_graph);
}

}  // namespace ember::autograd
