// DistributedDataParallel (see distributed.h): the model check across ranks,
// rank 0's weights broadcast, gradient buckets filled from post-accumulate-
// grad hooks and reduced in order while backward runs.
#include <ember/nn/distributed.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_set>

#include <ember/core/autograd.h>
#include <ember/core/error.h>

namespace ember::nn {

namespace {

// FNV-1a: a stable hash of the model's description, equal on every rank
// that built the same model.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// One line per parameter and buffer: what must agree across ranks.
std::vector<std::string> describe(const Module& m) {
  std::vector<std::string> lines;
  for (const auto& [kind, list] :
       {std::pair{"parameter", m.named_parameters()}, std::pair{"buffer", m.named_buffers()}})
    for (const auto& [name, t] : list)
      lines.push_back(detail::cat_str(kind, " ", name, " ", t.shape().str(), " ", dtype_name(t.dtype()), " ",
                                      device_type_name(t.device().type)));
  return lines;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options)
    : module_(std::move(module)), options_(options) {
  EMBER_CHECK(module_ != nullptr, ValueError, "DistributedDataParallel: the module is null");
  EMBER_CHECK(options_.bucket_cap_mb > 0, ValueError, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
              options_.bucket_cap_mb);
  register_module("module", module_);
  distributed::init();
  check_consistent_models();
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : module_->state_dict()) distributed::broadcast(t, 0);
  }
  // Parameters that require grad, each once (tied weights appear under
  // several names), in registration order.
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [name, t] : module_->named_parameters())
    if (t.requires_grad() && seen.insert(t.unsafe_impl()).second) entries_.push_back({t, name});
  build_buckets(options_.bucket_cap_mb);
  for (size_t i = 0; i < entries_.size(); ++i)
    entries_[i].hook = autograd::register_post_accumulate_grad_hook(entries_[i].tensor,
                                                                    [this, i](const Tensor&) { on_gradient_ready(i); });
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Entry& e : entries_) autograd::remove_post_accumulate_grad_hook(e.tensor, e.hook);
  for (Bucket& b : buckets_) {
    try {
      b.work.wait();  // MPI must not write into a freed buffer
    } catch (const Error&) {}
  }
}

void DistributedDataParallel::check_consistent_models() const {
  const std::vector<std::string> lines = describe(*module_);
  std::string all;
  int64_t params = 0, elements = 0;
  for (const std::string& l : lines) all += l + "\n";
  for (const auto& [name, t] : module_->named_parameters()) ++params, elements += t.numel();
  for (const auto& [name, t] : module_->named_buffers()) elements += t.numel();
  const int world = distributed::world_size();
  // One small all-gather decides; the descriptions travel only on a mismatch.
  const int64_t mine[4] = {params, static_cast<int64_t>(lines.size()) - params, elements,
                           static_cast<int64_t>(fnv1a(all))};
  std::vector<int64_t> every(4 * static_cast<size_t>(world));
  distributed::detail::all_gather_bytes(mine, every.data(), sizeof mine);
  bool same = true;
  for (int r = 1; r < world; ++r) same = same && std::equal(every.begin(), every.begin() + 4, every.begin() + 4 * r);
  if (same) return;

  const std::vector<std::string> texts = distributed::detail::all_gather_strings(all);
  std::vector<std::vector<std::string>> per_rank;
  for (const std::string& t : texts) per_rank.push_back(split_lines(t));
  auto entry = [&](int r, size_t k) {
    const auto& l = per_rank[static_cast<size_t>(r)];
    return k < l.size() ? l[k] : std::string("(nothing)");
  };
  auto differs = [&](size_t k) {
    for (int r = 1; r < world; ++r)
      if (entry(r, k) != entry(0, k)) return true;
    return false;
  };
  size_t first = 0;  // the summaries differ, so the descriptions do somewhere
  while (!differs(first)) ++first;
  std::string msg = "DistributedDataParallel: the ranks' models differ, so their parameters cannot be averaged:";
  for (int r = 0; r < world; ++r) {
    const int64_t* s = every.data() + 4 * r;
    msg += detail::cat_str(r ? ";" : "", " rank ", r, " has ", s[0], " parameters and ", s[1], " buffers (", s[2],
                           " elements)");
  }
  msg += detail::cat_str(". First difference, entry ", first, ":");
  for (int r = 0; r < world; ++r) msg += detail::cat_str(r ? ";" : "", " rank ", r, ": ", entry(r, first));
  msg += ". Every process must build the same model (same configuration and code) before wrapping it";
  throw ValueError(msg);
}

