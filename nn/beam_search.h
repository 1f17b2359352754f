/// \file
/// Beam search for any autoregressive decoder (the Transformer with its
/// cache, a GRU with its state), batched over sentences, with GNMT's length
/// normalisation (Wu et al. 2016, "Google's Neural Machine Translation
/// System", eq. 14):
/// \code
///   score(Y) = log P(Y | X) / lp(|Y|),   lp(n) = ((5 + n) / 6)^alpha
/// \endcode
/// where |Y| counts the generated tokens, <eos> included. alpha = 0 ranks by
/// the raw log-probability (which favours short outputs); GNMT found alpha in
/// [0.6, 0.7] best, and 0.6 is the default here.
///
/// The model is seen through one callback: given the last token of each of
/// the batch * beam_size hypotheses and the row each continues, it returns
/// the log-probabilities of the next token. Row b * beam_size + k is
/// hypothesis k of sentence b; the caller keeps its state (a decoder cache,
/// GRU states) in that order, replicated beam_size times per sentence before
/// the search, and reorders it by `parents` at every call.
///
/// Each step extends every live hypothesis by every token and keeps, per
/// sentence, the 2 * beam_size best candidates by log-probability: an <eos>
/// candidate among the first beam_size ends a hypothesis (set aside with its
/// normalised score), and the first beam_size others stay live. A sentence is
/// done once beam_size hypotheses have ended (GNMT's and HF's early
/// stopping); at max_len the live ones end unfinished. With beam_size = 1
/// this is greedy decoding.
///
/// A NaN log-probability ranks after every number (a model with NaN weights
/// still gets hypotheses, with NaN scores, rather than none); -inf is an
/// impossible token and is never chosen, so a sentence whose every
/// continuation is -inf ends with no hypothesis.
#pragma once

#include <functional>
#include <vector>

#include <ember/core/tensor.h>

namespace ember::nn {

/// The search's settings.
struct BeamSearchOptions {
  int64_t beam_size = 4;  ///< hypotheses kept per sentence (K)
  int64_t max_len = 32;   ///< at most this many tokens generated per hypothesis, <eos> included
  int64_t bos = 1;        ///< the first input token
  int64_t eos = 2;        ///< ends a hypothesis
  double alpha = 0.6;     ///< the length-penalty exponent (0: none)
};

/// One ended hypothesis.
struct Hypothesis {
  std::vector<int64_t> tokens;  ///< generated tokens, without <bos> and <eos>
  double log_prob = 0;          ///< sum of the chosen tokens' log-probabilities (<eos>'s included)
  double score = 0;             ///< log_prob / lp(length)
  bool finished = false;        ///< ended by <eos> (false: cut at max_len)
};

/// tokens (B * K) int64: each hypothesis' last token (bos at the first
/// call); parents (B * K) int64: row r continues row parents[r] of the
/// previous call (the identity at the first call). Returns log-probabilities
/// (B * K, V), any floating dtype and device.
using BeamStepFn = std::function<Tensor(const Tensor& tokens, const Tensor& parents)>;

/// GNMT's length penalty ((5 + length) / 6)^alpha.
double gnmt_length_penalty(int64_t length, double alpha);

/// Beam search over batch sentences: for each, up to beam_size hypotheses,
/// best score first.
std::vector<std::vector<Hypothesis>> beam_search(int64_t batch, const BeamStepFn& step, const BeamSearchOptions& opts);

}  // namespace ember::nn
