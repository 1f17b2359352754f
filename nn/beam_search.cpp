// Beam search with GNMT length normalisation (see beam_search.h). The
// bookkeeping (candidates, ended hypotheses) is on the host: per step it
// reads one (B * K, V) table of log-probabilities, which for a decoder's
// vocabulary is small next to the model's step.
#include <ember/nn/beam_search.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <ember/core/error.h>
#include <ember/ops/factory.h>

namespace ember::nn {

namespace {
// Whether a ranks before b, larger first, a NaN after every number: a model
// that returns NaN log-probabilities still gets hypotheses (ranked last), and
// the sorts get the strict weak order they need, which `>` alone is not
// once a NaN is among the values.
bool ranks_before(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a > b); }
}  // namespace

double gnmt_length_penalty(int64_t length, double alpha) {
  return std::pow((5.0 + static_cast<double>(length)) / 6.0, alpha);
}

std::vector<std::vector<Hypothesis>> beam_search(int64_t B, const BeamStepFn& step, const BeamSearchOptions& o) {
  const int64_t K = o.beam_size;
  EMBER_CHECK(K >= 1 && o.max_len >= 1 && B >= 0 && std::isfinite(o.alpha), ValueError, "beam_search: beam_size (", K,
              ") and max_len (", o.max_len, ") must be >= 1 and alpha (", o.alpha, ") finite");
  constexpr double kDead = -std::numeric_limits<double>::infinity();
  struct Live {
    std::vector<int64_t> tokens;
    double log_prob;
  };
  // Live hypotheses, K per sentence; at first only hypothesis 0 is alive, so
  // the first step does not pick the same token K times.
  std::vector<std::vector<Live>> live(static_cast<size_t>(B), std::vector<Live>(static_cast<size_t>(K), {{}, kDead}));
  for (auto& l : live) l[0].log_prob = 0;
  std::vector<std::vector<Hypothesis>> ended(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  std::vector<int64_t> tokens(static_cast<size_t>(B * K), o.bos), parents(static_cast<size_t>(B * K));
  for (int64_t r = 0; r < B * K; ++r) parents[static_cast<size_t>(r)] = r;

  struct Candidate {
    double total;
    int64_t index;  // k * V + v
  };
  std::vector<Candidate> cand;
  for (int64_t t = 0; t < o.max_len && B > 0; ++t) {
    const Tensor lp_t = step(from_vector(tokens), from_vector(parents));
    EMBER_CHECK(lp_t.dim() == 2 && lp_t.size(0) == B * K && lp_t.size(1) > 0, ShapeError,
                "beam_search: the step returned ", lp_t.shape().str(), ", expected (", B * K, ", vocabulary)");
    const int64_t V = lp_t.size(1);
    EMBER_CHECK(o.eos >= 0 && o.eos < V, ValueError, "beam_search: eos ", o.eos, " is outside a vocabulary of ", V);
    const std::vector<double> lp = lp_t.to(kCPU).to(kFloat64).contiguous().to_vector<double>();
    const bool last = t + 1 == o.max_len;
    for (int64_t b = 0; b < B; ++b) {
      auto& L = live[static_cast<size_t>(b)];
      if (done[static_cast<size_t>(b)]) {
        for (int64_t k = 0; k < K; ++k) tokens[b * K + k] = o.eos, parents[b * K + k] = b * K + k;
        continue;
      }
      cand.clear();
      for (int64_t k = 0; k < K; ++k) {
        if (L[static_cast<size_t>(k)].log_prob == kDead) continue;
        const double* row = lp.data() + (b * K + k) * V;
        // -inf is an impossible token (a mask); NaN stays, to rank last.
        for (int64_t v = 0; v < V; ++v)
          if (row[v] > kDead || std::isnan(row[v]))
            cand.push_back({L[static_cast<size_t>(k)].log_prob + row[v], k * V + v});
      }
      // The 2K best, ties (and NaNs among themselves) to the lower
      // (hypothesis, token) index, so K = 1 picks what argmax picks.
      const size_t keep = std::min(cand.size(), static_cast<size_t>(2 * K));
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                        [](const Candidate& a, const Candidate& c) {
                          if (ranks_before(a.total, c.total)) return true;
                          return !ranks_before(c.total, a.total) && a.index < c.index;
                        });
      std::vector<Live> next;
      std::vector<int64_t> next_parent;
      for (size_t i = 0; i < keep && static_cast<int64_t>(next.size()) < K; ++i) {
        const int64_t k = cand[i].index / V, v = cand[i].index % V;
        const Live& from = L[static_cast<size_t>(k)];
        if (v == o.eos) {
          if (static_cast<int64_t>(i) < K)
            ended[static_cast<size_t>(b)].push_back(
                {from.tokens, cand[i].total, cand[i].total / gnmt_length_penalty(t + 1, o.alpha), true});
          continue;
        }
        Live n{from.tokens, cand[i].total};
        n.tokens.push_back(v);
        next.push_back(std::move(n));
        next_parent.push_back(b * K + k);
      }
      done[static_cast<size_t>(b)] = static_cast<int64_t>(ended[static_cast<size_t>(b)].size()) >= K;
      if (last && !done[static_cast<size_t>(b)])  // cut at max_len: the live ones end unfinished
        for (const Live& n : next)
          ended[static_cast<size_t>(b)].push_back(
              {n.tokens, n.log_prob, n.log_prob / gnmt_length_penalty(o.max_len, o.alpha), false});
      for (int64_t k = 0; k < K; ++k) {
        const bool alive = k < static_cast<int64_t>(next.size());
        tokens[b * K + k] = alive ? next[static_cast<size_t>(k)].tokens.back() : o.eos;
        parents[b * K + k] = alive ? next_parent[static_cast<size_t>(k)] : b * K;
      }
      while (static_cast<int64_t>(next.size()) < K) next.push_back({{}, kDead});
      L = std::move(next);
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  for (auto& e : ended) {
    std::stable_sort(e.begin(), e.end(),
                     [](const Hypothesis& a, const Hypothesis& c) { return ranks_before(a.score, c.score); });
    if (static_cast<int64_t>(e.size()) > K) e.resize(static_cast<size_t>(K));
  }
  return ended;
}

}  // namespace ember::nn
