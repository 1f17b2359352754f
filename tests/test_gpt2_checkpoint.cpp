// GPT-2 checkpoints (nn/gpt2_checkpoint.h) against tools/gpt2_reference.py,
// a PyTorch GPT-2 written from the published architecture: its random
// 2-layer, 2-head, width-32 model (vocabulary 96, context 16) in Hugging
// Face's layout (tests/fixtures/gpt2_tiny/config.json + model.safetensors,
// with the attn.bias / masked_bias buffers) and in llm.c's (llmc.bin, the
// vocabulary padded to 128), and its float64 logits, loss and greedy tokens.
// Also: the transformer. prefix and a tied lm_head, saving and loading back,
// and broken files.
#include <doctest/doctest.h>
#include <ember/ember.h>
#include <unistd.h>

#include "test_util.h"

#include <fstream>
#include <sstream>

using namespace ember;

namespace {

const std::string kDir = std::string(EMBER_FIXTURE_DIR) + "/gpt2_tiny";

StateDict reference() { return load_safetensors(kDir + "/reference.safetensors"); }

std::vector<int64_t> int_values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + c.numel());
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.to(DType::Float64), b.to(DType::Float64)))).item<double>();
}

// Both state dicts hold the same names, shapes and values, bit for bit.
void check_same(const StateDict& a, const StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second.shape() == b[i].second.shape());
    CHECK_MESSAGE(max_abs_diff(a[i].second, b[i].second) == 0, a[i].first);
  }
}

