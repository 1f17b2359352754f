// GPT-2 checkpoints (nn/gpt2_checkpoint.h): Hugging Face's config.json +
// model.safetensors both ways, and llm.c's float32 file. The expected tensors
// and shapes come from the config alone, so every mismatch is found before a
// model is built and named with the file and the tensor.
#include <ember/core/autograd.h>
#include <ember/core/error.h>
#include <ember/core/file_io.h>
#include <ember/core/safetensors.h>
#include <ember/nn/gpt2_checkpoint.h>

#include <ember/core/mapped_file.h>
#include <ember/nn/init.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/reduce.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

namespace ember::nn {
namespace {

// One tensor of nn::GPT: its name, shape, and whether GPT-2's file holds it
// as a Conv1D weight, i.e. transposed.
struct Expected {
  std::string name;
  Shape shape;
  bool conv1d;
};

std::vector<Expected> expected_tensors(const GPTConfig& c) {
  const int64_t E = c.n_embd;
  std::vector<Expected> out = {{"wte.weight", {c.vocab_size, E}, false}, {"wpe.weight", {c.block_size, E}, false}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    const std::vector<Expected> layer = {{h + "ln_1.weight", {E}, false},
                                         {h + "ln_1.bias", {E}, false},
                                         {h + "attn.c_attn.weight", {3 * E, E}, true},
                                         {h + "attn.c_attn.bias", {3 * E}, false},
                                         {h + "attn.c_proj.weight", {E, E}, true},
                                         {h + "attn.c_proj.bias", {E}, false},
                                         {h + "ln_2.weight", {E}, false},
                                         {h + "ln_2.bias", {E}, false},
                                         {h + "mlp.c_fc.weight", {4 * E, E}, true},
                                         {h + "mlp.c_fc.bias", {4 * E}, false},
                                         {h + "mlp.c_proj.weight", {E, 4 * E}, true},
                                         {h + "mlp.c_proj.bias", {E}, false}};
    out.insert(out.end(), layer.begin(), layer.end());
  }
  out.push_back({"ln_f.weight", {E}, false});
  out.push_back({"ln_f.bias", {E}, false});
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Shape transposed(const Shape& s) { return Shape{s[1], s[0]}; }

}  // namespace

GPTConfig gpt2_config_from_json(const std::string& path) {
  const std::string text = read_file(path, "GPT-2 config");
  GPTConfig c;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    EMBER_CHECK(j.is_object(), IOError, "GPT-2 config '", path, "': not a JSON object");
    const auto need = [&](const char* key) {
      EMBER_CHECK(j.contains(key), IOError, "GPT-2 config '", path, "': no \"", key, "\"");
      return j.at(key).get<int64_t>();
    };
    c.n_layer = need("n_layer");
    c.n_head = need("n_head");
    c.n_embd = need("n_embd");
    c.vocab_size = j.value("vocab_size", int64_t{50257});
    c.block_size = j.contains("n_positions") ? j.at("n_positions").get<int64_t>() : need("n_ctx");
    c.layer_norm_eps = j.value("layer_norm_epsilon", 1e-5);
    c.dropout = j.value("resid_pdrop", 0.1);
    c.bias = true;
    // transformers' ACT2FN: gelu_new (GPT-2's own), gelu_pytorch_tanh and
    // gelu_fast are the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
    // gelu is the exact x Phi(x).
    const std::string act = j.value("activation_function", std::string("gelu_new"));
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") {
      c.gelu = GeluApproximation::Tanh;
    } else if (act == "gelu") {
      c.gelu = GeluApproximation::None;
    } else {
      throw IOError("GPT-2 config '" + path + "': activation_function \"" + act +
                    "\" (nn::GPT has gelu_new, gelu_pytorch_tanh, gelu_fast and gelu)");
    }
    EMBER_CHECK(!j.contains("n_inner") || j.at("n_inner").is_null() || j.at("n_inner").get<int64_t>() == 4 * c.n_embd,
                IOError, "GPT-2 config '", path, "': n_inner ", j.at("n_inner").dump(),
                " (nn::GPT's MLP is 4 n_embd = ", 4 * c.n_embd, ")");
    EMBER_CHECK(j.value("scale_attn_weights", true) && !j.value("scale_attn_by_inverse_layer_idx", false) &&
                    !j.value("reorder_and_upcast_attn", false),
                IOError, "GPT-2 config '", path,
                "': attention scaling other than GPT-2's 1/sqrt(head size) (scale_attn_weights, "
                "scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn)");
    EMBER_CHECK(j.value("tie_word_embeddings", true), IOError, "GPT-2 config '", path,
                "': tie_word_embeddings is false (nn::GPT's head is wte)");
  } catch (const nlohmann::json::exception& e) {
    throw IOError("GPT-2 config '" + path + "': " + e.what());
  }
  EMBER_CHECK(c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 && c.vocab_size > 0 && c.block_size > 0 &&
                  c.n_embd % c.n_head == 0 && c.layer_norm_eps > 0 && c.dropout >= 0 && c.dropout < 1,
              IOError, "GPT-2 config '", path, "': sizes n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_embd ",
              c.n_embd, ", vocab_size ", c.vocab_size, ", n_positions ", c.block_size, " are not a GPT-2");
  return c;
}

