// One training step of each demo model (apps/attention_regression) on device
// "cuda" against the same step on the CPU: loss, every parameter's gradient,
// and the parameters after a fused AdamW step (lr 1e-3). Dropout draws the same masks
// on both devices (Philox counters), so the default generator is reseeded
// before each run and the models train with dropout on. Linked into the
// emulated test binary and into ember_gpu_tests (real CUDA), where it skips
// with a message on a machine without a GPU.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <ember/ember.h>

#include "attention_models.h"
#include "test_util.h"

using namespace ember;

namespace {

struct StepResult {
  double loss = 0;
  StateDict grads, params;
};

// make() builds the model; loss(model, x, y) is the training objective.
template <class Make, class Loss>
StepResult train_step(const Make& make, const Loss& loss_of, const StateDict& init, Device device, const Tensor& x,
                      const Tensor& y) {
  auto owned = make();
  auto& model = *owned;
  model.load_state_dict(init);
  model.to(device);
  model.train();
  optim::AdamW opt(model.parameters());
  manual_seed(99);  // the same dropout masks on both devices
  Tensor loss = loss_of(model, x.to(device), y.to(device));
  loss.backward();
  StepResult r;
  r.loss = loss.item<double>();
  for (auto& [name, p] : model.named_parameters()) r.grads.emplace_back(name, p.grad().cpu());
  opt.step();
  for (auto& [name, p] : model.named_parameters()) r.params.emplace_back(name, p.detach().cpu());
  return r;
}

template <class Make, class Loss>
void check_step(const Make& make, const Loss& loss_of, const Tensor& x, const Tensor& y) {
  if (!test::cuda_usable()) return;
  manual_seed(1);
  const StateDict state = make()->state_dict();
  const StepResult cpu = train_step(make, loss_of, state, kCPU, x, y);
  const StepResult dev = train_step(make, loss_of, state, Device("cuda"), x, y);
  CHECK(dev.loss == doctest::Approx(cpu.loss).epsilon(1e-5));
  REQUIRE(cpu.grads.size() == dev.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    INFO(cpu.grads[i].first);
    CHECK(allclose(dev.grads[i].second, cpu.grads[i].second, 1e-3, 1e-5));
    // After the step: where the gradient is ~0 (e.g. the key bias, which
    // softmax ignores), Adam's m / sqrt(v) turns rounding noise into a step
    // of up to lr either way, so those entries are only bounded by 2 lr.
    const Tensor& g = cpu.grads[i].second;
    const Tensor real = gt(abs(g), 1e-5);
    const Tensor pd = dev.params[i].second, pc = cpu.params[i].second;
    CHECK(allclose(where(real, pd, 0.0), where(real, pc, 0.0), 1e-5, 1e-6));
    CHECK(max(abs(sub(pd, pc))).item<double>() <= 2.1e-3);
  }
}

// The attention_regression models: MSE on a batch of 2 sequences.
template <class Model>
void check_model(int64_t tokens) {
  Generator g(3);
  const Tensor x = rand({2, tokens}, {}, &g), y = rand({2, tokens}, {}, &g);
  check_step([] { return std::make_unique<Model>(); },
             [](nn::Module& m, const Tensor& a, const Tensor& b) { return mse_loss(m.forward(a), b); }, x, y);
}

}  // namespace

TEST_CASE("cuda training step: single-head attention model matches the CPU") { check_model<ar::SingleHead>(20); }
TEST_CASE("cuda training step: token transformer matches the CPU") { check_model<ar::TokenTransformer>(50); }
TEST_CASE("cuda training step: encoder regressor matches the CPU") { check_model<ar::EncoderRegressor>(20); }

// The ViT (conv patch embedding, [CLS], pre-norm blocks, label-smoothed
// cross-entropy) on 4 images of 28x28.
TEST_CASE("cuda training step: vision transformer matches the CPU") {
  nn::VisionTransformerOptions o;
  o.depth = 2;
  Generator g(5);
  const Tensor x = randn({4, 1, 28, 28}, {}, &g), t = randint(0, 10, {4}, TensorOptions(kInt64), &g);
  check_step([o] { return std::make_unique<nn::VisionTransformer>(o); },
             [](nn::Module& m, const Tensor& a, const Tensor& b) {
               return cross_entropy(m.forward(a), b, Reduction::Mean, -100, 0.1);
             },
             x, t);
}

// The recurrent layers (seq2seq's building blocks): a bidirectional 2-layer
// LSTM and GRU, one MSE step each.
TEST_CASE("cuda training step: LSTM and GRU match the CPU") {
  Generator g(9);
  const Tensor x = randn({5, 3, 4}, {}, &g);  // (seq, batch, feature)
  nn::RNNOptions o;
  o.num_layers = 2;
  o.bidirectional = true;
  const Tensor y = randn({5, 3, 12}, {}, &g);
  auto mse = [](nn::Module& m, const Tensor& a, const Tensor& b) { return mse_loss(m.forward(a), b); };
  check_step([o] { return std::make_unique<nn::LSTM>(4, 6, o); }, mse, x, y);
  check_step([o] { return std::make_unique<nn::GRU>(4, 6, o); }, mse, x, y);
}

// The GPT (nn/gpt.h): causal_self_attention runs the fused CUDA kernels,
// dropout on the attention weights included; 19 tokens cross a query tile.
TEST_CASE("cuda training step: GPT matches the CPU") {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 24;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = 0.1;
  Generator g(4);
  const Tensor x = randint(0, 11, {2, 19}, TensorOptions(kInt64), &g);
  const Tensor t = randint(0, 11, {2, 19}, TensorOptions(kInt64), &g);
  check_step([c] { return std::make_unique<nn::GPT>(c); },
             [](nn::Module& m, const Tensor& a, const Tensor& b) { return static_cast<nn::GPT&>(m).loss(a, b); }, x, t);
}
