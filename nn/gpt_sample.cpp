// sample_token (nn/gpt.h): the next token from one row of logits, greedy or
// drawn with temperature, top-k and top-p, in rank order (larger logits
// first, ties by index), without sorting the vocabulary.
#include <ember/core/error.h>
#include <ember/nn/gpt.h>
#include <ember/ops/fast_math.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ember::nn {

namespace {

// The sampler's order: larger logits first, ties by index, NaN after every
// number (a strict total order over token indices). A token that can be
// drawn: its logit (never NaN), its weight and index, side by side, so the
// selections below walk contiguous memory instead of gathering from the
// vocabulary-sized arrays.
struct Candidate {
  double x, p;
  int64_t i;
};
// The order among candidates.
bool ranked_before(const Candidate& a, const Candidate& b) { return a.x > b.x || (a.x == b.x && a.i < b.i); }

// Among c[0, n), the first in rank order at which the running sum of
// weights exceeds t: its position, with every candidate ranked before it
// moved to c[0, position); n when the whole sum does not exceed t.
// Quickselect on the mass, O(n) expected: a vocabulary of 50,257 is never
// sorted to draw one token.
int64_t select_mass(std::vector<Candidate>& c, int64_t n, double t) {
  int64_t lo = 0, hi = n;
  while (hi - lo > 16) {
    // Median of three as the pivot, moved to hi - 1.
    const int64_t mid = lo + (hi - lo) / 2;
    if (ranked_before(c[mid], c[lo])) std::swap(c[mid], c[lo]);
    if (ranked_before(c[hi - 1], c[lo])) std::swap(c[hi - 1], c[lo]);
    if (ranked_before(c[mid], c[hi - 1])) std::swap(c[mid], c[hi - 1]);
    // Lomuto's partition without a branch on the comparison: on logits of
    // an untrained or high-temperature model half the comparisons would
    // be mispredicted, which costs more than the unconditional swap.
    const Candidate pivot = c[hi - 1];
    int64_t m = lo;
    for (int64_t i = lo; i < hi - 1; ++i) {
      const Candidate a = c[i];
      const bool b = (a.x > pivot.x) | ((a.x == pivot.x) & (a.i < pivot.i));
      c[i] = c[m];
      c[m] = a;
      m += b;
    }
    std::swap(c[m], c[hi - 1]);  // the pivot between the two parts
    double before = 0;
    for (int64_t i = lo; i < m; ++i) before += c[i].p;
    if (t < before) {
      hi = m;
      continue;
    }
    t -= before;
    if (t < pivot.p) return m;
    t -= pivot.p;
    lo = m + 1;
  }
  std::sort(c.begin() + lo, c.begin() + hi, ranked_before);
  for (int64_t i = lo; i < hi; ++i) {
    if (t < c[i].p) return i;
    t -= c[i].p;
  }
  return n;
}

// Among c[0, n), the token of the last candidate in rank order with positive
// weight (where rounding leaves u sum past the running sum; tokens at -inf
// are never drawn), or -1 when none has any.
int64_t last_drawable(const std::vector<Candidate>& c, int64_t n) {
  const Candidate* last = nullptr;
  for (int64_t i = 0; i < n; ++i)
    if (c[i].p > 0 && (!last || ranked_before(*last, c[i]))) last = &c[i];
  return last ? last->i : -1;
}

// The draw without top_k or top_p, in two passes over the vocabulary instead
// of a selection over all of it. Tokens go into kBuckets buckets by
// d = mx - x / T, spread evenly over the finite logits' range (at most 64
// nats; the last bucket is open-ended and takes -inf), which orders them as
// the ranks do: every token of a bucket ranks before every token of a later
// one. The first pass adds each bucket's mass; the walk over the buckets
// finds the one where the running sum passes u sum; only that bucket's
// tokens are selected among. At GPT-2's 50,257 logits a draw took 0.50-0.57
// ms on one Zen 5 core as a selection over the whole vocabulary.
constexpr int kBuckets = 512;
constexpr double kMaxSpread = 64;       // nats of d the buckets cover: exp(-64) is 1.6e-28
constexpr uint16_t kNoBucket = 0xFFFF;  // a NaN logit: never drawn while a number is left

int64_t draw_by_buckets(const std::vector<double>& logits, double temperature, double mx, double u, int64_t best) {
  const int64_t V = static_cast<int64_t>(logits.size());
  thread_local std::vector<uint16_t> bucket;
  thread_local std::vector<Candidate> c;
  thread_local std::vector<double> w;  // the tokens' weights
  bucket.resize(static_cast<size_t>(V));
  // The smallest finite logit, the largest finite d (x - x is 0 only for a finite x).
  double lowest = std::numeric_limits<double>::infinity();
  const double* l = logits.data();
#pragma omp simd reduction(min : lowest)
  for (int64_t i = 0; i < V; ++i) lowest = l[i] - l[i] == 0.0 && l[i] < lowest ? l[i] : lowest;
  const double spread = std::isfinite(lowest) ? mx - lowest / temperature : 0.0;
  const double scale = (kBuckets - 1) / std::clamp(spread, 1e-300, kMaxSpread);
  // Every token's weight exp(x - mx) and bucket first, in a loop that
  // vectorises (fast::exp_nonpos: std::exp, a call per token, took most of
  // the draw); std::exp only for the tail below -708 that it returns as
  // subnormals. Then each bucket's mass in two halves, even and odd tokens,
  // so that two neighbouring tokens in one bucket do not wait on each
  // other's add.
  w.resize(static_cast<size_t>(V));
  double* wp = w.data();
  uint16_t* bp = bucket.data();
#pragma omp simd
  for (int64_t i = 0; i < V; ++i) {
    const double x = l[i] / temperature, d = mx - x;  // d >= 0; +inf for a -inf logit
    wp[i] = fast::exp_nonpos(x - mx);                 // exp(-d): x - mx == -(mx - x) exactly
    const double bd = d * scale;
    bp[i] = l[i] != l[i]        ? kNoBucket
            : bd < kBuckets - 1 ? static_cast<uint16_t>(static_cast<int>(bd))
                                : static_cast<uint16_t>(kBuckets - 1);
  }
  double mass2[2][kBuckets] = {};
  for (int64_t i = 0; i < V; ++i) {
    if (bp[i] == kNoBucket) continue;
    if (wp[i] == 0.0 && l[i] != -std::numeric_limits<double>::infinity()) wp[i] = std::exp(l[i] / temperature - mx);
    mass2[i & 1][bp[i]] += wp[i];
  }
  double mass[kBuckets];
  for (int b = 0; b < kBuckets; ++b) mass[b] = mass2[0][b] + mass2[1][b];
  double sum = 0;
  for (double m : mass) sum += m;
  double t = u * sum;
  int target = -1;
  for (int b = 0; b < kBuckets; ++b) {
    if (t < mass[b]) {
      target = b;
      break;
    }
    t -= mass[b];
  }
  // Where rounding leaves u sum past every bucket: the last token of positive
  // probability, in the last bucket that has any.
  const bool past = target < 0;
  if (past) {
    for (int b = kBuckets - 1; b >= 0 && target < 0; --b)
      if (mass[b] > 0) target = b;
    if (target < 0) return best;
  }
  c.clear();
  for (int64_t i = 0; i < V; ++i)
    if (bp[i] == target) c.push_back({l[i] / temperature, wp[i], i});
  const int64_t n = static_cast<int64_t>(c.size());
  if (!past) {
    const int64_t at = select_mass(c, n, t);
    if (at < n) return c[at].i;
  }
  const int64_t last = last_drawable(c, n);
  return last >= 0 ? last : best;
}

}  // namespace

