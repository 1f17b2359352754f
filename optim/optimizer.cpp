// Optimizer updates. SGD is written with Ember's in-place ops, except for
// 16-bit parameters, which take one fused kernel (each op would round to
// 16 bits); Adam/AdamW use one fused kernel per parameter (moments and
// parameter updated in one pass over memory): the kernel tables of
// ops/optimizer_kernels.h, with the formulas, where the CPU and CUDA
// backends register their kernels.
#include <ember/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/core/anomaly.h>
#include <ember/core/autograd.h>
#include <ember/core/cuda_graph.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/parallel.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/optimizer_kernels.h>
#include <ember/ops/reduce.h>

namespace ember::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name)
    : groups_(std::move(groups)) {
  // A NaN lr is an optimizer with no default rate (SGD, as torch's
  // `required`): allowed only when every group brings its own.
  const bool lr_required = std::isnan(lr);
  EMBER_CHECK(lr_required || lr >= 0, ValueError, name, ": invalid learning rate ", lr);
  EMBER_CHECK(weight_decay >= 0, ValueError, name, ": invalid weight_decay ", weight_decay);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    EMBER_CHECK(!lr_required || g.lr >= 0, ValueError, name, ": no learning rate for parameter group ", gi,
                " (lr has no default here, as in PyTorch 1.13: give it in the options or in the group)");
    if (g.lr < 0) g.lr = lr;
    if (g.weight_decay < 0) g.weight_decay = weight_decay;
    if (g.initial_lr < 0) g.initial_lr = g.lr;
    for (const Tensor& p : g.params)
      EMBER_CHECK(p.defined() && p.is_floating_point(), ValueError, name,
                  ": can only optimize defined floating-point tensors");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) p.zero_grad(set_to_none);
}

namespace {
Tensor scalar(double v) { return scalar_tensor(v, kFloat64); }
std::string key(size_t g, size_t i, const char* what) {
  return "state." + std::to_string(g) + "." + std::to_string(i) + "." + what;
}
const Tensor* find(const StateDict& s, const std::string& k) {
  for (const auto& [name, t] : s)
    if (name == k) return &t;
  return nullptr;
}
const Tensor& need(const StateDict& s, const std::string& k) {
  const Tensor* t = find(s, k);
  EMBER_CHECK(t != nullptr, ValueError, "optimizer load_state_dict: missing entry '", k, "'");
  return *t;
}
// A hyperparameter read back from a state dict: one number, finite and not
// negative, the range PyTorch's constructors accept for lr and weight_decay.
// A checkpoint is checked like a flag: a weight decay of -1e6 would turn
// the decay into growth and a NaN rate would make every weight NaN.
double need_rate(const StateDict& s, const std::string& k) {
  const Tensor& t = need(s, k);
  EMBER_CHECK(t.numel() == 1, ValueError, "optimizer load_state_dict: '", k, "' must hold one number, it has shape ",
              t.shape().str());
  const double v = t.item<double>();
  EMBER_CHECK(std::isfinite(v) && v >= 0, ValueError, "optimizer load_state_dict: '", k, "' = ", v,
              " (expected a finite number >= 0)");
  return v;
}
// A state buffer copied from the dict, checked against its parameter: same
// shape, every value finite (a NaN moment makes every later update NaN), and
// for a second moment (a running mean of squares) no value below zero, where
// sqrt(v) + eps in Adam's denominator would be NaN.
Tensor load_buffer(const StateDict& s, const std::string& k, const Tensor& param, bool second_moment = false) {
  const Tensor* t = find(s, k);
  if (!t) return Tensor();
  EMBER_CHECK(t->shape() == param.shape(), ShapeError, "optimizer load_state_dict: '", k, "' has shape ",
              t->shape().str(), " but its parameter has ", param.shape().str());
  EMBER_CHECK(all_finite(*t), ValueError, "optimizer load_state_dict: '", k, "' holds NaN or Inf");
  if (second_moment && t->is_floating_point() && t->numel() > 0) {
    const double lowest = min(t->detach()).item<double>();
    EMBER_CHECK(lowest >= 0, ValueError, "optimizer load_state_dict: '", k, "' holds a negative value (", lowest,
                "): a second moment is a mean of squares, never below 0");
  }
  return t->to(param.dtype()).to(param.device()).clone();
}
// Adam's step count: a whole number from 0 to 2^53 (the integers a float64,
// the dtype it is stored in, holds exactly). A fractional, negative or huge
// count would be cast to int64 (undefined beyond its range) and would change
// the bias corrections 1 - beta^step.
int64_t need_step(const StateDict& s, const std::string& k) {
  const Tensor& t = need(s, k);
  EMBER_CHECK(t.numel() == 1, ValueError, "optimizer load_state_dict: '", k, "' must hold one number, it has shape ",
              t.shape().str());
  const double v = t.item<double>();
  EMBER_CHECK(std::isfinite(v) && v >= 0 && v <= 9007199254740992.0 && v == std::floor(v), ValueError,
              "optimizer load_state_dict: '", k, "' = ", v, " (expected a whole number from 0 to 2^53)");
  return static_cast<int64_t>(v);
}
}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict d;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    d.emplace_back(pre + "lr", scalar(groups_[g].lr));
    d.emplace_back(pre + "weight_decay", scalar(groups_[g].weight_decay));
    d.emplace_back(pre + "initial_lr", scalar(groups_[g].initial_lr));
  }
  return d;
}

