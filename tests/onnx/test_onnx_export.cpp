// ONNX export: small versions of the demo models written with
// onnx::export_model, run in onnxruntime (the reference runtime) and in
// Ember's importer, against Ember's own outputs; dynamic axes at sizes other
// than the example's; and the refusals (an op without a lowering, a constant
// that would be wrong at another size), which write nothing.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <ember/ember.h>
#include <ember/onnx/onnx.h>

#include "onnx/onnxruntime.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ember_onnx_export_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// onnxruntime's output for one input named "input", against expected, within atol.
void check_onnxruntime(const std::string& model, const Tensor& x, const Tensor& expected, double atol = 1e-5) {
  const auto out = test::run_onnxruntime(model, {{"input", x}});
  REQUIRE(out.count("output") == 1);
  const Tensor got = out.at("output");
  REQUIRE(got.shape() == expected.shape());
  CHECK(allclose(got, expected, 0.0, atol));
}

// The imported graph's output for x, against expected.
void check_import(const std::string& model, const Tensor& x, const Tensor& expected, double atol = 1e-5) {
  auto m = onnx::load(model);
  NoGradGuard ng;
  const Tensor got = m->forward(x);
  REQUIRE(got.shape() == expected.shape());
  CHECK(allclose(got, expected, 0.0, atol));
}

Tensor eval_forward(nn::Module& m, const Tensor& x) {
  m.eval();
  NoGradGuard ng;
  return m.forward(x);
}

const onnx::ExportOptions kDynamicBatch{.dynamic_axes = {{"input", {{0, "batch"}}}}};

}  // namespace

TEST_CASE("onnx export: an MLP with a dynamic batch runs in onnxruntime at other batch sizes") {
  manual_seed(1);
  nn::Sequential mlp(
      {std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 3)});
  const std::string path = temp_path("mlp.onnx");
  onnx::export_model(mlp, randn({4, 6}), path, kDynamicBatch);
  for (int64_t batch : {1, 4, 7}) {
    const Tensor x = randn({batch, 6});
    const Tensor want = eval_forward(mlp, x);
    check_onnxruntime(path, x, want);
    check_import(path, x, want);
  }
}

TEST_CASE("onnx export: a ResNet (conv, batch norm, pools) matches onnxruntime") {
  manual_seed(2);
  nn::ResNet net(nn::ResNetOptions{.in_channels = 1, .num_classes = 5, .widths = {4, 8}, .blocks = {1, 1}});
  // Running statistics that are not the initial ones, so eval-mode batch norm is really checked.
  net.train();
  for (int i = 0; i < 3; ++i) net.forward(randn({8, 1, 12, 12}));
  const std::string path = temp_path("resnet.onnx");
  onnx::export_model(net, randn({2, 1, 12, 12}), path, kDynamicBatch);
  CHECK(net.is_training());  // the mode is restored
  const Tensor x = randn({3, 1, 12, 12});
  const Tensor want = eval_forward(net, x);
  check_onnxruntime(path, x, want);
  check_import(path, x, want);
}

TEST_CASE("onnx export: a ViT (patches, attention, layer norm, GELU) matches onnxruntime") {
  manual_seed(3);
  nn::VisionTransformer vit(nn::VisionTransformerOptions{.img_size = {8, 8},
                                                         .patch_size = {4, 4},
                                                         .num_classes = 4,
                                                         .embed_dim = 16,
                                                         .depth = 2,
                                                         .num_heads = 2,
                                                         .mlp_dim = 32,
                                                         .stem_channels = 3});
  const std::string path = temp_path("vit.onnx");
  onnx::export_model(vit, randn({2, 1, 8, 8}), path, kDynamicBatch);
  const Tensor x = randn({5, 1, 8, 8});
  const Tensor want = eval_forward(vit, x);
  check_onnxruntime(path, x, want);
  check_import(path, x, want);
}

TEST_CASE("onnx export: a GPT with dynamic batch and sequence matches onnxruntime at other lengths") {
  manual_seed(4);
  nn::GPT gpt(nn::GPTConfig{.vocab_size = 11, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 16});
  const std::string path = temp_path("gpt.onnx");
  onnx::export_model(gpt, randint(0, 11, {2, 6}), path, {.dynamic_axes = {{"input", {{0, "batch"}, {1, "sequence"}}}}});
  for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 6}, {3, 9}, {1, 16}}) {
    const Tensor idx = randint(0, 11, {b, t});
    const Tensor want = eval_forward(gpt, idx);
    check_onnxruntime(path, idx, want, 2e-5);
    check_import(path, idx, want, 2e-5);
  }
}