int64_t sample_token(const std::vector<double>& logits, const SampleOptions& o, double u) {
  const int64_t V = static_cast<int64_t>(logits.size());
  EMBER_CHECK(V > 0, ValueError, "sample_token: no logits");
  // The first of the largest (NaN after every number; all NaN gives token
  // 0): greedy's token, and the first in the order the draw walks. The
  // largest number in a loop that vectorises, then its first index.
  const double* l = logits.data();
  double top = -std::numeric_limits<double>::infinity();  // NaN compares false: never taken
#pragma omp simd reduction(max : top)
  for (int64_t i = 0; i < V; ++i) top = l[i] > top ? l[i] : top;
  int64_t best = 0;
  while (best < V && !(l[best] == top)) ++best;
  if (best == V) best = 0;  // all NaN
  if (o.temperature == 0.0) return best;
  const double mx = logits[best] / o.temperature;
  // All NaN, or all -inf: no distribution to draw from; the first token, as greedy.
  if (std::isnan(mx) || mx == -std::numeric_limits<double>::infinity()) return best;
  if (o.top_k == 0 && o.top_p >= 1.0 && !std::isinf(mx)) return draw_by_buckets(logits, o.temperature, mx, u, best);
  // The candidates: every number (NaN is never drawn while a number is
  // left), then the top_k most likely of them. The scratch is kept per
  // thread: a fresh vocabulary-sized buffer per token costs more in page
  // faults than the draw itself.
  thread_local std::vector<Candidate> c;
  c.clear();
  c.reserve(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i)
    if (!std::isnan(logits[i])) c.push_back({logits[i], 0.0, i});
  int64_t k = static_cast<int64_t>(c.size());
  if (o.top_k > 0 && o.top_k < k) {
    std::nth_element(c.begin(), c.begin() + o.top_k, c.end(), ranked_before);
    k = o.top_k;
  }
  // exp(x - max), where a +inf maximum (an infinite logit, or one that
  // overflowed under a small temperature) shares all the mass among the
  // tokens at +inf, and exp(inf - inf) would be NaN.
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double x = c[i].x / o.temperature;
    sum += c[i].p = std::isinf(mx) ? (x == mx ? 1.0 : 0.0) : std::exp(x - mx);
  }
  // Nucleus: the fewest leading tokens whose probability reaches top_p (the
  // first at which the running sum is >= top_p sum, i.e. > the double below it).
  int64_t keep = k;
  if (o.top_p < 1.0) {
    const double reach = std::nextafter(o.top_p * sum, -std::numeric_limits<double>::infinity());
    const int64_t at = select_mass(c, k, reach);
    if (at < k) {
      keep = at + 1;
      sum = 0;
      for (int64_t i = 0; i < keep; ++i) sum += c[i].p;
    }
  }
  // The draw: the first token, in rank order, at which the running sum
  // passes u sum; where rounding leaves it short, the last drawable one.
  const int64_t at = select_mass(c, keep, u * sum);
  if (at < keep) return c[at].i;
  const int64_t last = last_drawable(c, keep);
  return last >= 0 ? last : best;
}

}  // namespace ember::nn
