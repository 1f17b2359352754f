// The seq2seq demo's data as tensors: the source and target vocabularies,
// a split encoded as padded index tensors, the gathering of one batch and
// the length-bucketed order of an epoch's batches. The examples themselves
// come from dates.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "dates.h"

namespace seq2seq_app {

using ember::Device;
using ember::Generator;
using ember::Tensor;

// Source characters: 0 = padding, then the alphabet. Target: padding, <bos>,
// <eos>, the digits and '-'.
constexpr int64_t kPad = 0, kBos = 1, kEos = 2;
inline const std::string kTargetChars = "0123456789-";
constexpr int64_t kTargetSteps = 11;  // "YYYY-MM-DD" and <eos>

struct Vocab {
  std::string alphabet = dates::alphabet();
  int64_t src_size() const { return static_cast<int64_t>(alphabet.size()) + 1; }
  int64_t tgt_size() const { return 3 + static_cast<int64_t>(kTargetChars.size()); }
  int64_t src_id(char c) const {
    const size_t k = alphabet.find(c);
    EMBER_CHECK(k != std::string::npos, ValueError, "seq2seq: character '", std::string(1, c),
                "' is not in the alphabet");
    return static_cast<int64_t>(k) + 1;
  }
  int64_t tgt_id(char c) const { return 3 + static_cast<int64_t>(kTargetChars.find(c)); }
  // Decoded tokens up to <eos> as text ('?' for <pad>/<bos>).
  std::string decode(const std::vector<int64_t>& toks) const {
    std::string s;
    for (int64_t t : toks) {
      if (t == kEos) break;
      s += t >= 3 ? kTargetChars[static_cast<size_t>(t - 3)] : '?';
    }
    return s;
  }
};

// One split as tensors: src (N, S) padded, lengths (N), decoder inputs
// <bos> y1..y10 and targets y1..y10 <eos>, both (N, 11).
struct Data {
  std::vector<dates::Example> examples;
  Tensor src, lens, tgt_in, tgt_out;
  int64_t size() const { return static_cast<int64_t>(examples.size()); }
};

Data encode(const std::vector<dates::Example>& ex, const Vocab& v, int64_t max_len);

// The split's tensors on dev (the examples stay on the host for scoring).
Data to_device(Data d, Device dev);

// Rows idx (a CPU index) of a split, gathered on the split's device, the
// sources cut to the longest one among them (the encoder need not step
// through columns that are padding everywhere).
struct Batch {
  Tensor src, lens, tgt_in, tgt_out;
};
Batch gather_batch(const Data& d, const Tensor& cpu_idx);

// One epoch's batches: shuffled, then sorted by source length within pools
// of 32 batches, so a batch's sources have similar lengths and the encoder
// steps through little padding (its cost follows the longest source of the
// batch); the batches themselves come in random order.
std::vector<Tensor> bucketed_batches(const Data& d, int64_t batch, Generator& g);

}  // namespace seq2seq_app