namespace {

// gpt2_state_dict_from_hf's checks and names, with each Conv1D weight as a
// transposed view of the file's tensor (materialize: copied contiguous).
StateDict hf_tensors(const StateDict& hf, const GPTConfig& cfg, const std::string& file, bool materialize) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [key, t] : hf) {
    const std::string name = key.rfind("transformer.", 0) == 0 ? key.substr(12) : key;
    // The causal mask buffers of older transformers versions: not weights.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    EMBER_CHECK(by_name.emplace(name, t).second, IOError, "GPT-2 checkpoint '", file, "': tensor '", name,
                "' appears twice (with and without the transformer. prefix)");
  }
  StateDict out;
  for (const Expected& e : expected_tensors(cfg)) {
    const auto it = by_name.find(e.name);
    EMBER_CHECK(it != by_name.end(), IOError, "GPT-2 checkpoint '", file, "': no tensor '", e.name, "'");
    const Tensor& t = it->second;
    const Shape want = e.conv1d ? transposed(e.shape) : e.shape;
    EMBER_CHECK(t.shape() == want, IOError, "GPT-2 checkpoint '", file, "': tensor '", e.name, "' has shape ",
                t.shape().str(), " where the config gives ", want.str(), e.conv1d ? " (Conv1D: in, out)" : "");
    EMBER_CHECK(is_floating(t.dtype()), IOError, "GPT-2 checkpoint '", file, "': tensor '", e.name, "' is ",
                dtype_name(t.dtype()), ", not floating point");
    out.emplace_back(e.name, !e.conv1d ? t : materialize ? t.transpose(0, 1).contiguous() : t.transpose(0, 1));
    by_name.erase(it);
  }
  // The tied head, when the file spells it out, must be wte itself.
  if (const auto it = by_name.find("lm_head.weight"); it != by_name.end()) {
    const Tensor& wte = out.front().second;
    const bool same =
        it->second.shape() == wte.shape() &&
        ember::max(ember::abs(sub(it->second.to(DType::Float64), wte.to(DType::Float64)))).item<double>() == 0;
    EMBER_CHECK(same, IOError, "GPT-2 checkpoint '", file,
                "': tensor 'lm_head.weight' differs from 'wte.weight' (nn::GPT ties the head to wte)");
    by_name.erase(it);
  }
  EMBER_CHECK(by_name.empty(), IOError, "GPT-2 checkpoint '", file, "': unexpected tensor '",
              by_name.empty() ? "" : by_name.begin()->first, "' (", by_name.size(), " tensors not in a GPT-2 of ",
              cfg.n_layer, " layers)");
  return out;
}

// Each tensor of sd into the model's parameter of that name, one at a time,
// each dropped as soon as it is in, so that a mapped original's pages go
// back before the next is read. A contiguous tensor of the parameter's dtype
// (wte, wpe, the norms and biases when they are mapped) becomes the
// parameter's storage, swapped under its handle as Module::to(dtype) swaps
// them: no copy, and the file's pages are read when first used. A
// transposed Conv1D weight, or another dtype, is copied (converted) in.
// A GPT whose parameters are about to be replaced by a file's: not
// initialised, so their pages are never touched (no random copy of a large
// model is made first). adopt_state then checks that every one is replaced.
std::shared_ptr<GPT> uninitialised_gpt(const GPTConfig& cfg) {
  init::SkipInitGuard skip;
  return std::make_shared<GPT>(cfg);
}

