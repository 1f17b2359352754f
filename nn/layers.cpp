// Basic layers: construction with PyTorch's default initialisation, and
// forward through the ops.
#include <ember/nn/layers.h>

#include <cmath>

#include <ember/core/autograd.h>
#include <ember/nn/init.h>
#include <ember/ops/activation.h>
#include <ember/ops/dropout.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/linear_dropout_add.h>
#include <ember/ops/linear_gelu.h>
#include <ember/ops/matmul.h>
#include <ember/ops/norm.h>

namespace ember::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, TensorOptions opts) : in_features(in), out_features(out) {
  EMBER_CHECK(in > 0 && out > 0, ValueError, "Linear: feature counts must be positive, got ", in, " and ", out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  Tensor w = empty({out, in}, TensorOptions(opts.dtype, opts.device));
  init::kaiming_uniform_(w, std::sqrt(5.0));  // = U(-bound, bound)
  weight = register_parameter("weight", w);
  if (has_bias) {
    Tensor b = empty({out}, TensorOptions(opts.dtype, opts.device));
    init::uniform_(b, -bound, bound);
    bias = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Tensor Linear::forward_gelu(const Tensor& x, GeluApproximation approximate) {
  return linear_gelu(x, weight, bias, approximate);
}

Tensor Linear::forward_dropout_add(const Tensor& x, const Dropout& dropout, const Tensor& residual) {
  return linear_dropout_add(x, weight, bias, residual, dropout.p, dropout.is_training());
}

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad, TensorOptions opts) : padding_idx(pad) {
  EMBER_CHECK(num > 0 && dim > 0, ValueError, "Embedding: sizes must be positive, got ", num, " and ", dim);
  if (pad) {
    EMBER_CHECK(*pad >= -num && *pad < num, IndexError, "Embedding: padding_idx ", *pad, " is out of range for ", num,
                " embeddings");
    if (*pad < 0) padding_idx = *pad + num;
  }
  Tensor w = empty({num, dim}, TensorOptions(opts.dtype, opts.device));
  init::normal_(w);
  if (padding_idx) {
    Tensor row = w.select(0, *padding_idx);
    init::zeros_(row);
  }
  weight = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx); }

LayerNorm::LayerNorm(Shape shape, double e, bool affine, TensorOptions opts) : normalized_shape(shape), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones(shape, TensorOptions(opts.dtype, opts.device)));
    bias = register_parameter("bias", zeros(shape, TensorOptions(opts.dtype, opts.device)));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

BatchNorm1d::BatchNorm1d(int64_t n, double e, double m, bool affine, bool track, TensorOptions opts)
    : eps(e), momentum(m) {
  const TensorOptions o(opts.dtype, opts.device);
  if (affine) {
    weight = register_parameter("weight", ones({n}, o));
    bias = register_parameter("bias", zeros({n}, o));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({n}, o));
    running_var = register_buffer("running_var", ones({n}, o));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, TensorOptions(DType::Int64, opts.device)));
  }
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  const bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.fill_(num_batches_tracked.item<double>() + 1);
  }
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, momentum, eps);
}

Dropout::Dropout(double prob) : p(prob) {
  EMBER_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: probability has to be between 0 and 1, got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Activation::Activation(const std::string& name) {
  if (name == "relu")
    kind_ = ReLU;
  else if (name == "gelu")
    kind_ = GELU;
  else
    throw ValueError("activation must be \"relu\" or \"gelu\", got \"" + name + "\"");
}

Tensor Activation::operator()(const Tensor& x) const {
  if (kind_ == Custom) return fn_(x);
  return kind_ == GELU ? gelu(x) : relu(x);
}

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { add_child(std::to_string(size()), std::move(m)); }

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, m] : named_children()) h = m->forward(h);
  return h;
}

void ModuleList::push_back(std::shared_ptr<Module> m) { add_child(std::to_string(size()), std::move(m)); }

}  // namespace ember::nn
