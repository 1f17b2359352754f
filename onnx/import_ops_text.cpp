// ONNX import: TfIdfVectorizer over integer tokens (string tokens are
// Unsupported, as every string tensor is), on the host.
//
// The pool holds the n-grams to count, grouped by length: ngram_counts[n-1]
// is where the n-grams start in pool_int64s. For each row of X, each n in
// [min_gram_length, max_gram_length] and each skip s in [0, max_skip_count]
// (n = 1 counted once, skips mean nothing there), every n-gram X[i],
// X[i + s + 1], ..., X[i + (n-1)(s+1)] found in the pool adds one to the
// output column ngram_indexes[its place in the pool]. The output is the
// count (TF), the weight where the count is not 0 (IDF), or their product
// (TFIDF); weights default to 1.
#include <map>

#include <ember/onnx/import_helpers.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

Outs tfidf_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.is_floating_point()) a.invalid("tokens must be integers");
  if (x.dim() != 1 && x.dim() != 2) a.invalid("X must be 1-D or 2-D");
  const std::string mode = a.attr_string("mode");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") a.invalid("unknown mode '" + mode + "'");
  const int64_t min_n = a.attr_int("min_gram_length"), max_n = a.attr_int("max_gram_length");
  const int64_t max_skip = a.attr_int("max_skip_count");
  const std::vector<int64_t> starts = a.attr_ints("ngram_counts"), columns = a.attr_ints("ngram_indexes");
  const std::vector<int64_t> pool = a.attr_ints("pool_int64s", {});
  if (pool.empty() && a.has_attr("pool_strings")) a.unsupported("string pools are not supported");
  std::vector<float> weights = a.attr_floats("weights", {});
  if (min_n < 1 || max_n < min_n || max_skip < 0 || max_n > static_cast<int64_t>(starts.size()))
    a.invalid("gram lengths or skip count out of range");
  // Each pool n-gram (as a vector of tokens) -> its place in the pool.
  std::map<std::vector<int64_t>, int64_t> place;
  int64_t k = 0;
  for (size_t n = 1; n <= starts.size(); ++n) {
    const int64_t begin = starts[n - 1];
    const int64_t end = n < starts.size() ? starts[n] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end > static_cast<int64_t>(pool.size()) || begin > end || (end - begin) % n != 0)
      a.invalid("ngram_counts does not split the pool into whole n-grams");
    for (int64_t i = begin; i < end; i += static_cast<int64_t>(n), ++k)
      place[std::vector<int64_t>(pool.begin() + i, pool.begin() + i + static_cast<int64_t>(n))] = k;
  }
  if (static_cast<int64_t>(columns.size()) != k) a.invalid("ngram_indexes must have one entry per pool n-gram");
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != k) a.invalid("weights must match ngram_indexes");
  int64_t width = 0;
  for (int64_t c : columns) {
    if (c < 0 || c > (int64_t{1} << 24)) a.invalid("ngram_indexes out of range");
    width = std::max(width, c + 1);
  }
  const Tensor xc = x.cpu().contiguous();
  const int64_t rows = x.dim() == 2 ? x.size(0) : 1, len = x.size(-1);
  const int64_t* p = xc.data<int64_t>();
  std::vector<double> counts(rows * width, 0.0);
  std::vector<int64_t> gram;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = p + r * len;
    for (int64_t n = min_n; n <= max_n; ++n)
      for (int64_t s = 0; s <= (n == 1 ? 0 : max_skip); ++s)
        for (int64_t i = 0; i + (n - 1) * (s + 1) < len; ++i) {
          gram.clear();
          for (int64_t j = 0; j < n; ++j) gram.push_back(row[i + j * (s + 1)]);
          auto it = place.find(gram);
          if (it != place.end()) counts[r * width + columns[it->second]] += 1;
        }
  }
  // Weights by output column.
  std::vector<double> w(width, 1.0);
  for (int64_t i = 0; i < k && !weights.empty(); ++i) w[columns[i]] = weights[i];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      double& v = counts[r * width + c];
      v = mode == "TF" ? v : mode == "IDF" ? (v > 0 ? w[c] : 0.0) : v * w[c];
    }
  return {from_vector(counts, x.dim() == 2 ? Shape{rows, width} : Shape{width}).to(kFloat32)};
}

}  // namespace

void register_text_ops(OpTable& t) { t.add("TfIdfVectorizer", tfidf_op); }

}  // namespace ember::onnx::detail