std::filesystem::path scratch(const std::string& name) {
  return test::scratch_path("ember_gpt2_checkpoint_" + std::to_string(getpid()), name);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("gpt2 checkpoint: Hugging Face directory, logits and loss against the PyTorch reference") {
  const nn::GPTConfig cfg = nn::gpt2_config_from_json(kDir + "/config.json");
  CHECK(cfg.n_layer == 2);
  CHECK(cfg.n_head == 2);
  CHECK(cfg.n_embd == 32);
  CHECK(cfg.vocab_size == 96);
  CHECK(cfg.block_size == 16);
  CHECK(cfg.gelu == GeluApproximation::Tanh);  // gelu_new
  CHECK(cfg.layer_norm_eps == 1e-5);
  auto model = nn::load_gpt2_hf(kDir);
  model->eval();
  const StateDict ref = reference();
  const Tensor idx = test::fixture_tensor(ref, "idx"), targets = test::fixture_tensor(ref, "targets");
  const double err32 = max_abs_diff(model->forward(idx), test::fixture_tensor(ref, "logits"));
  const double loss_err = max_abs_diff(model->loss(idx, targets), test::fixture_tensor(ref, "loss").reshape({}));
  MESSAGE("float32 logits: max |error| ", err32, ", loss error ", loss_err);
  CHECK(err32 < 1e-4);
  CHECK(loss_err < 1e-4);
  // In float64 the model computes what the reference computes from the same float32 weights.
  model->to(DType::Float64);
  const double err64 = max_abs_diff(model->forward(idx), test::fixture_tensor(ref, "logits"));
  MESSAGE("float64 logits: max |error| ", err64);
  CHECK(err64 < 1e-10);
}

TEST_CASE("gpt2 checkpoint: llm.c's file holds the same model") {
  auto hf = nn::load_gpt2_hf(kDir);
  auto llmc = nn::load_gpt2_llmc(kDir + "/llmc.bin");
  CHECK(llmc->cfg.vocab_size == 96);  // the padding rows to 128 cut
  CHECK(llmc->cfg.gelu == GeluApproximation::Tanh);
  check_same(hf->state_dict(), llmc->state_dict());
  llmc->eval();
  const StateDict ref = reference();
  CHECK(max_abs_diff(llmc->forward(test::fixture_tensor(ref, "idx")), test::fixture_tensor(ref, "logits")) < 1e-4);
}

TEST_CASE("gpt2 checkpoint: greedy generation with and without the KV cache equals the reference's") {
  auto model = nn::load_gpt2_hf(kDir);
  const StateDict ref = reference();
  const std::vector<int64_t> prompt = int_values(test::fixture_tensor(ref, "prompt"));
  const std::vector<int64_t> want = int_values(test::fixture_tensor(ref, "greedy"));  // 32 tokens, past the context
  for (const int64_t n : {int64_t{16}, static_cast<int64_t>(want.size())}) {
    nn::SampleOptions cached{.temperature = 0.0, .use_cache = true}, uncached{.temperature = 0.0, .use_cache = false};
    const std::vector<int64_t> a = model->generate(prompt, n, cached), b = model->generate(prompt, n, uncached);
    CHECK(a == b);
    CHECK(std::vector<int64_t>(a.begin() + static_cast<int64_t>(prompt.size()), a.end()) ==
          std::vector<int64_t>(want.begin(), want.begin() + n));
  }
}

TEST_CASE("gpt2 checkpoint: keys under transformer., a tied lm_head, saved and loaded back") {
  const StateDict original = nn::load_gpt2_hf(kDir)->state_dict();
  // GPT2LMHeadModel's names: transformer.* and lm_head.weight (= wte).
  StateDict prefixed;
  Tensor wte;
  for (const auto& [name, t] : load_safetensors(kDir + "/model.safetensors")) {
    prefixed.emplace_back("transformer." + name, t);
    if (name == "wte.weight") wte = t;
  }
  prefixed.emplace_back("lm_head.weight", wte);
  const auto dir = scratch("prefixed");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kDir + "/config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  save_safetensors((dir / "model.safetensors").string(), prefixed);
  check_same(original, nn::load_gpt2_hf(dir.string())->state_dict());

  // An lm_head that is not wte is refused.
  prefixed.back().second = add(wte, 1.0);
  save_safetensors((dir / "model.safetensors").string(), prefixed);
  CHECK(test::contains(test::error_of<IOError>([&] { nn::load_gpt2_hf(dir.string()); }),
                       "'lm_head.weight' differs from 'wte.weight'"));

  // Saved in Hugging Face's layout: Conv1D weights (in, out), no prefix; loading gives the same tensors.
  const auto saved = scratch("saved");
  nn::save_gpt2_hf(*nn::load_gpt2_hf(kDir), saved.string());
  const StateDict file = load_safetensors((saved / "model.safetensors").string());
  CHECK(test::fixture_tensor(file, "h.0.attn.c_attn.weight").shape() == Shape{32, 96});
  CHECK(test::fixture_tensor(file, "h.1.mlp.c_proj.weight").shape() == Shape{128, 32});
  CHECK(max_abs_diff(test::fixture_tensor(file, "h.1.mlp.c_fc.weight"),
                     test::fixture_tensor(load_safetensors(kDir + "/model.safetensors"), "h.1.mlp.c_fc.weight")) == 0);
  const auto reloaded = nn::load_gpt2_hf(saved.string());
  check_same(original, reloaded->state_dict());
  CHECK(reloaded->cfg.gelu == GeluApproximation::Tanh);
  CHECK(reloaded->cfg.block_size == 16);
  CHECK(test::contains(slurp((saved / "config.json").string()), "\"activation_function\": \"gelu_new\""));
}

TEST_CASE(
    "gpt2 checkpoint: a loaded model's untransposed weights are the mapped file, and training does not write it") {
  const auto dir = scratch("mapped");
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(kDir + "/" + f, dir / f, std::filesystem::copy_options::overwrite_existing);
  const std::string weights = (dir / "model.safetensors").string();
  const StateDict file = load_safetensors(weights);
  const size_t before = memory_stats(kCPU).allocated;
  const auto model = nn::load_gpt2_hf(dir.string());
  const size_t held = memory_stats(kCPU).allocated - before;
  // Held by Ember's allocator: the transposed Conv1D weights alone; wte, wpe,
  // the norms and the biases are the file's pages.
  size_t params = 0, conv1d = 0;
  for (const auto& [name, t] : model->named_parameters()) {
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    params += bytes;
    if (t.dim() == 2 && name != "wte.weight" && name != "wpe.weight") conv1d += bytes;
  }
  CHECK(conv1d > 0);
  CHECK(held < params);
  CHECK(held <= conv1d + 4096);
  // The same values as a second load, and an in-place update (an optimizer
  // step) leaves the file as it was.
  check_same(nn::load_gpt2_hf(kDir)->state_dict(), model->state_dict());
  {
    NoGradGuard ng;
    for (Tensor& p : model->parameters()) add_(p, 1.0);
  }
  CHECK(max_abs_diff(model->wte->weight, add(test::fixture_tensor(file, "wte.weight"), 1.0)) == 0);
  check_same(file, load_safetensors(weights));
}

TEST_CASE("gpt2 checkpoint: llm.c's weights are the mapped file, and training does not write it") {
  const auto dir = scratch("mapped_llmc");
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "llmc.bin").string();
  std::filesystem::copy_file(kDir + "/llmc.bin", path, std::filesystem::copy_options::overwrite_existing);
  const std::string bytes = slurp(path);
  const size_t before = memory_stats(kCPU).allocated;
  const auto model = nn::load_gpt2_llmc(path);
  size_t params = 0;
  for (const Tensor& t : model->parameters()) params += static_cast<size_t>(t.numel()) * t.element_size();
  // Every parameter is a view of the file's pages: Ember's allocator holds
  // none of them (llm.c stores each weight (out, in), as nn::Linear does).
  CHECK(memory_stats(kCPU).allocated - before < params / 8);
  check_same(nn::load_gpt2_hf(kDir)->state_dict(), model->state_dict());
  {
    NoGradGuard ng;
    for (Tensor& p : model->parameters()) add_(p, 1.0);
  }
  CHECK(slurp(path) == bytes);
  CHECK(max_abs_diff(model->wte->weight, add(nn::load_gpt2_llmc(path)->wte->weight, 1.0)) == 0);
}

