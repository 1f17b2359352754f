// Beam search (nn/beam_search.h) on toy models whose next-token
// distribution is a fixed function of the tokens so far: K = 1 is greedy
// decoding, hypotheses come best first with GNMT-normalised scores, the
// maximum length holds, and a wider beam finds what greedy misses.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <ember/ember.h>

#include "test_util.h"

using namespace ember;

namespace {

constexpr int64_t kV = 7, kBos = 1, kEos = 2;

// log-softmax of pseudo-random logits that depend on sentence b and the
// whole history, with <eos> made likelier as the history grows.
std::vector<double> toy_log_probs(int64_t b, const std::vector<int64_t>& history) {
  double h = 0.37 * static_cast<double>(b + 1);
  for (size_t i = 0; i < history.size(); ++i) h += 0.91 * static_cast<double>((i + 1) * (history[i] + 3));
  std::vector<double> logits(kV);
  for (int64_t v = 0; v < kV; ++v) logits[v] = 2.5 * std::sin(1.7 * static_cast<double>(v) + h * 1.3);
  logits[kBos] = -30;  // never generated
  logits[kEos] += 0.4 * static_cast<double>(history.size()) - 1.5;
  double m = -1e300, s = 0;
  for (double l : logits) m = std::max(m, l);
  for (double l : logits) s += std::exp(l - m);
  for (double& l : logits) l -= m + std::log(s);
  return logits;
}

// A BeamStepFn over toy_log_probs that keeps each row's history itself,
// reordered by the parents it is given (as a model's cache would be).
struct ToyModel {
  int64_t K;
  std::vector<std::vector<int64_t>> hist;
  int64_t calls = 0;
  ToyModel(int64_t batch, int64_t k) : K(k), hist(static_cast<size_t>(batch * k)) {}
  Tensor operator()(const Tensor& tokens, const Tensor& parents) {
    ++calls;
    const std::vector<int64_t> tok = tokens.to_vector<int64_t>(), par = parents.to_vector<int64_t>();
    std::vector<std::vector<int64_t>> next(hist.size());
    std::vector<double> lp;
    for (size_t r = 0; r < hist.size(); ++r) {
      next[r] = hist[static_cast<size_t>(par[r])];
      next[r].push_back(tok[r]);
      const std::vector<double> row = toy_log_probs(static_cast<int64_t>(r) / K, next[r]);
      lp.insert(lp.end(), row.begin(), row.end());
    }
    hist = next;
    return from_vector(lp, {static_cast<int64_t>(hist.size()), kV});
  }
};

// Greedy decoding of sentence b straight from toy_log_probs.
std::vector<int64_t> greedy(int64_t b, int64_t max_len, bool* finished) {
  std::vector<int64_t> history{kBos}, out;
  *finished = false;
  for (int64_t t = 0; t < max_len; ++t) {
    const std::vector<double> lp = toy_log_probs(b, history);
    const int64_t v = std::max_element(lp.begin(), lp.end()) - lp.begin();
    if (v == kEos) {
      *finished = true;
      break;
    }
    out.push_back(v);
    history.push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("beam search with K = 1 is greedy decoding, sentence by sentence in one batch") {
  const int64_t B = 12;
  for (int64_t max_len : {1, 3, 8, 20}) {
    CAPTURE(max_len);
    ToyModel m(B, 1);
    const auto res =
        nn::beam_search(B, [&](const Tensor& t, const Tensor& p) { return m(t, p); }, {1, max_len, kBos, kEos, 0.6});
    REQUIRE(res.size() == static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      bool finished = false;
      const std::vector<int64_t> g = greedy(b, max_len, &finished);
      REQUIRE(res[b].size() == 1);
      CHECK(res[b][0].tokens == g);
      CHECK(res[b][0].finished == finished);
    }
  }
}

TEST_CASE("beam search: hypotheses best first, normalised scores, max length, K per sentence") {
  const int64_t B = 6, K = 4;
  for (double alpha : {0.0, 0.6, 1.0}) {
    for (int64_t max_len : {2, 5, 12}) {
      CAPTURE(alpha);
      CAPTURE(max_len);
      ToyModel m(B, K);
      const auto res = nn::beam_search(B, [&](const Tensor& t, const Tensor& p) { return m(t, p); },
                                       {K, max_len, kBos, kEos, alpha});
      CHECK(m.calls <= max_len);
      for (int64_t b = 0; b < B; ++b) {
        REQUIRE(!res[b].empty());
        CHECK(res[b].size() <= static_cast<size_t>(K));
        for (size_t i = 0; i < res[b].size(); ++i) {
          const nn::Hypothesis& h = res[b][i];
          if (i > 0) CHECK(res[b][i - 1].score >= h.score);
          // Length, <eos> included, within max_len; an unfinished one is max_len long.
          const int64_t len = static_cast<int64_t>(h.tokens.size()) + (h.finished ? 1 : 0);
          CHECK(len <= max_len);
          if (!h.finished) CHECK(len == max_len);
          // The log-probability is the chosen tokens' sum, and the score its GNMT normalisation.
          std::vector<int64_t> history{kBos};
          double lp = 0;
          for (int64_t v : h.tokens) {
            lp += toy_log_probs(b, history)[v];
            history.push_back(v);
          }
          if (h.finished) lp += toy_log_probs(b, history)[kEos];
          CHECK(h.log_prob == doctest::Approx(lp).epsilon(1e-9));
          CHECK(h.score == doctest::Approx(lp / std::pow((5.0 + len) / 6.0, alpha)).epsilon(1e-9));
          for (int64_t v : h.tokens) CHECK((v != kEos && v != kBos));
        }
      }
    }
  }
  CHECK(nn::gnmt_length_penalty(1, 0.6) == doctest::Approx(1.0));
  CHECK(nn::gnmt_length_penalty(7, 1.0) == doctest::Approx(2.0));
}

TEST_CASE("beam search finds the better sequence that greedy decoding misses") {
  // From <bos>: a 0.6, b 0.4. After a: <eos> 0.3, a 0.35, b 0.35. After b:
  // <eos> 0.9. Greedy takes a (then 0.6 * 0.35 at best); "b <eos>" has 0.36.
  const int64_t A = 3, Bt = 4;
  auto table = [&](int64_t last) {
    std::vector<double> p(5, 1e-9);
    if (last == kBos)
      p[A] = 0.6, p[Bt] = 0.4;
    else if (last == A)
      p[kEos] = 0.3, p[A] = 0.35, p[Bt] = 0.35;
    else
      p[kEos] = 0.9, p[A] = 0.05, p[Bt] = 0.05;
    for (double& x : p) x = std::log(x);
    return p;
  };
  for (int64_t K : {1, 2}) {
    const auto res = nn::beam_search(1,
                                     [&](const Tensor& tokens, const Tensor&) {
                                       std::vector<double> lp;
                                       for (int64_t t : tokens.to_vector<int64_t>()) {
                                         const auto row = table(t);
                                         lp.insert(lp.end(), row.begin(), row.end());
                                       }
                                       return from_vector(lp, {K, 5});
                                     },
                                     {K, 6, kBos, kEos, 0.0});
    if (K == 1)
      CHECK(res[0][0].tokens.front() == A);
    else
      CHECK(res[0][0].tokens == std::vector<int64_t>{Bt});
    if (K == 2) CHECK(res[0][0].log_prob == doctest::Approx(std::log(0.36)));
  }
}

TEST_CASE("beam search rejects bad settings and a step of the wrong shape") {
  auto step = [](const Tensor& t, const Tensor&) { return zeros({t.numel(), 5}); };
  CHECK_THROWS_AS(nn::beam_search(2, step, {0, 5, kBos, kEos, 0.6}), ValueError);
  CHECK_THROWS_AS(nn::beam_search(2, step, {2, 0, kBos, kEos, 0.6}), ValueError);
  CHECK_THROWS_AS(nn::beam_search(2, step, {2, 5, kBos, kEos, NAN}), ValueError);
  CHECK_THROWS_AS(nn::beam_search(2, step, {2, 5, kBos, 9, 0.6}), ValueError);
  CHECK_THROWS_AS(nn::beam_search(2,
                                  [](const Tensor&, const Tensor&) {
                                    return zeros({3, 5});
                                  },
                                  {2, 5, kBos, kEos, 0.6}),
                  ShapeError);
}

TEST_CASE("beam search: NaN log-probabilities rank last, +inf first, all -inf ends with no hypothesis") {
  constexpr int64_t V = 5;
  // A model whose weights are NaN: log_softmax of NaN logits is NaN everywhere.
  // Every candidate ties at NaN, so the lowest (hypothesis, token) indices go
  // on: token 0 stays live, <eos> (2) ends one hypothesis a step.
  auto nan_model = [](const Tensor& tokens, const Tensor&) {
    return log_softmax(full({tokens.numel(), V}, std::nan("")), 1);
  };
  const auto res = nn::beam_search(2, nan_model, {3, 6, kBos, kEos, 0.6});
  REQUIRE(res.size() == 2);
  for (const auto& hyps : res) {
    REQUIRE(hyps.size() == 3);
    CHECK(hyps[0].tokens.empty());
    CHECK(hyps[1].tokens == std::vector<int64_t>{0});
    CHECK(hyps[2].tokens == std::vector<int64_t>{0, 0});
    for (const nn::Hypothesis& h : hyps) {
      CHECK(h.finished);
      CHECK(std::isnan(h.log_prob));
      CHECK(std::isnan(h.score));
    }
  }
  // NaN beside numbers: the numbers win, NaN <eos> included; -inf is never taken.
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  auto mixed = [&](const Tensor& tokens, const Tensor&) {
    std::vector<double> row{nan, -1.0, nan, -0.5, -inf}, all;
    for (int64_t r = 0; r < tokens.numel(); ++r) all.insert(all.end(), row.begin(), row.end());
    return from_vector(all, {tokens.numel(), V});
  };
  const auto greedy = nn::beam_search(1, mixed, {1, 3, kBos, kEos, 0.0});
  REQUIRE(greedy[0].size() == 1);
  CHECK(greedy[0][0].tokens == std::vector<int64_t>{3, 3, 3});
  CHECK(greedy[0][0].log_prob == doctest::Approx(-1.5));
  CHECK_FALSE(greedy[0][0].finished);
  const auto wide = nn::beam_search(1, mixed, {2, 2, kBos, kEos, 0.0});
  REQUIRE(wide[0].size() == 2);
  CHECK(wide[0][0].tokens == std::vector<int64_t>{3, 3});
  CHECK(wide[0][0].log_prob == doctest::Approx(-1.0));
  CHECK(wide[0][1].tokens == std::vector<int64_t>{3, 1});  // ties with {1, 3} at -1.5: the lower index first
  // +inf: taken first; every extension of it is +inf too, ties by index.
  auto infinite = [&](const Tensor& tokens, const Tensor&) {
    std::vector<double> row{0.0, inf, -1.0, nan, -2.0}, all;
    for (int64_t r = 0; r < tokens.numel(); ++r) all.insert(all.end(), row.begin(), row.end());
    return from_vector(all, {tokens.numel(), V});
  };
  const auto inf_res = nn::beam_search(1, infinite, {2, 2, kBos, kEos, 0.6});
  REQUIRE(inf_res[0].size() == 2);
  CHECK(inf_res[0][0].tokens == std::vector<int64_t>{1, 0});
  CHECK(inf_res[0][1].tokens == std::vector<int64_t>{1, 1});
  CHECK(inf_res[0][0].score == inf);
  CHECK(inf_res[0][1].score == inf);
  // Every continuation impossible: no hypothesis for the sentence.
  auto impossible = [&](const Tensor& tokens, const Tensor&) { return full({tokens.numel(), V}, -inf); };
  const auto none = nn::beam_search(2, impossible, {2, 3, kBos, kEos, 0.6});
  REQUIRE(none.size() == 2);
  CHECK(none[0].empty());
  CHECK(none[1].empty());
}
