// Character-level text data (nn/text_data.h): tokenizer, split, batches and
// the whole-split loss.
#include <ember/core/autograd.h>
#include <ember/core/error.h>
#include <ember/core/file_io.h>
#include <ember/nn/gpt.h>
#include <ember/nn/text_data.h>
#include <ember/ops/factory.h>
#include <ember/ops/loss.h>

#include <algorithm>
#include <cstdio>

namespace ember::nn {
namespace {

std::string show_byte(unsigned char c) {
  char b[16];
  if (c >= 32 && c < 127)
    std::snprintf(b, sizeof b, "'%c'", c);
  else
    std::snprintf(b, sizeof b, "byte 0x%02x", c);
  return b;
}

}  // namespace

CharTokenizer::CharTokenizer(std::string chars) : chars_(std::move(chars)) {
  EMBER_CHECK(!chars_.empty(), ValueError, "CharTokenizer: empty vocabulary");
  std::fill(std::begin(id_), std::end(id_), int16_t{-1});
  for (size_t i = 0; i < chars_.size(); ++i) {
    const auto c = static_cast<unsigned char>(chars_[i]);
    EMBER_CHECK(i == 0 || static_cast<unsigned char>(chars_[i - 1]) < c, ValueError,
                "CharTokenizer: the vocabulary must be distinct bytes in increasing order; ", show_byte(c),
                " at position ", i, " breaks it");
    id_[c] = static_cast<int16_t>(i);
  }
}

CharTokenizer CharTokenizer::from_text(const std::string& text) {
  bool seen[256] = {};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string chars;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) chars += static_cast<char>(c);
  return CharTokenizer(chars);
}

std::vector<int64_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    EMBER_CHECK(id_[c] >= 0, ValueError, "CharTokenizer: ", show_byte(c), " at position ", i,
                " is not in the vocabulary (", chars_.size(), " characters)");
    ids[i] = id_[c];
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    EMBER_CHECK(ids[i] >= 0 && ids[i] < size(), ValueError, "CharTokenizer: id ", ids[i], " at position ", i,
                " is outside the vocabulary of ", size());
    s[i] = chars_[static_cast<size_t>(ids[i])];
  }
  return s;
}

std::string read_text_file(const std::string& path) { return read_file(path, "text file"); }

TextDataset TextDataset::from_text(const std::string& text, int64_t context, const std::string& source,
                                   const CharTokenizer* vocab) {
  EMBER_CHECK(!text.empty(), ValueError, source, ": the text is empty");
  TextDataset d;
  d.tokenizer = vocab ? *vocab : CharTokenizer::from_text(text);
  std::vector<int64_t> ids;
  try {
    ids = d.tokenizer.encode(text);
  } catch (const ValueError& e) {
    throw ValueError(source + ": " + e.what());
  }
  const auto n = static_cast<int64_t>(0.9 * static_cast<double>(ids.size()));
  const int64_t val_n = static_cast<int64_t>(ids.size()) - n;
  EMBER_CHECK(n > context && val_n > context, ValueError, source, ": ", ids.size(),
              " characters are too few for a context of ", context, ": the training split (", n,
              ") and the validation split (the last 10%, ", val_n, ") each need at least ", context + 1);
  d.val.assign(ids.begin() + n, ids.end());
  ids.resize(static_cast<size_t>(n));
  d.train = std::move(ids);
  return d;
}

TextDataset TextDataset::from_file(const std::string& path, int64_t context, const CharTokenizer* vocab) {
  return from_text(read_text_file(path), context, path, vocab);
}

std::pair<Tensor, Tensor> random_batch(const std::vector<int64_t>& tokens, int64_t batch, int64_t context,
                                       Generator& gen) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  EMBER_CHECK(n > context, ValueError, "random_batch: ", n, " tokens for windows of ", context + 1);
  const std::vector<int64_t> off =
      randint(0, n - context, {batch}, TensorOptions(DType::Int64), &gen).to_vector<int64_t>();
  std::vector<int64_t> x(static_cast<size_t>(batch * context)), y(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* src = tokens.data() + off[static_cast<size_t>(b)];
    std::copy(src, src + context, x.begin() + b * context);
    std::copy(src + 1, src + 1 + context, y.begin() + b * context);
  }
  return {from_vector(x, {batch, context}), from_vector(y, {batch, context})};
}

double split_loss(GPT& model, const std::vector<int64_t>& tokens, int64_t context, int64_t batch) {
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;  // predictions
  EMBER_CHECK(n > 0 && context > 0 && batch > 0, ValueError, "split_loss: ", tokens.size(), " tokens, context ",
              context, ", batch ", batch);
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard ng;
  const Device dev = model.wte->weight.device();
  double total = 0;
  // Full windows, batch at a time.
  const int64_t full = n / context;
  for (int64_t w0 = 0; w0 < full; w0 += batch) {
    const int64_t b = std::min(batch, full - w0);
    const int64_t s = w0 * context, len = b * context;
    const std::vector<int64_t> x(tokens.begin() + s, tokens.begin() + s + len),
        y(tokens.begin() + s + 1, tokens.begin() + s + 1 + len);
    const Tensor l = model.loss(from_vector(x, {b, context}).to(dev), from_vector(y, {b, context}).to(dev));
    total += l.item<double>() * static_cast<double>(len);
  }
  if (const int64_t rest = n - full * context; rest > 0) {
    const int64_t s = full * context;
    const std::vector<int64_t> x(tokens.begin() + s, tokens.begin() + s + rest),
        y(tokens.begin() + s + 1, tokens.begin() + s + 1 + rest);
    const Tensor l = model.loss(from_vector(x, {1, rest}).to(dev), from_vector(y, {1, rest}).to(dev));
    total += l.item<double>() * static_cast<double>(rest);
  }
  model.train(was_training);
  return total / static_cast<double>(n);
}

}  // namespace ember::nn