void adopt_state(GPT& model, StateDict& sd, const std::string& file) {
  std::map<std::string, Tensor> own;
  for (const auto& [name, t] : model.named_parameters()) own.emplace(name, t);
  NoGradGuard no_grad;
  for (auto& [name, t] : sd) {
    const auto it = own.find(name);
    EMBER_CHECK(it != own.end() && it->second.shape() == t.shape(), IOError, "GPT-2 checkpoint '", file, "': tensor '",
                name, "' has no place of shape ", t.shape().str(), " in the model");
    Tensor dst = it->second;
    if (t.dtype() == dst.dtype() && t.device() == dst.device() && t.is_contiguous()) {
      TensorImpl* impl = dst.unsafe_impl();
      impl->storage = t.storage();
      impl->strides = t.strides();
      impl->offset = t.offset();
    } else {
      dst.copy_(t);
    }
    t = Tensor();
    own.erase(it);
  }
  EMBER_CHECK(own.empty(), IOError, "GPT-2 checkpoint '", file, "': no tensor for the model's '",
              own.empty() ? "" : own.begin()->first, "'");
}

}  // namespace

StateDict gpt2_state_dict_from_hf(const StateDict& hf, const GPTConfig& cfg, const std::string& file) {
  return hf_tensors(hf, cfg, file, true);
}

std::shared_ptr<GPT> load_gpt2_hf(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string config = (fs::path(dir) / "config.json").string();
  const std::string weights = (fs::path(dir) / "model.safetensors").string();
  const GPTConfig cfg = gpt2_config_from_json(config);
  // The file mapped (core/safetensors.h), and the model's tensors as views of
  // it, Conv1D's transposed: nothing is read or copied yet.
  StateDict sd = hf_tensors(map_safetensors(weights), cfg, weights, false);
  auto model = uninitialised_gpt(cfg);
  adopt_state(*model, sd, weights);
  // The blocks the parameters had before they took the file's storage go
  // back to the system, not to the allocator's cache.
  empty_cache(kCPU);
  return model;
}

void save_gpt2_hf(const GPT& model, const std::string& dir) {
  const GPTConfig& c = model.cfg;
  EMBER_CHECK(c.bias, ValueError, "save_gpt2_hf: GPT-2's layout has biases; this model has bias = false");
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  std::map<std::string, bool> conv1d;
  for (const Expected& e : expected_tensors(c)) conv1d[e.name] = e.conv1d;
  StateDict out;
  for (const auto& [name, t] : model.state_dict()) {
    const auto it = conv1d.find(name);
    EMBER_CHECK(it != conv1d.end(), ValueError, "save_gpt2_hf: tensor '", name, "' has no place in GPT-2's layout");
    out.emplace_back(name, it->second ? t.transpose(0, 1).contiguous() : t.contiguous());
  }
  nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
                      {"model_type", "gpt2"},
                      {"vocab_size", c.vocab_size},
                      {"n_positions", c.block_size},
                      {"n_ctx", c.block_size},
                      {"n_embd", c.n_embd},
                      {"n_layer", c.n_layer},
                      {"n_head", c.n_head},
                      {"n_inner", nullptr},
                      {"activation_function", c.gelu == GeluApproximation::Tanh ? "gelu_new" : "gelu"},
                      {"layer_norm_epsilon", c.layer_norm_eps},
                      {"resid_pdrop", c.dropout},
                      {"embd_pdrop", c.dropout},
                      {"attn_pdrop", c.dropout},
                      {"initializer_range", 0.02},
                      {"tie_word_embeddings", true}};
  constexpr int64_t kEndOfText = 50256;  // GPT-2's <|endoftext|>, its bos and eos
  if (c.vocab_size > kEndOfText) j["bos_token_id"] = j["eos_token_id"] = kEndOfText;
  save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(), j.dump(2) + "\n");
}

