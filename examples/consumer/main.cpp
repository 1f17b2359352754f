// A program outside Ember's tree: trains a two-layer MLP on XOR with Adam,
// saves and reloads it, and prints the library's version and build info.
// Exits 0 only if the reloaded model classifies all four points.
#include <cstdio>
#include <cstring>
#include <memory>

#include <ember/ember.h>

using namespace ember;

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Mlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, 8));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 1));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(tanh((*fc1)(x))); }
};

int main() {
  std::printf("EMBER_VERSION %s, library %s\n%s", EMBER_VERSION, ember::version(), ember::build_info().c_str());
  if (std::strcmp(EMBER_VERSION, ember::version()) != 0) return 1;

  manual_seed(0);
  Tensor x = tensor({{0.0, 0.0}, {0.0, 1.0}, {1.0, 0.0}, {1.0, 1.0}});
  Tensor y = tensor({0.0, 1.0, 1.0, 0.0}).reshape({4, 1});
  auto model = std::make_shared<Mlp>();
  optim::Adam opt(model->parameters(), {0.05});
  for (int step = 0; step < 500; ++step) {
    opt.zero_grad();
    Tensor loss = binary_cross_entropy_with_logits((*model)(x), y);
    loss.backward();
    opt.step();
    if (step % 100 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item());
  }
  nn::save(*model, "consumer_xor.safetensors");
  Mlp reloaded;
  nn::load(reloaded, "consumer_xor.safetensors");
  NoGradGuard no_grad;
  const auto pred = sigmoid(reloaded.forward(x)).to_vector<double>();
  int right = 0;
  for (int i = 0; i < 4; ++i) right += (pred[i] > 0.5) == (i == 1 || i == 2);
  std::printf("xor: %d of 4 right after reloading\n", right);
  return right == 4 ? 0 : 1;
}
