/// \file
/// GPT-2 checkpoints into nn::GPT: Hugging Face's directory (config.json +
/// model.safetensors), read and written, and llm.c's single-file format.
///
/// Hugging Face: keys with or without the "transformer." prefix (GPT2Model or
/// GPT2LMHeadModel); Conv1D stores each projection's weight (in, out), which
/// is transposed into nn::Linear's (out, in) on load and back on save; the
/// attn.bias / attn.masked_bias buffers (the causal mask) are skipped; the
/// head is tied to wte (an lm_head.weight, when the file holds one, must
/// equal wte.weight). config.json gives the sizes (n_layer, n_head, n_embd,
/// n_positions, vocab_size), layer_norm_epsilon, activation_function
/// ("gelu_new" is the tanh GELU) and resid_pdrop as the model's dropout.
///
/// llm.c (train_gpt2.c's gpt2_build_from_checkpoint): a header of 256 int32
/// (magic 20240326, version 3, max_seq_len, vocab_size, num_layers,
/// num_heads, channels, padded_vocab_size), then float32 tensors in the order
/// wte (Vp, C), wpe (T, C), then each per-layer kind stacked over the layers:
/// ln_1 w, b, c_attn w (L, 3C, C), b, attn.c_proj w (L, C, C), b, ln_2 w, b,
/// c_fc w (L, 4C, C), b, mlp.c_proj w (L, C, 4C), b; then ln_f w, b. Its
/// weights are already (out, in); the padded rows of wte past vocab_size are
/// cut. llm.c's GELU is the tanh form and its LayerNorm's eps 1e-5.
///
/// Every fault (a missing or malformed file, a config that disagrees with the
/// tensors, a truncated file, a wrong magic) is one IOError naming the file
/// and, where there is one, the tensor.
#pragma once

#include <ember/core/tensor.h>
#include <ember/nn/gpt.h>

#include <memory>
#include <string>

namespace ember::nn {

/// The GPTConfig of a Hugging Face GPT-2 config.json (bias on, the fields above).
GPTConfig gpt2_config_from_json(const std::string& config_json_path);

/// Hugging Face's tensors (as load_safetensors gives them) -> nn::GPT's state
/// dict for cfg, checked name by name and shape by shape; file names the
/// source in errors.
StateDict gpt2_state_dict_from_hf(const StateDict& hf, const GPTConfig& cfg, const std::string& file);

/// A GPT built from a Hugging Face GPT-2 directory, in float32. The file is
/// memory-mapped (map_safetensors, core/safetensors.h): the float32 tensors
/// that need no transposition (wte, wpe, the norms, the biases) become the
/// parameters' storage with no copy, as private copy-on-write mappings (an
/// update, fine-tuning, never writes the file); each Conv1D weight is copied
/// transposed straight from the mapping into its parameter, and its pages are
/// unmapped before the next is read. So a load holds one copy of the weights.
std::shared_ptr<GPT> load_gpt2_hf(const std::string& dir);

/// Writes model as a Hugging Face GPT-2 directory (created if missing):
/// config.json and model.safetensors with keys without a prefix and Conv1D's
/// (in, out) weights, which load_gpt2_hf and transformers' from_pretrained read.
void save_gpt2_hf(const GPT& model, const std::string& dir);

/// A GPT built from llm.c's checkpoint file (version 3, float32).
std::shared_ptr<GPT> load_gpt2_llmc(const std::string& path);

}  // namespace ember::nn