TEST_CASE("gpt2 checkpoint: broken files end in one error naming the file and the tensor") {
  const auto dir = scratch("broken");
  std::filesystem::create_directories(dir);
  const std::string config = slurp(kDir + "/config.json"), weights = slurp(kDir + "/model.safetensors");
  const auto load_error = [&] { return test::error_of<IOError>([&] { nn::load_gpt2_hf(dir.string()); }); };

  // A config that disagrees with the tensors.
  std::string wide = config;
  wide.replace(wide.find("\"n_embd\": 32"), 12, "\"n_embd\": 48");
  write(dir / "config.json", wide);
  write(dir / "model.safetensors", weights);
  std::string e = load_error();
  CHECK(test::contains(e, "model.safetensors"));
  CHECK(test::contains(e, "'wte.weight' has shape [96, 32] where the config gives [96, 48]"));
  std::string layers = config;
  layers.replace(layers.find("\"n_layer\": 2"), 12, "\"n_layer\": 3");
  write(dir / "config.json", layers);
  CHECK(test::contains(load_error(), "no tensor 'h.2.ln_1.weight'"));
  std::string one_layer = config;
  one_layer.replace(one_layer.find("\"n_layer\": 2"), 12, "\"n_layer\": 1");
  write(dir / "config.json", one_layer);
  CHECK(test::contains(load_error(), "unexpected tensor 'h.1."));
  std::string act = config;
  act.replace(act.find("gelu_new"), 8, "swish");
  write(dir / "config.json", act);
  CHECK(test::contains(load_error(), "activation_function \"swish\""));

  // A truncated safetensors file.
  write(dir / "config.json", config);
  write(dir / "model.safetensors", weights.substr(0, weights.size() - 1000));
  e = load_error();
  CHECK(test::contains(e, "model.safetensors"));
  std::filesystem::remove(dir / "config.json");
  CHECK(test::contains(load_error(), "config.json"));

  // llm.c: a truncated file names the tensor it ends in; a wrong magic or version.
  const std::string llmc = slurp(kDir + "/llmc.bin");
  const auto llmc_error = [&](const std::string& bytes) {
    write(dir / "llmc.bin", bytes);
    return test::error_of<IOError>([&] { nn::load_gpt2_llmc((dir / "llmc.bin").string()); });
  };
  e = llmc_error(llmc.substr(0, llmc.size() - 4));
  CHECK(test::contains(e, "llmc.bin"));
  CHECK(test::contains(e, "truncated in tensor 'ln_f.bias'"));
  CHECK(test::contains(llmc_error(llmc.substr(0, 2048)), "truncated in tensor 'wte'"));
  CHECK(test::contains(llmc_error(llmc.substr(0, 100)), "shorter than its 1024-byte header"));
  CHECK(test::contains(llmc_error(llmc + "xxxx"), "4 bytes after the last tensor"));
  std::string bad = llmc;
  bad[0] = 'X';
  CHECK(test::contains(llmc_error(bad), "bad magic"));
  bad = llmc;
  bad[4] = 5;
  CHECK(test::contains(llmc_error(bad), "version 5"));
}
