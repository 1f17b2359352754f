// The seq2seq demo's data as tensors (data.h): encoding a split, moving it
// to the device, gathering a batch and ordering an epoch's batches.
#include "data.h"

#include <algorithm>

using namespace ember;

namespace seq2seq_app {

Data encode(const std::vector<dates::Example>& ex, const Vocab& v, int64_t max_len) {
  const int64_t n = static_cast<int64_t>(ex.size());
  std::vector<int64_t> src(static_cast<size_t>(n * max_len), kPad), lens, tin, tout;
  for (int64_t i = 0; i < n; ++i) {
    const std::string& s = ex[static_cast<size_t>(i)].source;
    for (size_t j = 0; j < s.size(); ++j) src[static_cast<size_t>(i * max_len) + j] = v.src_id(s[j]);
    lens.push_back(static_cast<int64_t>(s.size()));
    // Input: <bos> y1..y10; target: y1..y10 <eos> (the input shifted left).
    tin.push_back(kBos);
    for (char c : ex[static_cast<size_t>(i)].target) {
      tin.push_back(v.tgt_id(c));
      tout.push_back(v.tgt_id(c));
    }
    tout.push_back(kEos);
  }
  return {ex, from_vector(src, {n, max_len}), from_vector(lens, {n}), from_vector(tin, {n, kTargetSteps}),
          from_vector(tout, {n, kTargetSteps})};
}

Data to_device(Data d, Device dev) {
  d.src = d.src.to(dev), d.lens = d.lens.to(dev), d.tgt_in = d.tgt_in.to(dev), d.tgt_out = d.tgt_out.to(dev);
  return d;
}

Batch gather_batch(const Data& d, const Tensor& cpu_idx) {
  const Tensor idx = cpu_idx.to(d.src.device());
  Batch b{index_select(d.src, 0, idx), index_select(d.lens, 0, idx), index_select(d.tgt_in, 0, idx),
          index_select(d.tgt_out, 0, idx)};
  const int64_t longest = max(b.lens).item<int64_t>();
  b.src = b.src.narrow(1, 0, longest).contiguous();
  return b;
}

std::vector<Tensor> bucketed_batches(const Data& d, int64_t batch, Generator& g) {
  // A batch larger than the split is the whole split (and 32 * batch then
  // cannot overflow: a batch near 2^63 made the pool size wrap to a negative
  // number, sorting a reversed range (SIGSEGV), or to 0, looping forever).
  batch = std::clamp<int64_t>(batch, 1, std::max<int64_t>(1, d.size()));
  const std::vector<int64_t> perm = randperm(d.size(), &g).to_vector<int64_t>();
  const std::vector<int64_t> lens = d.lens.to_vector<int64_t>();
  std::vector<int64_t> order = perm;
  const int64_t pool = 32 * batch;
  for (int64_t start = 0; start < d.size(); start += pool) {
    auto first = order.begin() + start, last = order.begin() + std::min(d.size(), start + pool);
    std::stable_sort(first, last, [&](int64_t a, int64_t b) { return lens[a] < lens[b]; });
  }
  std::vector<Tensor> out;
  for (int64_t start = 0; start < d.size(); start += batch) {
    const std::vector<int64_t> idx(order.begin() + start, order.begin() + std::min(d.size(), start + batch));
    out.push_back(from_vector(idx));
  }
  std::vector<Tensor> shuffled;
  for (int64_t k : randperm(static_cast<int64_t>(out.size()), &g).to_vector<int64_t>()) shuffled.push_back(out[k]);
  return shuffled;
}

}  // namespace seq2seq_app