void Optimizer::load_state_dict(const StateDict& s) {
  // Every value checked before any is set: a refused dict leaves the
  // optimizer as it was.
  std::vector<double> v;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string pre = "param_groups." + std::to_string(g) + ".";
    for (const char* k : {"lr", "weight_decay", "initial_lr"}) v.push_back(need_rate(s, pre + k));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = v[3 * g];
    groups_[g].weight_decay = v[3 * g + 1];
    groups_[g].initial_lr = v[3 * g + 2];
  }
}

std::vector<ParamGroup> weight_decay_groups(const StateDict& named, double weight_decay,
                                            const std::vector<std::string>& no_decay) {
  ParamGroup decay, plain;
  decay.weight_decay = weight_decay;
  plain.weight_decay = 0.0;
  for (const auto& [name, p] : named) {
    bool skip = p.dim() < 2;
    for (const std::string& n : no_decay) skip = skip || name == n || name.find("." + n) != std::string::npos;
    (skip ? plain : decay).params.push_back(p);
  }
  return {decay, plain};
}

// ---- SGD --------------------------------------------------------------------
SGD::SGD(std::vector<Tensor> params, SGDOptions opts) : SGD(std::vector<ParamGroup>{{std::move(params)}}, opts) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions opts)
    : Optimizer(std::move(groups), opts.lr, opts.weight_decay, "SGD"), opts_(opts) {
  EMBER_CHECK(opts.momentum >= 0, ValueError, "SGD: invalid momentum ", opts.momentum);
  EMBER_CHECK(!opts.nesterov || (opts.momentum > 0 && opts.dampening == 0), ValueError,
              "SGD: nesterov momentum requires a momentum and zero dampening");
  for (const ParamGroup& g : groups_) momentum_.emplace_back(g.params.size());
}