std::shared_ptr<GPT> load_gpt2_llmc(const std::string& path) {
  // The weights are mapped, not read: float32 at 4-byte-aligned offsets.
  const MappedFile file(path, "llm.c checkpoint");
  const uint64_t size = file.size();
  constexpr size_t kHeader = 256 * sizeof(int32_t);
  EMBER_CHECK(size >= kHeader, IOError, "llm.c checkpoint '", path, "': ", size,
              " bytes, shorter than its 1024-byte header");
  int32_t h[256];
  file.read(0, h, kHeader);
  EMBER_CHECK(h[0] == 20240326, IOError, "llm.c checkpoint '", path, "': bad magic ", h[0],
              " (llm.c's GPT-2 checkpoints start with 20240326)");
  EMBER_CHECK(h[1] == 3, IOError, "llm.c checkpoint '", path, "': version ", h[1],
              " (only version 3, float32, is read)");
  GPTConfig c;
  c.block_size = h[2], c.vocab_size = h[3], c.n_layer = h[4], c.n_head = h[5], c.n_embd = h[6];
  const int64_t Vp = h[7];
  c.gelu = GeluApproximation::Tanh;  // llm.c's gelu_forward
  c.dropout = 0.0;
  c.layer_norm_eps = 1e-5;
  EMBER_CHECK(c.block_size > 0 && c.vocab_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 &&
                  c.n_embd % c.n_head == 0 && Vp >= c.vocab_size,
              IOError, "llm.c checkpoint '", path, "': header sizes max_seq_len ", c.block_size, ", vocab_size ",
              c.vocab_size, ", num_layers ", c.n_layer, ", num_heads ", c.n_head, ", channels ", c.n_embd,
              ", padded_vocab_size ", Vp, " are not a GPT-2");
  const int64_t L = c.n_layer, C = c.n_embd;
  // The 16 arrays of fill_in_parameter_sizes, in file order: name, shape.
  const std::vector<std::pair<std::string, Shape>> arrays = {{"wte", {Vp, C}},
                                                             {"wpe", {c.block_size, C}},
                                                             {"ln_1.weight", {L, C}},
                                                             {"ln_1.bias", {L, C}},
                                                             {"attn.c_attn.weight", {L, 3 * C, C}},
                                                             {"attn.c_attn.bias", {L, 3 * C}},
                                                             {"attn.c_proj.weight", {L, C, C}},
                                                             {"attn.c_proj.bias", {L, C}},
                                                             {"ln_2.weight", {L, C}},
                                                             {"ln_2.bias", {L, C}},
                                                             {"mlp.c_fc.weight", {L, 4 * C, C}},
                                                             {"mlp.c_fc.bias", {L, 4 * C}},
                                                             {"mlp.c_proj.weight", {L, C, 4 * C}},
                                                             {"mlp.c_proj.bias", {L, C}},
                                                             {"ln_f.weight", {C}},
                                                             {"ln_f.bias", {C}}};
  std::map<std::string, uint64_t> at;  // each array's byte offset
  uint64_t offset = kHeader;
  for (const auto& [name, shape] : arrays) {
    const uint64_t n = static_cast<uint64_t>(shape.numel()) * sizeof(float);
    EMBER_CHECK(offset + n <= size, IOError, "llm.c checkpoint '", path, "': truncated in tensor '", name, "' ",
                shape.str(), ", which needs bytes [", offset, ", ", offset + n, ") of a file of ", size);
    at[name] = offset;
    offset += n;
  }
  EMBER_CHECK(offset == size, IOError, "llm.c checkpoint '", path, "': ", size - offset,
              " bytes after the last tensor 'ln_f.bias' (the header's sizes do not match the file)");
  const auto mapped = [&](const std::string& array, uint64_t skip, const Shape& shape) {
    return file.tensor(at[array] + skip * sizeof(float), shape, DType::Float32);
  };
  StateDict sd;
  // wte's first vocab_size rows: the padding rows past them never score a real token.
  sd.emplace_back("wte.weight", mapped("wte", 0, Shape{c.vocab_size, C}));
  sd.emplace_back("wpe.weight", mapped("wpe", 0, Shape{c.block_size, C}));
  for (int64_t i = 0; i < L; ++i)
    for (size_t a = 2; a + 2 < arrays.size(); ++a) {
      const Shape& s = arrays[a].second;
      const Shape one = s.size() == 2 ? Shape{s[1]} : Shape{s[1], s[2]};
      sd.emplace_back("h." + std::to_string(i) + "." + arrays[a].first,
                      mapped(arrays[a].first, static_cast<uint64_t>(i * one.numel()), one));
    }
  sd.emplace_back("ln_f.weight", mapped("ln_f.weight", 0, Shape{C}));
  sd.emplace_back("ln_f.bias", mapped("ln_f.bias", 0, Shape{C}));
  auto model = uninitialised_gpt(c);
  adopt_state(*model, sd, path);
  empty_cache(kCPU);
  return model;
}

}  // namespace ember::nn
