/// \file
/// The basic layers of torch.nn with PyTorch's names, defaults and
/// initialisation: Linear, Embedding, LayerNorm, BatchNorm1d, Dropout, ReLU,
/// GELU, and the containers Sequential and ModuleList.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include <ember/nn/module.h>
#include <ember/ops/activation.h>

namespace ember::nn {

class Dropout;

/// y = x W^T + b; W (out, in) and b (out) drawn from U(-1/sqrt(in), 1/sqrt(in))
/// as PyTorch's default (kaiming_uniform with a = sqrt 5).
class Linear : public Module {
 public:
  /// A layer from in_features to out_features, with a bias unless told otherwise.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  /// gelu(forward(x), approximate) as one op (ops/linear_gelu.h): an MLP's
  /// first layer. The same values as the two calls on the CPU; one
  /// elementwise pass after the GEMM on CUDA.
  Tensor forward_gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
  /// add(residual, dropout(forward(x))) as one op (ops/linear_dropout_add.h):
  /// the end of a residual branch, dropout's p and training mode taken from
  /// the module. The same values (and dropout draws) as the three calls on
  /// the CPU; one elementwise pass after the GEMM on CUDA.
  Tensor forward_dropout_add(const Tensor& x, const Dropout& dropout, const Tensor& residual);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  ///@{
  Tensor weight, bias;  ///< (out, in) and (out); bias undefined without one
  ///@}
  ///@{
  int64_t in_features, out_features;  ///< the sizes
  ///@}
};

/// A lookup table of num_embeddings vectors, N(0, 1) initialised; the
/// padding_idx row starts at zero and gets no gradient.
class Embedding : public Module {
 public:
  /// num_embeddings vectors of embedding_dim.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            TensorOptions opts = {});
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor weight;                       ///< (num_embeddings, embedding_dim)
  std::optional<int64_t> padding_idx;  ///< the row that stays zero, if any
};

/// Normalises over the trailing normalized_shape dims (layer_norm), with a learned scale and shift
/// (ones and zeros at first) unless elementwise_affine is false.
class LayerNorm : public Module {
 public:
  /// Over normalized_shape, with eps added to the variance.
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  ///@{
  Tensor weight, bias;  ///< undefined without elementwise_affine
  ///@}
  Shape normalized_shape;  ///< the normalised trailing dims
  double eps;              ///< added to the variance
};

/// Over (N, C) or (N, C, L); running statistics as buffers (running_mean,
/// running_var, num_batches_tracked), used in eval mode.
class BatchNorm1d : public Module {
 public:
  /// num_features channels; momentum weights the new batch in the running statistics.
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
  std::string extra_repr() const override;
  /// Parameters (when affine) and buffers (when track_running_stats).
  ///@{
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  ///@}
  ///@{
  double eps, momentum;  ///< added to the variance; weight of a new batch in the running statistics
  ///@}
};

/// Zeroes elements with probability p in training mode; identity in eval.
class Dropout : public Module {
 public:
  /// Drops each element with probability p (kept ones scale by 1/(1-p)).
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;  ///< the drop probability
};

/// relu as a layer.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

/// gelu as a layer.
class GELU : public Module {
 public:
  /// The exact form or the tanh one (see gelu()).
  explicit GELU(GeluApproximation approximate = GeluApproximation::None) : approximate(approximate) {}
  /// The form as PyTorch spells it: "none" or "tanh"; ValueError otherwise.
  explicit GELU(const std::string& approximate) : approximate(gelu_approximation(approximate)) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  GeluApproximation approximate;  ///< the form
};

/// The nonlinearity of a transformer layer's MLP: an enum, which also takes
/// PyTorch's strings ("relu", "gelu") as flags and configs spell them, so
/// `.activation = Activation::GELU` and `.activation = "gelu"` both work (an
/// unknown name is a ValueError naming the choices), or any callable
/// Tensor(const Tensor&), as PyTorch's `activation` takes a function:
/// `.activation = [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }`.
class Activation {
 public:
  enum Kind { ReLU, GELU, Custom };
  Activation(Kind kind = ReLU) : kind_(kind) {}                    // NOLINT: an enum value
  Activation(const std::string& name);                             // NOLINT: "relu" or "gelu"
  Activation(const char* name) : Activation(std::string(name)) {}  // NOLINT
  /// Any function of one tensor (kind() Custom).
  template <class F>
  requires(std::is_invocable_r_v<Tensor, const F&, const Tensor&> && !std::is_convertible_v<F, std::string> &&
           !std::is_same_v<std::decay_t<F>, Kind> && !std::is_same_v<std::decay_t<F>, Activation>) Activation(F fn)
      : kind_(Custom), fn_(std::move(fn)) {}  // NOLINT: a callable
  Kind kind() const { return kind_; }
  /// "relu", "gelu" or "custom".
  const char* name() const { return kind_ == GELU ? "gelu" : kind_ == Custom ? "custom" : "relu"; }
  /// The function on x.
  Tensor operator()(const Tensor& x) const;
  /// The same built-in kind; a callable equals nothing (functions do not compare).
  friend bool operator==(const Activation& a, const Activation& b) { return a.kind_ == b.kind_ && a.kind_ != Custom; }
  friend std::ostream& operator<<(std::ostream& os, const Activation& a) { return os << a.name(); }

 private:
  Kind kind_;
  std::function<Tensor(const Tensor&)> fn_;  // Custom's
};

/// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() = default;
  /// The modules, in order.
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Appends m (named by its position).
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  /// Number of children, and child i.
  ///@{
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return *named_children().at(i).second; }
  ///@}
};

/// Holds submodules named "0", "1", ... without a forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  /// Appends m (named by its position).
  void push_back(std::shared_ptr<Module> m);
  std::string type_name() const override { return "ModuleList"; }
  /// Number of children, and child i.
  ///@{
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return *named_children().at(i).second; }
  ///@}
  /// Child i as its concrete type M (std::bad_cast if it is not one).
  template <class M>
  M& at(size_t i) const {
    return dynamic_cast<M&>(*named_children().at(i).second);
  }
};

}  // namespace ember::nn
