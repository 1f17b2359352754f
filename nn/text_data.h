/// \file
/// Text for a character-level language model, as nanoGPT's
/// shakespeare_char: a byte-level tokenizer whose vocabulary is the sorted
/// distinct bytes of the corpus (saved with a model as a string), a dataset
/// that reads and encodes a file once and splits it (the last 10% for
/// validation), random windows drawn from a seeded generator (nanoGPT's
/// get_batch), and the exact loss over a whole split.
#pragma once

#include <ember/core/random.h>
#include <ember/core/tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ember::nn {

class GPT;

/// Bytes to ids and back. Id i is the byte chars()[i].
class CharTokenizer {
 public:
  CharTokenizer() = default;
  /// A vocabulary as saved (chars()): distinct bytes in increasing order;
  /// throws ValueError when it is empty, unsorted or repeats a byte.
  explicit CharTokenizer(std::string chars);
  /// The distinct bytes of text, sorted (nanoGPT's sorted(set(data))).
  static CharTokenizer from_text(const std::string& text);
  /// Throws ValueError naming the first byte outside the vocabulary and where it is.
  std::vector<int64_t> encode(const std::string& text) const;
  /// Throws ValueError for an id outside [0, size()).
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  const std::string& chars() const { return chars_; }  ///< the vocabulary, to save

 private:
  std::string chars_;
  int16_t id_[256] = {};  // byte -> id, -1 when absent
};

/// A corpus encoded once and split: train = the first 90% of the tokens
/// (nanoGPT's int(0.9 n)), val = the rest.
struct TextDataset {
  CharTokenizer tokenizer;
  std::vector<int64_t> train, val;

  /// Tokenizes text with a new vocabulary (or with vocab when given: a
  /// resumed model's) and splits it. Throws ValueError (naming source) when
  /// the text is empty or either split has no context + 1 tokens to make
  /// a window of.
  static TextDataset from_text(const std::string& text, int64_t context, const std::string& source,
                               const CharTokenizer* vocab = nullptr);
  /// Reads path whole (IOError naming it when it cannot be read, is a
  /// directory, or is not a regular file), then from_text.
  static TextDataset from_file(const std::string& path, int64_t context, const CharTokenizer* vocab = nullptr);
};

/// Inputs and targets (B, T) int64: B windows of tokens at offsets drawn
/// uniformly from [0, n - T) (nanoGPT's torch.randint(len(data) - T, (B,))),
/// targets shifted by one.
std::pair<Tensor, Tensor> random_batch(const std::vector<int64_t>& tokens, int64_t batch, int64_t context,
                                       Generator& gen);

/// The model's mean cross-entropy over every next-token prediction of
/// tokens: consecutive windows of context tokens (the last one shorter),
/// each predicting its tokens shifted by one, batch windows per forward; in
/// eval mode without a graph. Every token but the first is predicted once.
double split_loss(GPT& model, const std::vector<int64_t>& tokens, int64_t context, int64_t batch = 64);

/// Reads a whole file as bytes; IOError naming it when it is missing, a
/// directory, not regular (a FIFO), or unreadable.
std::string read_text_file(const std::string& path);

}  // namespace ember::nn