namespace {

// The device of the first parameter with a gradient (none: the CPU).
Device grad_device(const std::vector<ParamGroup>& groups) {
  for (const ParamGroup& g : groups)
    for (const Tensor& p : g.params)
      if (p.grad().defined()) return p.device();
  return Device();
}

// Stochastic rounding's random stream, after checking every parameter it
// will round, before any changes: bfloat16 ones take it (contiguous, as the
// fused kernels need), float32 and float64 need none, float16 is refused.
Generator* rounding_stream(bool on, Generator* gen, const std::vector<ParamGroup>& groups, const char* name) {
  if (!on) return nullptr;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (size_t i = 0; i < groups[gi].params.size(); ++i) {
      const Tensor& p = groups[gi].params[i];
      if (!p.grad().defined()) continue;
      EMBER_CHECK(p.dtype() != DType::Float16, DTypeError, name,
                  ": stochastic_rounding rounds bfloat16 parameters, and parameter ", i, " of group ", gi,
                  " is float16 (use bfloat16, or leave the option off)");
      EMBER_CHECK(p.dtype() != DType::BFloat16 || p.is_contiguous(), ValueError, name,
                  ": stochastic_rounding needs contiguous parameters; parameter ", i, " of group ", gi, " is not");
    }
  return gen ? gen : &default_generator();
}

// A parameter's first Philox counter this step: one counter per 4 elements
// of a bfloat16 parameter (each element takes one word), none otherwise.
uint64_t rounding_offset(Generator* rng, const Tensor& p) {
  if (!rng || p.dtype() != DType::BFloat16) return 0;
  return rng->reserve((static_cast<uint64_t>(p.numel()) + 3) / 4);
}

// The gradient as the fused kernels read it: contiguous, in the parameter's
// dtype (a gradient assigned in another dtype is converted, as torch's
// optimizers compute in the parameter's).
Tensor grad_as_param(const Tensor& p) {
  const Tensor& g = p.grad();
  return (g.dtype() == p.dtype() ? g : g.to(p.dtype())).contiguous();
}

// A state buffer in its parameter's dtype and device: a model converted
// (Module::to) after its optimizer stepped keeps stepping, its state
// converted as load_state_dict converts it.
void follow_param(Tensor& buf, const Tensor& p) {
  if (buf.defined() && (buf.dtype() != p.dtype() || buf.device() != p.device()))
    buf = buf.to(p.dtype()).to(p.device()).contiguous();
}

// lr / bias_correction1, sqrt(bias_correction2), 1 - lr * weight_decay: what
// the kernels derive from an AdamStep (cuda/optimizer.cu), computed alike.
void derived_scalars(const AdamStep& s, double* out) {
  out[0] = s.lr / s.bias_correction1;
  out[1] = std::sqrt(s.bias_correction2);
  out[2] = 1.0 - s.lr * s.weight_decay;
}

}  // namespace

void SGD::step() {
  NoGradGuard no_grad;
  EMBER_CHECK(!is_capturing(grad_device(groups_)), DeviceError,
              "SGD::step inside a CUDA graph capture: not supported yet (its learning rate would be frozen into the "
              "graph); step it eagerly after replaying forward and backward, or use Adam/AdamW");
  Generator* rng = rounding_stream(opts_.stochastic_rounding, opts_.generator, groups_, "SGD");
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i) {
      Tensor& p = g.params[i];
      if (!p.grad().defined()) continue;
      if (is_half(p.dtype()) && p.is_contiguous() && sgd_kernel.has(p.device().type)) {
        // One fused step: float32 math, p and the buffer rounded once.
        Tensor& buf = momentum_[gi][i];
        follow_param(buf, p);
        const bool first = opts_.momentum != 0 && !buf.defined();
        if (first) buf = empty_like(p);
        const Tensor grad = grad_as_param(p);
        SGDStep s{g.lr, opts_.momentum, opts_.dampening, g.weight_decay, opts_.nesterov, first};
        s.stochastic_rounding = rng != nullptr;
        s.seed = rng ? rng->seed() : 0;
        s.offset = rounding_offset(rng, p);
        sgd_kernel(p.device(), p, grad, buf, s);
        p.bump_version();
        continue;
      }
      Tensor d = p.grad();
      if (g.weight_decay != 0) d = add(d, mul(p, g.weight_decay));
      if (opts_.momentum != 0) {
        Tensor& buf = momentum_[gi][i];
        if (!buf.defined()) {
          buf = d.clone();
        } else {
          mul_(buf, opts_.momentum);
          add_(buf, d, 1.0 - opts_.dampening);
        }
        d = opts_.nesterov ? add(d, mul(buf, opts_.momentum)) : buf;
      }
      add_(p, d, -g.lr);
    }
  }
}

StateDict SGD::state_dict() const {
  StateDict d = Optimizer::state_dict();
  for (size_t g = 0; g < momentum_.size(); ++g)
    for (size_t i = 0; i < momentum_[g].size(); ++i)
      if (momentum_[g][i].defined()) d.emplace_back(key(g, i, "momentum_buffer"), momentum_[g][i]);
  return d;
}

void SGD::load_state_dict(const StateDict& s) {
  // The buffers are read and checked first, so a refused dict changes nothing.
  std::vector<std::vector<Tensor>> momentum(momentum_.size());
  for (size_t g = 0; g < momentum_.size(); ++g)
    for (size_t i = 0; i < momentum_[g].size(); ++i)
      momentum[g].push_back(load_buffer(s, key(g, i, "momentum_buffer"), groups_[g].params[i]));
  Optimizer::load_state_dict(s);
  momentum_ = std::move(momentum);
}

