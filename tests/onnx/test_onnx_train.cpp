// Fine-tuning models that PyTorch exported to ONNX: tests/fixtures/onnx_train
// (made by tools/onnx_torch_models.py) holds a small CNN and a small
// transformer encoder as PyTorch 1.13 writes them at opset 17, a data set, and
// the loss of each of 20 AdamW steps PyTorch took on it. Here each model is
// imported with onnx::load and trained the same way in Ember: the same
// batches in the same order, mean cross-entropy, optim::AdamW with the
// settings the file records. Every step's loss must match PyTorch's: within
// 1e-4 in float32 and within 1e-12 in float64 (the model moved to float64
// with Module::to, as PyTorch's run did with .to(torch.float64), with the
// float32 constants the file holds: see the script). Rounding hides small
// errors in float32; in float64 a backward that is off anywhere moves the
// losses far beyond 1e-12 within a step or two.
// The untrained model's logits are also checked against onnxruntime's.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnxruntime.h"
#include "test_util.h"

using namespace ember;

namespace {

const std::string kDir = std::string(EMBER_FIXTURE_DIR) + "/onnx_train/";

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "losses.json");
    REQUIRE_MESSAGE(in.good(), "missing ", kDir, "losses.json (tools/onnx_torch_models.py makes it)");
    return nlohmann::json::parse(in);
  }();
  return j;
}

const StateDict& data() {
  static const StateDict d = load_safetensors(kDir + "data.safetensors");
  return d;
}

// PyTorch's optimizer, read from the file rather than assumed.
optim::AdamWOptions adamw_options() {
  const nlohmann::json& r = reference();
  REQUIRE(r.at("optimizer") == "AdamW");
  const nlohmann::json& s = r.at("settings");
  REQUIRE(s.at("amsgrad") == false);
  optim::AdamWOptions o;
  o.lr = s.at("lr").get<double>();
  o.beta1 = s.at("betas").at(0).get<double>();
  o.beta2 = s.at("betas").at(1).get<double>();
  o.eps = s.at("eps").get<double>();
  o.weight_decay = s.at("weight_decay").get<double>();
  return o;
}

// Imports model `name` and checks it is the one PyTorch exported: input
// "input", output "logits", each parameter under its state-dict name.
std::shared_ptr<onnx::Model> load_model(const std::string& name, int64_t num_parameters) {
  auto model = onnx::load(kDir + name + ".onnx");
  REQUIRE(model->input_names() == std::vector<std::string>{"input"});
  REQUIRE(model->output_names() == std::vector<std::string>{"logits"});
  CHECK(model->opset() == 17);
  CHECK(model->num_parameters() == num_parameters);
  return model;
}

// Fine-tunes the model as tools/onnx_torch_models.py did and compares each
// step's loss with the reference's `key` list.
void fine_tune(onnx::Model& model, const std::string& name, DType dtype, const std::string& key, double tol) {
  const nlohmann::json& r = reference();
  const nlohmann::json& ref = r.at(name);
  const std::vector<double> want = ref.at(key).get<std::vector<double>>();
  const int64_t steps = r.at("steps"), batch = r.at("batch"), samples = r.at("samples");
  REQUIRE(static_cast<int64_t>(want.size()) == steps);
  const Tensor x = test::fixture_tensor(data(), ref.at("input")).to(dtype);
  const Tensor y = test::fixture_tensor(data(), ref.at("target"));
  REQUIRE(x.size(0) == samples);

  model.to(dtype);
  model.train();
  optim::AdamW opt(model.parameters(), adamw_options());
  double worst = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t i = (step * batch) % samples;
    Tensor loss = cross_entropy(model.forward(x.narrow(0, i, batch)), y.narrow(0, i, batch));
    opt.zero_grad();
    loss.backward();
    opt.step();
    const double got = loss.item<double>();
    worst = std::max(worst, std::fabs(got - want[step]));
    CHECK_MESSAGE(std::fabs(got - want[step]) <= tol, name, " step ", step, ": Ember ", got, ", PyTorch ", want[step]);
  }
  MESSAGE(name, " ", key, ": largest step-loss difference from PyTorch ", worst);
  // The reference itself learns: the last step's batch is the fourth's, five passes on.
  CHECK(want[steps - 1] < want[3]);
}

// The imported, untrained model's logits on the first batch beside onnxruntime's.
void check_against_onnxruntime(onnx::Model& model, const std::string& name) {
  const nlohmann::json& ref = reference().at(name);
  const Tensor x = test::fixture_tensor(data(), ref.at("input")).narrow(0, 0, reference().at("batch")).contiguous();
  const auto ort = test::run_onnxruntime(kDir + name + ".onnx", {{"input", x}});
  Tensor got;
  {
    NoGradGuard g;
    got = model.forward(x);
  }
  const Tensor& want = ort.at("logits");
  REQUIRE(got.shape() == want.shape());
  test::check_close(got, want.to_vector<double>(), 1e-5);
}

}  // namespace

TEST_CASE("onnx train: PyTorch's exported CNN fine-tunes in Ember as in PyTorch, float32") {
  auto model = load_model("cnn", 1626);
  // The names PyTorch's state dict has, as parameters of the imported model.
  std::vector<std::string> names;
  for (const auto& [k, p] : model->named_parameters()) names.push_back(k);
  std::sort(names.begin(), names.end());
  CHECK(names ==
        std::vector<std::string>{"conv1.bias", "conv1.weight", "conv2.bias", "conv2.weight", "fc.bias", "fc.weight"});
  check_against_onnxruntime(*model, "cnn");
  fine_tune(*model, "cnn", kFloat32, "losses_float32", 1e-4);
}

TEST_CASE("onnx train: PyTorch's exported CNN fine-tunes in Ember as in PyTorch, float64") {
  auto model = load_model("cnn", 1626);
  fine_tune(*model, "cnn", kFloat64, "losses_float64", 1e-12);
}

TEST_CASE("onnx train: PyTorch's exported transformer encoder fine-tunes in Ember as in PyTorch, float32") {
  auto model = load_model("encoder", 4628);
  int attention = 0;
  for (const auto& [k, p] : model->named_parameters())
    attention += k.find("self_attn.in_proj_weight") != std::string::npos;
  CHECK(attention == 2);  // one per layer: equal initializers were not merged
  check_against_onnxruntime(*model, "encoder");
  fine_tune(*model, "encoder", kFloat32, "losses_float32", 1e-4);
}

TEST_CASE("onnx train: PyTorch's exported transformer encoder fine-tunes in Ember as in PyTorch, float64") {
  auto model = load_model("encoder", 4628);
  fine_tune(*model, "encoder", kFloat64, "losses_float64", 1e-12);
}
