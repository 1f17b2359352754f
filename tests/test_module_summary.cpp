// `std::cout << model`: PyTorch's print(model) layout (each layer with its
// constructor's arguments as PyTorch writes them, children indented under
// their names), then the parameter count. The expected texts are what
// PyTorch 1.13 prints for the same modules, plus Ember's count line.
#include <doctest/doctest.h>

#include <memory>
#include <sstream>
#include <string>

#include <ember/ember.h>

using namespace ember;

namespace {

struct MLP : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::ReLU> act;
  MLP() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, 16));
    act = register_module("act", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 1));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*act)((*fc1)(x))); }
};

template <class T>
std::string printed(const T& model) {
  std::ostringstream os;
  os << model;
  return os.str();
}

}  // namespace

TEST_CASE("module summary: an MLP prints as PyTorch's print(model), with its parameter count") {
  auto model = std::make_shared<MLP>();
  const std::string want =
      "MLP(\n"
      "  (fc1): Linear(in_features=2, out_features=16, bias=True)\n"
      "  (act): ReLU()\n"
      "  (fc2): Linear(in_features=16, out_features=1, bias=True)\n"
      ")\n"
      "Parameters: 65 (65 trainable)";
  CHECK(printed(model) == want);   // the shared_ptr, as `std::cout << model`
  CHECK(printed(*model) == want);  // the module itself
  CHECK(model->str() == want.substr(0, want.find("\nParameters")));
  // Frozen parameters are counted, not as trainable.
  model->fc1->weight.requires_grad_(false);
  CHECK(printed(model).substr(want.find("Parameters")) == "Parameters: 65 (33 trainable)");
}

TEST_CASE("module summary: the built-in layers' arguments as PyTorch writes them") {
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1, false), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::AvgPool2d>(nn::Size2{2, 3}, 1),
      std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Dropout>(0.25),
      std::make_shared<nn::Embedding>(10, 4, 0), std::make_shared<nn::LayerNorm>(Shape{64}),
      std::make_shared<nn::LayerNorm>(Shape{4, 5}, 1e-6, false), std::make_shared<nn::GELU>("tanh"),
      std::make_shared<nn::Linear>(4, 2, false), std::make_shared<nn::GRU>(3, 4),
      std::make_shared<nn::LSTM>(
          3, 4, nn::RNNOptions{.num_layers = 2, .batch_first = true, .dropout = 0.5, .bidirectional = true}),
      std::make_shared<nn::GRUCell>(3, 4, false)});
  const std::string want =
      "Sequential(\n"
      "  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
      "  (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (3): AvgPool2d(kernel_size=(2, 3), stride=1, padding=0)\n"
      "  (4): AdaptiveAvgPool2d(output_size=1)\n"
      "  (5): Dropout(p=0.25, inplace=False)\n"
      "  (6): Embedding(10, 4, padding_idx=0)\n"
      "  (7): LayerNorm((64,), eps=1e-05, elementwise_affine=True)\n"
      "  (8): LayerNorm((4, 5), eps=1e-06, elementwise_affine=False)\n"
      "  (9): GELU(approximate='tanh')\n"
      "  (10): Linear(in_features=4, out_features=2, bias=False)\n"
      "  (11): GRU(3, 4)\n"
      "  (12): LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.5, bidirectional=True)\n"
      "  (13): GRUCell(3, 4, bias=False)\n"
      ")\n"
      "Parameters: 1,336 (1,336 trainable)";
  // 216 conv + 16 batch norm + 40 embedding + 128 layer norm + 8 linear; GRU 12 (3 + 4 + 2) = 108; LSTM, two
  // directions of 16 (3 + 4 + 2) in layer 0 and of 16 (8 + 4 + 2) in layer 1 = 736; GRUCell 12 (3 + 4) = 84.
  CHECK(printed(net) == want);
  // Nested: children's lines indented under their parent's.
  struct Net : nn::Module {
    Net() {
      register_module("features", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                      std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::ReLU>()}));
      register_module("head", std::make_shared<nn::Linear>(2, 3));
    }
  };
  CHECK(Net().str() ==
        "Net(\n"
        "  (features): Sequential(\n"
        "    (0): Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1))\n"
        "    (1): ReLU()\n"
        "  )\n"
        "  (head): Linear(in_features=2, out_features=3, bias=True)\n"
        ")");
}

TEST_CASE("module summary: a small GPT, nested blocks and the parameter count") {
  nn::GPT gpt({.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8});
  // wte 88 + wpe 64 + 2 blocks of 872 + ln_f 16.
  const std::string want =
      "GPT(\n"
      "  (wte): Embedding(11, 8)\n"
      "  (wpe): Embedding(8, 8)\n"
      "  (drop): Dropout(p=0.0, inplace=False)\n"
      "  (h): ModuleList(\n"
      "    (0): GPTBlock(\n"
      "      (ln_1): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      "      (attn): CausalSelfAttention(\n"
      "        (c_attn): Linear(in_features=8, out_features=24, bias=True)\n"
      "        (c_proj): Linear(in_features=8, out_features=8, bias=True)\n"
      "        (resid_dropout): Dropout(p=0.0, inplace=False)\n"
      "      )\n"
      "      (ln_2): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      "      (mlp): GPTMLP(\n"
      "        (c_fc): Linear(in_features=8, out_features=32, bias=True)\n"
      "        (c_proj): Linear(in_features=32, out_features=8, bias=True)\n"
      "        (dropout): Dropout(p=0.0, inplace=False)\n"
      "      )\n"
      "    )\n"
      "    (1): GPTBlock(\n"
      "      (ln_1): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      "      (attn): CausalSelfAttention(\n"
      "        (c_attn): Linear(in_features=8, out_features=24, bias=True)\n"
      "        (c_proj): Linear(in_features=8, out_features=8, bias=True)\n"
      "        (resid_dropout): Dropout(p=0.0, inplace=False)\n"
      "      )\n"
      "      (ln_2): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      "      (mlp): GPTMLP(\n"
      "        (c_fc): Linear(in_features=8, out_features=32, bias=True)\n"
      "        (c_proj): Linear(in_features=32, out_features=8, bias=True)\n"
      "        (dropout): Dropout(p=0.0, inplace=False)\n"
      "      )\n"
      "    )\n"
      "  )\n"
      "  (ln_f): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      ")\n"
      "Parameters: 1,912 (1,912 trainable)";
  CHECK(printed(gpt) == want);
  CHECK(gpt.num_parameters() == 1912);
}