// ---- Adam / AdamW -----------------------------------------------------------
Adam::Adam(std::vector<Tensor> params, AdamOptions opts) : Adam(std::vector<ParamGroup>{{std::move(params)}}, opts) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opts) : Adam(std::move(groups), opts, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions opts, bool decoupled, const char* name)
    : Optimizer(std::move(groups), opts.lr, opts.weight_decay, name), opts_(opts), decoupled_(decoupled) {
  EMBER_CHECK(opts.beta1 >= 0 && opts.beta1 < 1 && opts.beta2 >= 0 && opts.beta2 < 1, ValueError, name,
              ": betas must be in [0, 1), got (", opts.beta1, ", ", opts.beta2, ")");
  EMBER_CHECK(opts.eps >= 0, ValueError, name, ": invalid eps ", opts.eps);
  for (const ParamGroup& g : groups_) {
    m_.emplace_back(g.params.size());
    v_.emplace_back(g.params.size());
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  // Inside a CUDA graph (core/cuda_graph.h) the step count and the learning
  // rates change from replay to replay: the captured kernels read them from
  // device memory, which a replay hook fills, and the hook (not the capture,
  // which runs nothing) counts the step.
  const Device dev = grad_device(groups_);
  const char* name = decoupled_ ? "AdamW" : "Adam";
  EMBER_CHECK(!opts_.stochastic_rounding || !is_capturing(dev), DeviceError, name,
              "::step inside a CUDA graph capture with stochastic_rounding: not supported (its random counters would "
              "be frozen into the graph); step it eagerly");
  Generator* rng = rounding_stream(opts_.stochastic_rounding, opts_.generator, groups_, name);
  Tensor graph_scalars;
  if (is_capturing(dev)) {
    graph_scalars = replay_buffer({static_cast<int64_t>(groups_.size()), 3}, TensorOptions(DType::Float64, dev));
    on_replay(dev, [this, graph_scalars]() mutable {
      ++step_;
      const double bc1 = 1.0 - std::pow(opts_.beta1, static_cast<double>(step_));
      const double bc2 = 1.0 - std::pow(opts_.beta2, static_cast<double>(step_));
      std::vector<double> v(groups_.size() * 3);
      for (size_t gi = 0; gi < groups_.size(); ++gi)
        derived_scalars(
            {groups_[gi].lr, opts_.beta1, opts_.beta2, opts_.eps, groups_[gi].weight_decay, bc1, bc2, decoupled_},
            &v[gi * 3]);
      graph_scalars.copy_(from_vector(v).view(graph_scalars.shape()));
    });
  } else {
    ++step_;
  }
  const double bc1 = 1.0 - std::pow(opts_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(opts_.beta2, static_cast<double>(step_));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    AdamStep s{g.lr, opts_.beta1, opts_.beta2, opts_.eps, g.weight_decay, bc1, bc2, decoupled_};
    if (graph_scalars.defined()) s.device_scalars = static_cast<const double*>(graph_scalars.data_ptr()) + gi * 3;
    s.stochastic_rounding = rng != nullptr;
    s.seed = rng ? rng->seed() : 0;
    std::vector<AdamParam> batch;  // the group's parameters, when one launch can take them all
    for (size_t i = 0; i < g.params.size(); ++i) {
      Tensor& p = g.params[i];
      if (!p.grad().defined()) continue;
      EMBER_CHECK(p.is_contiguous(), ValueError, "Adam: parameters must be contiguous");
      Tensor& m = m_[gi][i];
      Tensor& v = v_[gi][i];
      follow_param(m, p);
      follow_param(v, p);
      if (!m.defined()) {
        EMBER_CHECK(!graph_scalars.defined(), DeviceError, "Adam::step inside a CUDA graph capture: parameter ", i,
                    " of group ", gi, " has no moments yet; run the step eagerly once before capturing (warm-up)");
        m = zeros_like(p);
        v = zeros_like(p);
      }
      const Tensor grad = grad_as_param(p);
      const uint64_t offset = rounding_offset(rng, p);
      if (adam_multi_kernel.has(p.device().type) &&
          (batch.empty() || (batch[0].p.device() == p.device() && batch[0].p.dtype() == p.dtype()))) {
        batch.push_back({p, grad, m, v, offset});
      } else {
        AdamStep one = s;
        one.offset = offset;
        adam_kernel(p.device(), p, grad, m, v, one);
      }
      p.bump_version();
    }
    if (!batch.empty()) adam_multi_kernel(batch[0].p.device(), batch, s);
  }
}

StateDict Adam::state_dict() const {
  StateDict d = Optimizer::state_dict();
  d.emplace_back("step", scalar(static_cast<double>(step_)));
  for (size_t g = 0; g < m_.size(); ++g)
    for (size_t i = 0; i < m_[g].size(); ++i)
      if (m_[g][i].defined()) {
        d.emplace_back(key(g, i, "exp_avg"), m_[g][i]);
        d.emplace_back(key(g, i, "exp_avg_sq"), v_[g][i]);
      }
  return d;
}

void Adam::load_state_dict(const StateDict& s) {
  // The step and the moments are read and checked first, then the groups'
  // rates (checked before they are set): a refused dict changes nothing.
  const int64_t step = need_step(s, "step");
  std::vector<std::vector<Tensor>> m(m_.size()), v(v_.size());
  for (size_t g = 0; g < m_.size(); ++g)
    for (size_t i = 0; i < m_[g].size(); ++i) {
      // A parameter that never had a gradient has neither moment; one
      // without the other is a damaged file, and restarting that moment
      // from zero would silently change the run.
      EMBER_CHECK((find(s, key(g, i, "exp_avg")) != nullptr) == (find(s, key(g, i, "exp_avg_sq")) != nullptr),
                  ValueError, "optimizer load_state_dict: '", key(g, i, "exp_avg"), "' and '", key(g, i, "exp_avg_sq"),
                  "' must both be present or both absent");
      m[g].push_back(load_buffer(s, key(g, i, "exp_avg"), groups_[g].params[i]));
      v[g].push_back(load_buffer(s, key(g, i, "exp_avg_sq"), groups_[g].params[i], /*second_moment=*/true));
    }
  Optimizer::load_state_dict(s);
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions opts)
    : AdamW(std::vector<ParamGroup>{{std::move(params)}}, opts) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam(std::move(groups),
           AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.stochastic_rounding, o.generator}, true,
           "AdamW") {}

