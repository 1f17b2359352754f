// The GPT demo with GPT-2's byte-level BPE tokenizer (--tokenizer gpt2, the
// default with --hf or --init): fine-tuning a Hugging Face GPT-2 directory or
// a freshly initialised GPT-2 shape on --data, and sampling from a Hugging
// Face directory with the KV cache. Apart from the character-level path in
// main.cpp, whose runs and figures it leaves as they were: its model comes
// from nn/gpt2_checkpoint.h rather than a model.safetensors with a character
// vocabulary, and its checkpoint (at --stop-after) records the model's shape
// and where it started instead of a vocabulary.
#pragma once

#include "config.h"

namespace gpt {

/// The "format" in a GPT-2 checkpoint's metadata.
inline constexpr const char* kGpt2Format = "ember gpt2";

/// Whether the file is a checkpoint of this path (its safetensors header
/// alone is read; false for anything else, which the reader then refuses).
bool is_gpt2_checkpoint(const std::string& path);

/// Fine-tunes (or trains from --init) on the corpus; writes metrics.json,
/// loss.png, samples.txt and hf/ (config.json, model.safetensors and the
/// tokenizer's two files as vocab.json + merges.txt) into --out; with
/// --stop-after, checkpoint.safetensors, which --resume continues exactly
/// (model, AdamW, schedule, the batches' position, the curves).
int train_gpt2(const Config& c, const CLI::App& app);

/// --hf DIR --generate: the prompt and --max-new-tokens more on stdout, the
/// speed on stderr.
int generate_gpt2(const Config& c);

/// nanoGPT's estimate_loss: the mean loss of eval_iters random batches of a
/// split, drawn from a generator of their own (the same windows at every
/// evaluation, and a resumed run draws what the uninterrupted one did).
double estimate_loss(nn::GPT& m, const std::vector<int64_t>& tokens, const Config& c, uint64_t salt);

/// A sample for metrics.json: bytes that are not UTF-8 (a corpus in Latin-1,
/// a BPE sample cut inside a character), which JSON cannot carry, become
/// U+FFFD; samples.txt keeps the bytes.
nlohmann::json utf8_for_json(const std::string& s);

}  // namespace gpt