void DistributedDataParallel::build_buckets(double cap_mb) {
  const auto cap = static_cast<int64_t>(cap_mb * 1024 * 1024);
  // Reverse registration order: backward produces the last layers' gradients first.
  int64_t bytes = 0;
  for (size_t k = entries_.size(); k-- > 0;) {
    const Tensor& t = entries_[k].tensor;
    const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
    const bool fits = !buckets_.empty() && bytes + n <= cap &&
                      entries_[buckets_.back().entries.front()].tensor.dtype() == t.dtype() &&
                      entries_[buckets_.back().entries.front()].tensor.device() == t.device();
    if (!fits) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    entries_[k].bucket = buckets_.size() - 1;
    entries_[k].offset = bytes / static_cast<int64_t>(t.element_size());
    b.entries.push_back(k);
    bytes += n;
  }
  for (Bucket& b : buckets_) {
    const Tensor& first = entries_[b.entries.front()].tensor;
    int64_t numel = 0;
    for (size_t k : b.entries) numel += entries_[k].tensor.numel();
    b.flat = empty({numel}, TensorOptions(first.dtype(), first.device()));
    b.pending = b.entries.size();
  }
}

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.entries);
  return out;
}

void DistributedDataParallel::on_gradient_ready(size_t entry) {
  if (no_sync_depth_ > 0) return;
  Entry& e = entries_[entry];
  EMBER_CHECK(!e.ready, ValueError, "DistributedDataParallel: parameter '", e.name,
              "' received a gradient twice before the ranks averaged it: the previous backward left some parameters "
              "without a gradient, so their buckets never filled; call ddp.synchronize() after backward");
  e.ready = true;
  pass_open_ = true;
  --buckets_[e.bucket].pending;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) launch(next_bucket_++);
  for (size_t k = 0; k < next_bucket_; ++k) buckets_[k].work.test();  // lets MPI progress the buckets in flight
  if (next_bucket_ == buckets_.size()) finish();
}

void DistributedDataParallel::launch(size_t bucket) {
  NoGradGuard no_grad;
  Bucket& b = buckets_[bucket];
  for (size_t k : b.entries) {
    const Entry& e = entries_[k];
    Tensor slot = b.flat.narrow(0, e.offset, e.tensor.numel()).view(e.tensor.shape());
    if (e.tensor.grad().defined()) {
      slot.copy_(e.tensor.grad());
    } else {
      slot.zero_();  // no gradient on this rank (synchronize() after an unused parameter)
    }
  }
  // The last bucket starts when backward has nothing left to overlap with:
  // finish() waits for it at once, so it takes the faster blocking form.
  if (bucket + 1 == buckets_.size()) {
    distributed::all_reduce(b.flat, distributed::ReduceOp::Mean);
  } else {
    b.work = distributed::all_reduce_async(b.flat, distributed::ReduceOp::Mean);
  }
}

void DistributedDataParallel::finish() {
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    b.work.wait();
    for (size_t k : b.entries) {
      Entry& e = entries_[k];
      const Tensor mean = b.flat.narrow(0, e.offset, e.tensor.numel()).view(e.tensor.shape());
      Tensor& g = e.tensor.mutable_grad();
      if (g.defined()) {
        g.copy_(mean);
      } else {
        g = mean.clone();
      }
      e.ready = false;
    }
    b.pending = b.entries.size();
  }
  next_bucket_ = 0;
  pass_open_ = false;
}

void DistributedDataParallel::synchronize() {
  if (no_sync_depth_ > 0 || !pass_open_) return;
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  finish();
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (options_.broadcast_buffers && distributed::world_size() > 1) {
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) distributed::broadcast(b, 0);
  }
  return module_->forward(x);
}

}  // namespace ember::nn