// ---- gradient clipping ------------------------------------------------------
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined() && p.grad().numel() > 0) grads.push_back(p.grad());
  if (grads.empty()) return scalar(0.0);
  // On a GPU: computed and applied there, nothing read back (so it can be
  // captured in a CUDA graph); every gradient on that device.
  const Device dev = grads[0].device();
  if (clip_grad_norm_kernel.has(dev.type)) {
    std::vector<Tensor> work;  // contiguous: the gradients themselves, or copies written back below
    for (const Tensor& g : grads) {
      EMBER_CHECK(g.device() == dev, DeviceError, "clip_grad_norm_: gradients on ", dev.str(), " and ",
                  g.device().str());
      work.push_back(g.is_contiguous() ? g : g.contiguous());
    }
    Tensor total = clip_grad_norm_kernel(dev, work, max_norm);
    for (size_t k = 0; k < grads.size(); ++k)
      if (work[k].data_ptr() != grads[k].data_ptr()) grads[k].copy_(work[k]);
    return total;
  }
  double total = 0;
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (sum_squares_kernel.has(g.device().type))
      total += sum_squares_kernel(g.device(), g.contiguous());
    else
      total += sum(square(g.to(DType::Float64))).item<double>();  // a device without the fused kernel
  }
  total = std::sqrt(total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (const Tensor& p : params)
      if (p.grad().defined()) {
        Tensor g = p.grad();
        mul_(g, coef);
      }
  return scalar(total);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  NoGradGuard no_grad;
  for (const Tensor& p : params)
    if (p.grad().defined()) {
      Tensor g = p.grad();
      clamp_(g, -clip_value, clip_value);
    }
}

}  // namespace ember::optim
