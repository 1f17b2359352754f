// The round trip for the demo models that live in the apps: attention
// regression's three trained models and seq2seq's Transformer, exported,
// run in onnxruntime, imported again, and one AdamW step taken on both the
// native and the imported model (the small models of the library's own
// classes are in test_onnx_export.cpp).
#include <doctest/doctest.h>

#include <filesystem>
#include <map>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "attention_models.h"
#include "onnx/onnxruntime.h"
#include "transformer_model.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ember_onnx_demo_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// The imported graph's parameters are the native ones by name; one AdamW step on the same batch (eval mode)
// moves both alike. eps 1e-4: see test_onnx_export.cpp (an attention's key bias gets rounding noise).
void check_round_trip(nn::Module& native, const onnx::ForwardFn& fwd, const std::string& path,
                      const std::vector<Tensor>& inputs, const std::vector<std::string>& names) {
  native.eval();
  auto imported = onnx::load(path);
  imported->eval();
  {
    NoGradGuard ng;
    const Tensor want = fwd(inputs)[0];
    std::map<std::string, Tensor> feeds;
    for (size_t i = 0; i < names.size(); ++i) feeds[names[i]] = inputs[i];
    CHECK(allclose(test::run_onnxruntime(path, feeds).at("output"), want, 0.0, 1e-5));
    CHECK(allclose(imported->forward(inputs)[0], want, 0.0, 1e-5));
  }
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : native.state_dict()) mine[name] = t;
  const auto params = imported->named_parameters();
  CHECK(params.size() == native.named_parameters().size());
  manual_seed(9);
  const Tensor target = randn(fwd(inputs)[0].shape());
  optim::AdamW a(native.parameters(), {.lr = 1e-2, .eps = 1e-4});
  optim::AdamW b(imported->parameters(), {.lr = 1e-2, .eps = 1e-4});
  mse_loss(fwd(inputs)[0], target).backward();
  mse_loss(imported->forward(inputs)[0], target).backward();
  a.step();
  b.step();
  for (const auto& [name, t] : native.state_dict()) mine[name] = t;
  for (const auto& entry : params) {
    const std::string& name = entry.first;  // named copies: clang 14's lambdas cannot capture structured bindings
    const Tensor& p = entry.second;
    REQUIRE_MESSAGE(mine.count(name), name);
    CHECK_MESSAGE(allclose(p, mine.at(name), 0.0, 1e-5), name);
  }
}

template <class M>
void check_attention_model(int64_t points) {
  manual_seed(11);
  M model;
  auto fwd = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.forward(in[0])}; };
  const std::string path = temp_path(model.type_name() + std::to_string(points) + ".onnx");
  onnx::export_model(model, fwd, {randn({4, points})}, path, {.dynamic_axes = {{"input", {{0, "batch"}}}}});
  check_round_trip(model, fwd, path, {randn({3, points})}, {"input"});
}

}  // namespace

TEST_CASE("onnx demo models: attention regression's single-head model round-trips") {
  check_attention_model<ar::SingleHead>(50);
}
TEST_CASE("onnx demo models: attention regression's token transformer round-trips") {
  check_attention_model<ar::TokenTransformer>(ar::TokenTransformer::kTokens);
}
TEST_CASE("onnx demo models: attention regression's encoder regressor round-trips") {
  check_attention_model<ar::EncoderRegressor>(50);
}

TEST_CASE("onnx demo models: seq2seq's Transformer (encoder and one decoder pass) round-trips") {
  manual_seed(12);
  seq2seq_app::TransformerSeq2Seq model({.src_vocab = 13,
                                         .tgt_vocab = 9,
                                         .d_model = 16,
                                         .nhead = 2,
                                         .encoder_layers = 1,
                                         .decoder_layers = 1,
                                         .dim_feedforward = 24});
  auto fwd = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.logits(in[0], in[1], in[2])}; };
  const std::vector<std::string> names{"source", "source_lengths", "target_prefix"};
  const std::string path = temp_path("seq2seq.onnx");
  const Tensor src = randint(1, 13, {2, 6}), lens = tensor({6.0, 4.0}).to(kInt64), tgt = randint(1, 9, {2, 5});
  onnx::export_model(model, fwd, {src, lens, tgt}, path,
                     {.input_names = names,
                      .dynamic_axes = {{"source", {{0, "batch"}, {1, "source"}}},
                                       {"source_lengths", {{0, "batch"}}},
                                       {"target_prefix", {{0, "batch"}, {1, "prefix"}}}}});
  const Tensor src3 = randint(1, 13, {3, 7}), lens3 = tensor({7.0, 3.0, 5.0}).to(kInt64);
  check_round_trip(model, fwd, path, {src3, lens3, randint(1, 9, {3, 4})}, names);
}
