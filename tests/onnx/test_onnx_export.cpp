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

// The round trip: the imported graph holds the native model's parameters under their state-dict names, and
// one AdamW step on the same batch (eval mode: running statistics, no dropout) moves both alike.
void check_adamw_step(nn::Module& native, const std::string& model, const Tensor& x) {
  auto imported = onnx::load(model);
  native.eval();
  imported->eval();
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : native.state_dict()) mine[name] = t;
  std::vector<std::pair<std::string, Tensor>> pairs;
  for (const auto& entry : imported->named_parameters()) {
    const auto& name = entry.first;
    const auto& p = entry.second;
    REQUIRE_MESSAGE(mine.count(name), "imported parameter ", name, " is not in the native state dict");
    CHECK(equal(p, mine.at(name)));
    pairs.emplace_back(name, p);
  }
  CHECK(pairs.size() == native.named_parameters().size());
  manual_seed(7);
  const Tensor target = randn(native.forward(x).shape());
  auto step = [&](nn::Module& m, const Tensor& out) {
    // eps 1e-4, not 1e-8: the key bias of an attention gets a gradient that is zero in exact arithmetic
    // (softmax ignores a shift shared by every key) and rounding noise of 1e-9 in practice, which Adam's
    // normalisation would turn into full steps of either sign.
    optim::AdamW opt(m.parameters(), {.lr = 1e-2, .eps = 1e-4});
    opt.zero_grad();
    mse_loss(out, target).backward();
    opt.step();
  };
  step(native, native.forward(x));
  step(*imported, imported->forward(x));
  for (const auto& [name, t] : native.state_dict()) mine[name] = t;
  for (const auto& entry : pairs) {
    const auto& name = entry.first;
    CHECK_MESSAGE(allclose(entry.second, mine.at(name), 0.0, 1e-5), name);
  }
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
  check_adamw_step(mlp, path, randn({5, 6}));
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
  check_adamw_step(net, path, x);
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
  check_adamw_step(vit, path, x);
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
  check_adamw_step(gpt, path, randint(0, 11, {2, 7}));
}

TEST_CASE("onnx export: an encoder-decoder Transformer with causal and padding masks, at other lengths") {
  manual_seed(5);
  nn::Transformer tr(nn::TransformerOptions{.d_model = 16,
                                            .nhead = 2,
                                            .num_encoder_layers = 1,
                                            .num_decoder_layers = 1,
                                            .dim_feedforward = 24,
                                            .batch_first = true});
  // src (N, S, E), tgt (N, T, E); source positions whose first feature is negative are padding, a mask
  // computed from the input, so the graph must compute it too.
  auto fwd = [&](const std::vector<Tensor>& in) {
    const Tensor pad = lt(in[0].select(2, 0), -1.0);
    return std::vector<Tensor>{tr.forward(in[0], in[1], Tensor(), pad,
                                          {.tgt_mask = Tensor(),
                                           .memory_mask = Tensor(),
                                           .tgt_key_padding_mask = Tensor(),
                                           .memory_key_padding_mask = pad,
                                           .tgt_is_causal = true})};
  };
  const std::string path = temp_path("transformer.onnx");
  onnx::export_model(
      tr, fwd, {randn({2, 5, 16}), randn({2, 4, 16})}, path,
      {.input_names = {"src", "tgt"},
       .dynamic_axes = {{"src", {{0, "batch"}, {1, "source"}}}, {"tgt", {{0, "batch"}, {1, "target"}}}}});
  tr.eval();
  for (auto [n, s_len, t_len] : {std::tuple<int64_t, int64_t, int64_t>{2, 5, 4}, {3, 7, 2}, {1, 3, 6}}) {
    // (tgt has its own batch axis only through src's: the two share the name "batch".)
    const Tensor src = randn({n, s_len, 16}), tgt = randn({n, t_len, 16});
    NoGradGuard ng;
    const Tensor want = fwd({src, tgt})[0];
    const auto got = test::run_onnxruntime(path, {{"src", src}, {"tgt", tgt}});
    REQUIRE(got.at("output").shape() == want.shape());
    CHECK(allclose(got.at("output"), want, 0.0, 1e-5));
    const Tensor mine = onnx::load(path)->forward({src, tgt})[0];
    CHECK(allclose(mine, want, 0.0, 1e-5));
  }
}

