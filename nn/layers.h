// The basic layers of torch.nn with PyTorch's names, defaults and
// initialisation: Linear, Embedding, LayerNorm, BatchNorm1d, Dropout, ReLU,
// GELU, and the containers Sequential and ModuleList.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ember/nn/module.h>

namespace ember::nn {

// y = x W^T + b; W (out, in) and b (out) drawn from U(-1/sqrt(in), 1/sqrt(in))
// as PyTorch's default (kaiming_uniform with a = sqrt 5).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  Tensor weight, bias;
  int64_t in_features, out_features;
};

// A lookup table of num_embeddings vectors, N(0, 1) initialised; the
// padding_idx row starts at zero and gets no gradient.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            TensorOptions opts = {});
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  Tensor weight;
  std::optional<int64_t> padding_idx;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  Tensor weight, bias;  // undefined without elementwise_affine
  Shape normalized_shape;
  double eps;
};

// Over (N, C) or (N, C, L); running statistics as buffers (running_mean,
// running_var, num_batches_tracked), used in eval mode.
class BatchNorm1d : public Module {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, TensorOptions opts = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  double eps, momentum;
};

// Zeroes elements with probability p in training mode; identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  double p;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
  std::string approximate;
};

// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return *named_children().at(i).second; }
};

// Holds submodules named "0", "1", ... without a forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  void push_back(std::shared_ptr<Module> m);
  std::string type_name() const override { return "ModuleList"; }
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return *named_children().at(i).second; }
  template <class M>
  M& at(size_t i) const {
    return dynamic_cast<M&>(*named_children().at(i).second);
  }
};

}  // namespace ember::nn