TEST_CASE("onnx export: inputs that share a named dynamic axis change size together") {
  // Two inputs with one batch (as seq2seq's source and target prefix): each
  // traced corner must resize both, or the forward would see two batches.
  manual_seed(5);
  nn::Sequential both({std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Linear>(2, 3)});
  auto fwd = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(both[0].forward(in[0]), both[1].forward(in[1])), mul(in[2], 2.0)};
  };
  const std::string path = temp_path("shared_axis.onnx");
  onnx::export_model(both, fwd, {randn({3, 4}), randn({3, 2}), randn({3, 5})}, path,
                     {.input_names = {"x", "y", "z"},
                      .output_names = {"sum", "twice"},
                      .dynamic_axes = {{"x", {{0, "batch"}}}, {"y", {{0, "batch"}}}, {"z", {{0, "batch"}, {1, "n"}}}},
                      .doc_string = ""});
  const Tensor x = randn({6, 4}), y = randn({6, 2}), z = randn({6, 2});
  const auto out = test::run_onnxruntime(path, {{"x", x}, {"y", y}, {"z", z}});
  both.eval();
  NoGradGuard ng;
  const std::vector<Tensor> want = fwd({x, y, z});
  REQUIRE(out.at("sum").shape() == want[0].shape());
  CHECK(allclose(out.at("sum"), want[0], 0.0, 1e-5));
  REQUIRE(out.at("twice").shape() == want[1].shape());
  CHECK(allclose(out.at("twice"), want[1], 0.0, 1e-5));
  // One name with two sizes in the example is refused.
  onnx::ExportOptions two_sizes;
  two_sizes.dynamic_axes = {{"input", {{0, "batch"}}}, {"input_1", {{0, "batch"}}}};
  CHECK_THROWS_WITH_AS(onnx::export_model(both, fwd, {randn({3, 4}), randn({2, 2}), randn({3, 5})}, path, two_sizes),
                       doctest::Contains("dynamic axis 'batch' is 3 in input 'input' but 2 in input 'input_1'"),
                       ValueError);
}

TEST_CASE("onnx export: an op without a lowering is refused by name and nothing is written") {
  nn::Linear lin(3, 3);
  const std::string path = temp_path("refused.onnx");
  fs::remove(path);
  auto fwd = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{index_add(lin.forward(in[0]), 0, tensor({0.0}).to(kInt64), ones({1, 3}))};
  };
  CHECK_THROWS_WITH_AS(onnx::export_model(lin, fwd, {randn({2, 3})}, path), doctest::Contains("'index_add'"),
                       onnx::Unsupported);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("onnx export: a tensor computed from the input by an unrecorded op is refused, under NoGradGuard too") {
  // A user op that skips op::call: its output, computed by hand from the
  // input, has the op only as its grad_fn. Frozen into a constant, the graph
  // would ignore its input; export names the op instead, whatever the
  // caller's grad mode (an app exports after evaluating under NoGradGuard).
  nn::Linear lin(3, 3);
  auto fwd = [&](const std::vector<Tensor>& in) {
    Tensor out = from_vector(in[0].contiguous().to_vector<float>(), in[0].shape());
    if (autograd::needs_grad({in[0]})) autograd::record_no_backward("by_hand", {in[0]}, out);
    return std::vector<Tensor>{lin.forward(out)};
  };
  const std::string path = temp_path("unrecorded.onnx");
  fs::remove(path);
  CHECK_THROWS_WITH_AS(onnx::export_model(lin, fwd, {randn({2, 3})}, path), doctest::Contains("computed by 'by_hand'"),
                       onnx::Unsupported);
  NoGradGuard ng;
  CHECK_THROWS_WITH_AS(onnx::export_model(lin, fwd, {randn({2, 3})}, path), doctest::Contains("computed by 'by_hand'"),
                       onnx::Unsupported);
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("onnx export: a constant that changes with a dynamic axis is refused") {
  nn::Linear lin(3, 3);
  const std::string path = temp_path("constant.onnx");
  fs::remove(path);
  // ones({B, 3}) made by a factory: right at one batch size only.
  auto fwd = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(lin.forward(in[0]), ones({in[0].size(0), 3}))};
  };
  CHECK_THROWS_WITH_AS(onnx::export_model(lin, fwd, {randn({4, 3})}, path, kDynamicBatch),
                       doctest::Contains("changes with the dynamic axes"), onnx::Unsupported);
  CHECK_FALSE(fs::exists(path));
  // Without the dynamic axis the same constant is fine.
  onnx::export_model(lin, fwd, {randn({4, 3})}, path);
  CHECK(fs::exists(path));
}