TEST_CASE("onnx export: GRU and LSTM are written as their cells unrolled over the sequence") {
  manual_seed(6);
  nn::GRU gru(5, 6, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  nn::LSTM lstm(5, 4, {.batch_first = true});
  const std::string gru_path = temp_path("gru.onnx"), lstm_path = temp_path("lstm.onnx");
  onnx::export_model(gru, randn({2, 3, 5}), gru_path, kDynamicBatch);
  onnx::export_model(lstm, randn({2, 3, 5}), lstm_path, kDynamicBatch);
  const Tensor x = randn({4, 3, 5});
  check_onnxruntime(gru_path, x, eval_forward(gru, x));
  check_onnxruntime(lstm_path, x, eval_forward(lstm, x));
  check_adamw_step(gru, gru_path, x);
  // The unrolled graph has one cell per step: a dynamic sequence length is refused, not written wrong.
  CHECK_THROWS_WITH_AS(onnx::export_model(gru, randn({2, 3, 5}), temp_path("gru_seq.onnx"),
                                          {.dynamic_axes = {{"input", {{1, "sequence"}}}}}),
                       doctest::Contains("runs different ops"), onnx::Unsupported);
}

namespace {
// An op declared outside the library, as docs/CUSTOM_OPS.md does it: x^3 computed by its body, written to
// ONNX by its own lowering.
void lower_cube(lowering::Graph& g, const lowering::Call& c) {
  const std::string x = g.value(c.tensor(0));
  g.bind(c.outputs[0], g.node("Mul", {x, g.node("Mul", {x, x})[0]})[0]);
}
constexpr OpDef cube_op{.name = "test_onnx_cube", .onnx = lower_cube};
EMBER_REGISTER_OP(cube_op);
Tensor cube(const Tensor& x) {
  return op::call<cube_op>([](const Tensor& t) { return mul(t, mul(t, t)); }, x);
}
}  // namespace

TEST_CASE("onnx export: an op declared outside the library exports through its own lowering") {
  nn::Linear lin(4, 4);
  auto fwd = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{cube(lin.forward(in[0]))}; };
  const std::string path = temp_path("cube.onnx");
  onnx::export_model(lin, fwd, {randn({2, 4})}, path, kDynamicBatch);
  const Tensor x = randn({3, 4});
  NoGradGuard ng;
  check_onnxruntime(path, x, fwd({x})[0]);
}

TEST_CASE("onnx export: floor, remainder and fmod, numbers and tensors of either sign as divisors") {
  manual_seed(8);
  nn::Linear lin(4, 4);
  auto fwd = [&](const std::vector<Tensor>& in) {
    const Tensor y = mul(lin.forward(in[0]), 3.0);
    const Tensor pos = add(lin.bias, 2.0), neg = sub(lin.bias, 2.0);  // divisors (4) of both signs
    return std::vector<Tensor>{add(add(add(floor(y), remainder(y, 0.75)), add(remainder(y, -0.6), fmod(y, -0.6))),
                                   add(add(remainder(y, pos), remainder(y, neg)), fmod(y, neg)))};
  };
  const std::string path = temp_path("rounding.onnx");
  onnx::export_model(lin, fwd, {randn({2, 4})}, path, kDynamicBatch);
  const Tensor x = randn({5, 4});
  NoGradGuard ng;
  check_onnxruntime(path, x, fwd({x})[0]);
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
  // A (B, 3) tensor made from host values, which export cannot follow: right at one batch size only.
  auto fwd = [&](const std::vector<Tensor>& in) {
    const int64_t B = in[0].size(0);
    return std::vector<Tensor>{add(lin.forward(in[0]), from_vector(std::vector<float>(B * 3, 1.0f), {B, 3}))};
  };
  CHECK_THROWS_WITH_AS(onnx::export_model(lin, fwd, {randn({4, 3})}, path, kDynamicBatch),
                       doctest::Contains("changes with the dynamic axes"), onnx::Unsupported);
  CHECK_FALSE(fs::exists(path));
  // Without the dynamic axis the same constant is fine.
  onnx::export_model(lin, fwd, {randn({4, 3})}, path);
  CHECK(fs::exists(path));
}
