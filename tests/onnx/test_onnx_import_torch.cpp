// Models as PyTorch exports them (tests/onnx/data/export_torch_models.py:
// torch.onnx.export of PyTorch 1.13, opset 17, a symbolic batch axis): a
// small CNN, a Transformer encoder layer and a two-layer LSTM, run by Ember
// at two batch sizes and compared with PyTorch's outputs; their initializers
// keep PyTorch's state-dict names where the exporter kept them, and a loss
// through the imported encoder reaches every parameter.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "test_util.h"

using namespace ember;

namespace {

const std::string kData = std::string(EMBER_ONNX_TEST_DIR) + "/data/";

Tensor ref(const StateDict& d, const std::string& name) { return test::fixture_tensor(d, name); }

// Every element within atol + rtol |want|.
void check_near(const Tensor& got, const Tensor& want, double rtol, double atol) {
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to(kFloat64).to_vector<double>(), w = want.to(kFloat64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]) - rtol * std::fabs(w[i]));
  CHECK_MESSAGE(worst <= atol, "largest error beyond rtol: ", worst);
}

// Runs model on x_b<batch> and compares each named output with <name>_b<batch>.
void check_against_pytorch(const std::string& model, const std::vector<std::string>& outputs) {
  auto m = ember::onnx::load(kData + model + ".onnx");
  m->eval();
  const StateDict want = load_safetensors(kData + model + ".safetensors");
  CHECK(m->output_names() == outputs);
  NoGradGuard no_grad;
  for (int batch : {2, 5}) {
    INFO(model, " at batch ", batch);
    const auto outs = m->forward(std::vector<Tensor>{ref(want, "x_b" + std::to_string(batch))});
    REQUIRE(outs.size() == outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      INFO("output ", outputs[k]);
      check_near(outs[k], ref(want, outputs[k] + "_b" + std::to_string(batch)), 1e-4, 1e-5);
    }
  }
}

}  // namespace

TEST_CASE("onnx import torch: a CNN exported by PyTorch matches PyTorch at batch 2 and 5") {
  check_against_pytorch("cnn", {"y"});
}

TEST_CASE("onnx import torch: a Transformer encoder layer matches PyTorch at batch 2 and 5") {
  check_against_pytorch("encoder", {"y"});
}

TEST_CASE("onnx import torch: a two-layer LSTM matches PyTorch at batch 2 and 5") {
  check_against_pytorch("lstm", {"y", "h", "c"});
}

TEST_CASE("onnx import torch: initializers keep PyTorch's state-dict names where the exporter kept them") {
  auto m = ember::onnx::load(kData + "cnn.onnx");
  const StateDict torch_params = load_safetensors(kData + "cnn_params.safetensors");
  const StateDict mine = m->state_dict();
  // The exporter folds the batch norm into conv1 (new names, sanitised from "onnx::Conv_29"); conv2 and
  // the linear layer keep their names and values.
  for (const std::string name : {"conv2.weight", "conv2.bias", "fc.weight", "fc.bias"}) {
    INFO(name);
    check_near(ref(mine, name), ref(torch_params, name), 0, 0);
  }
  for (const auto& entry : m->state_dict_names()) {
    const auto& file_name = entry.first;
    const auto& key = entry.second;
    INFO(file_name, " -> ", key);
    CHECK(key.find(':') == std::string::npos);
    CHECK(key.find('/') == std::string::npos);
  }
}

TEST_CASE("onnx import torch: a loss through the imported encoder reaches every parameter") {
  auto m = ember::onnx::load(kData + "encoder.onnx");
  const StateDict data = load_safetensors(kData + "encoder.safetensors");
  const Tensor y = m->forward(ref(data, "x_b2"));
  sum(square(y)).backward();
  int with_grad = 0;
  for (const auto& entry : m->named_parameters()) {
    const auto& name = entry.first;
    const auto& p = entry.second;
    INFO(name);
    REQUIRE(p.grad().defined());
    const double norm = sum(square(p.grad())).item<double>();
    CHECK(std::isfinite(norm));
    with_grad += norm > 0;
  }
  CHECK(with_grad > 0);
}
