// ONNX import: gather and scatter, padding, tiling, one-hot, triangular
// masks, nonzero, compress and reverse-sequence.
//
// Where values move by index, Ember's index_select / gather / index_add /
// scatter_add do it, so gradients reach the data (and the updates of a
// scatter). Index arithmetic that only depends on the index tensors (the
// linear positions of GatherND and ScatterND, NonZero) is done on the host:
// it is exact in int64 and indices are never differentiated. Negative
// indices count from the end, as ONNX allows.
#include <algorithm>
#include <cmath>
#include <functional>

#include <ember/onnx/import_helpers.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

// Indices as int64 with negative entries counted from the end of a dim of size n.
Tensor fix_index(const Tensor& idx, int64_t n) {
  const Tensor i = idx.to(kInt64);
  return where(lt(i, 0.0), add(i, static_cast<double>(n)).to(kInt64), i);
}

Outs gather_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const Tensor& idx = a.input(1);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 0), x.dim());
  const Tensor picked = index_select(x, axis, fix_index(idx, x.size(axis)).reshape({idx.numel()}));
  Shape s;
  for (int64_t i = 0; i < axis; ++i) s.push_back(x.size(i));
  for (int64_t d : idx.shape()) s.push_back(d);
  for (int64_t i = axis + 1; i < x.dim(); ++i) s.push_back(x.size(i));
  return {picked.reshape(s)};
}

Outs gather_elements_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 0), x.dim());
  return {gather(x, axis, fix_index(a.input(1), x.size(axis)))};
}

// The rows of data viewed as [batch * prod(D), rest] that an ND index tensor [..., k] names: data's dims
// are batch (b dims), D (k dims, addressed by the index), rest. Checked against D on the host.
struct NdIndex {
  std::vector<int64_t> rows;  // one per index tuple
  Shape lead;                 // indices.shape[:-1]
  Shape rest;                 // data.shape[b + k:]
  int64_t num_rows = 1;       // batch * prod(D)
};
NdIndex nd_index(const NodeArgs& a, const Tensor& data, const Tensor& indices, int64_t b) {
  if (indices.dim() < 1) a.invalid("indices must have at least one dim");
  const int64_t k = indices.size(-1);
  if (b < 0 || b >= indices.dim() || b + k > data.dim())
    a.invalid("indices of shape " + indices.shape().str() + " do not fit data of shape " + data.shape().str());
  NdIndex r;
  int64_t batch = 1, block = 1;
  for (int64_t i = 0; i < b; ++i) batch *= data.size(i);
  for (int64_t i = b; i < b + k; ++i) block *= data.size(i);
  for (int64_t i = b + k; i < data.dim(); ++i) r.rest.push_back(data.size(i));
  for (int64_t i = 0; i + 1 < indices.dim(); ++i) r.lead.push_back(indices.size(i));
  r.num_rows = batch * block;
  const Tensor c = indices.to(kInt64).cpu().contiguous();
  const int64_t* p = c.data<int64_t>();
  const int64_t tuples = k ? c.numel() / k : r.lead.numel();
  const int64_t per_batch = batch ? tuples / batch : 0;
  r.rows.resize(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t row = per_batch ? (t / per_batch) * block : 0;
    int64_t stride = block;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t n = data.size(b + j);
      int64_t v = p[t * k + j];
      if (v < 0) v += n;
      if (v < 0 || v >= n)
        a.invalid("index " + std::to_string(p[t * k + j]) + " is out of range for a dim of size " + std::to_string(n));
      stride /= n;
      row += v * stride;
    }
    r.rows[t] = row;
  }
  return r;
}
Tensor rows_tensor(const NdIndex& r) { return from_vector(r.rows, Shape{static_cast<int64_t>(r.rows.size())}); }

Outs gather_nd_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const NdIndex r = nd_index(a, x, a.input(1), a.attr_int("batch_dims", 0));
  Shape flat{r.num_rows}, out = r.lead;
  for (int64_t d : r.rest) flat.push_back(d), out.push_back(d);
  return {index_select(x.reshape(flat), 0, rows_tensor(r)).reshape(out)};
}

// Scatter with reduction none (the updates replace: where a position is hit, the sum of the updates sent
// there, which is the update itself when indices are unique, as ONNX requires) or add.
Tensor scatter_replace(const Tensor& data, const Tensor& added, const Tensor& hits) {
  return where(gt(hits, 0.0), added, data);
}

// Scatter with reduction mul, max or min, on the host: out = data, then out[dest(p)] = op(out[dest(p)],
// updates[p]) for every position p of the updates in order. Not differentiable: a backward through it
// throws, naming the op, rather than leaving gradients silently missing.
Tensor scatter_reduce_host(const NodeArgs& a, const Tensor& data, const std::string& red, int64_t positions,
                           const std::function<int64_t(int64_t)>& dest, int64_t width, const Tensor& updates) {
  if (red != "mul" && red != "max" && red != "min") a.unsupported("reduction '" + red + "'");
  Tensor out = data.cpu().to(kFloat64).contiguous().clone();
  const Tensor u = updates.cpu().to(kFloat64).contiguous();
  double* o = out.data<double>();
  const double* up = u.data<double>();
  for (int64_t p = 0; p < positions; ++p) {
    const int64_t d = dest(p);
    for (int64_t k = 0; k < width; ++k) {
      double& v = o[d * width + k];
      const double w = up[p * width + k];
      v = red == "mul" ? v * w : red == "max" ? std::max(v, w) : std::min(v, w);
    }
  }
  Tensor r = out.to(data.dtype()).to(data.device());
  if (autograd::needs_grad({data, updates})) autograd::record_no_backward("ScatterReduce", {data, updates}, r);
  return r;
}

Outs scatter_elements_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 0), x.dim());
  const Tensor idx = fix_index(a.input(1), x.size(axis));
  const Tensor upd = a.input(2).to(x.dtype());
  const std::string red = a.attr_string("reduction", "none");
  if (red == "add") return {scatter_add(x, axis, idx, upd)};
  if (red != "none") {
    // The destination of update position p: p's own coordinates with the axis one replaced by the index.
    const Tensor ic = idx.cpu().contiguous();
    const int64_t* ip = ic.data<int64_t>();
    for (int64_t i = 0; i < ic.numel(); ++i)
      if (ip[i] < 0 || ip[i] >= x.size(axis)) a.invalid("index " + std::to_string(ip[i]) + " is out of range");
    const Shape is = idx.shape(), xs = x.shape();
    auto dest = [&](int64_t p) {
      int64_t off = 0, stride = 1, rem = p;
      std::vector<int64_t> c(is.size());
      for (int d = is.size() - 1; d >= 0; --d) c[d] = rem % is[d], rem /= is[d];
      c[axis] = ip[p];
      for (int d = xs.size() - 1; d >= 0; --d) off += c[d] * stride, stride *= xs[d];
      return off;
    };
    return {scatter_reduce_host(a, x, red, idx.numel(), dest, 1, upd.contiguous())};
  }
  const Tensor hits = scatter_add(zeros(x.shape()), axis, idx, ones(idx.shape()));
  return {scatter_replace(x, scatter_add(zeros_like(x), axis, idx, upd), hits)};
}

Outs scatter_nd_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const NdIndex r = nd_index(a, x, a.input(1), 0);
  const int64_t width = r.rest.numel();
  const Tensor flat = x.reshape({r.num_rows, width});
  const Tensor rows = rows_tensor(r);
  const Tensor upd = a.input(2).to(x.dtype()).reshape({static_cast<int64_t>(r.rows.size()), width});
  const std::string red = a.attr_string("reduction", "none");
  if (red == "add") return {index_add(flat, 0, rows, upd).reshape(x.shape())};
  if (red != "none") {
    auto dest = [&](int64_t p) { return r.rows[p]; };
    return {
        scatter_reduce_host(a, flat, red, static_cast<int64_t>(r.rows.size()), dest, width, upd).reshape(x.shape())};
  }
  const Tensor hits = index_add(zeros({r.num_rows}), 0, rows, ones({static_cast<int64_t>(r.rows.size())}));
  return {scatter_replace(flat, index_add(zeros_like(flat), 0, rows, upd), hits.reshape({r.num_rows, 1}))
              .reshape(x.shape())};
}

// Each dim repeated r times: [.., n, ..] -> [.., r, n, ..] (a broadcast view) -> [.., r n, ..].
Outs tile_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  const std::vector<int64_t> reps = a.ints_input(1);
  if (static_cast<int64_t>(reps.size()) != x.dim()) a.invalid("repeats must have one entry per dim");
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (reps[d] < 0) a.invalid("negative repeat");
    if (reps[d] == 1) continue;
    Shape e = x.unsqueeze(d).shape();
    e[static_cast<int>(d)] = reps[d];
    Shape s = x.shape();
    s[static_cast<int>(d)] *= reps[d];
    x = x.unsqueeze(d).expand(e).reshape(s);
  }
  return {x};
}

// Pad: pads = [begin_0, begin_1, ..., end_0, end_1, ...] (negative ones crop). Constant mode pads with
// Ember's pad; reflect, edge and wrap pick source positions along each dim by index_select.
Outs pad_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  const int64_t r = x.dim();
  std::vector<int64_t> pads;
  double value = 0;
  if (a.opset() < 11) {
    pads = a.has_attr("pads") ? a.attr_ints("pads") : a.attr_ints("paddings");
    value = a.attr_float("value", 0.0f);
  } else {
    pads = a.ints_input(1);
    if (a.has_input(2) && a.input(2).numel() > 0) value = scalar_value(a, 2);
  }
  std::vector<int64_t> axes;
  if (a.has_input(3)) {
    for (int64_t ax : a.ints_input(3)) axes.push_back(norm_axis(a, ax, r));
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  const int64_t na = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(pads.size()) != 2 * na) a.invalid("pads must have two entries per padded axis");
  std::vector<int64_t> before(r, 0), after(r, 0);
  for (int64_t i = 0; i < na; ++i) before[axes[i]] = pads[i], after[axes[i]] = pads[i + na];
  for (int64_t d = 0; d < r; ++d) {  // crop first
    const int64_t lo = before[d] < 0 ? -before[d] : 0, hi = after[d] < 0 ? -after[d] : 0;
    if (lo + hi > x.size(d)) a.invalid("negative pads crop more than dim " + std::to_string(d) + " holds");
    if (lo || hi) x = x.narrow(d, lo, x.size(d) - lo - hi);
    before[d] = std::max<int64_t>(before[d], 0), after[d] = std::max<int64_t>(after[d], 0);
  }
  const std::string mode = a.attr_string("mode", "constant");
  if (mode == "constant") {
    std::vector<int64_t> torch_pads;
    for (int64_t d = r - 1; d >= 0; --d) torch_pads.push_back(before[d]), torch_pads.push_back(after[d]);
    return {pad(x, torch_pads, value)};
  }
  if (mode != "reflect" && mode != "edge" && mode != "wrap") a.invalid("unknown mode '" + mode + "'");
  for (int64_t d = 0; d < r; ++d) {
    if (!before[d] && !after[d]) continue;
    const int64_t n = x.size(d);
    if (n == 0) a.invalid("cannot " + mode + "-pad an empty dim");
    std::vector<int64_t> src;
    for (int64_t i = -before[d]; i < n + after[d]; ++i) {
      int64_t j = i;
      if (mode == "edge") {
        j = std::clamp<int64_t>(i, 0, n - 1);
      } else if (mode == "wrap") {
        j = ((i % n) + n) % n;
      } else if (n == 1) {
        j = 0;
      } else {  // reflect about the edges, which are not repeated: period 2 (n - 1)
        const int64_t p = 2 * (n - 1);
        j = ((i % p) + p) % p;
        if (j >= n) j = p - j;
      }
      src.push_back(j);
    }
    x = index_select(x, d, from_vector(src, Shape{static_cast<int64_t>(src.size())}));
  }
  return {x};
}

// on where the index (negative: counted from depth) equals the position along axis, off elsewhere; an
// index outside [-depth, depth) gives a row of off.
Outs one_hot_op(const NodeArgs& a) {
  const Tensor idx = a.input(0).to(kInt64);
  const int64_t depth = static_cast<int64_t>(scalar_value(a, 1));
  const Tensor& values = a.input(2);
  if (values.numel() != 2) a.invalid("values must hold [off, on]");
  if (depth < 0) a.invalid("negative depth");
  const int64_t r = idx.dim() + 1;
  const int64_t axis = norm_axis(a, a.attr_int("axis", -1), r);
  Shape s = Shape::filled(static_cast<int>(r), 1);
  s[static_cast<int>(axis)] = depth;
  const Tensor pos = arange(static_cast<double>(depth)).reshape(s);
  const Tensor fixed = fix_index(idx, depth).unsqueeze(axis);
  const Tensor v = values.reshape({2});
  const Tensor mask = eq(fixed, pos);
  return {where(mask, v.select(0, 1), v.select(0, 0))};
}

// Keeps the elements on and above (upper) or on and below the k-th diagonal of the last two dims.
Outs trilu_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 2) a.invalid("input must have at least 2 dims");
  const int64_t k = a.has_input(1) ? a.ints_input(1).at(0) : 0;
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const Tensor diag = sub(arange(static_cast<double>(cols)).reshape({1, cols}),
                          arange(static_cast<double>(rows)).reshape({rows, 1}));  // col - row
  const Tensor keep = a.attr_int("upper", 1) ? ge(diag, static_cast<double>(k)) : le(diag, static_cast<double>(k));
  return {where(keep, x, zeros_like(x))};
}

// The positions of nonzero elements, as [rank, count] int64, in row-major order.
Outs nonzero_op(const NodeArgs& a) {
  const Tensor x = a.input(0).cpu().to(kFloat64).contiguous();
  const double* p = x.data<double>();
  const int64_t r = std::max(x.dim(), 1);
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (p[i] != 0) hits.push_back(i);
  const int64_t n = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(r * n);
  for (int64_t j = 0; j < n; ++j) {
    int64_t rem = hits[j];
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      out[d * n + j] = rem % x.size(d);
      rem /= x.size(d);
    }
  }
  return {from_vector(out, Shape{r, n})};
}

// The slices along axis (of the flattened input when no axis) where condition is true.
Outs compress_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  int64_t axis = 0;
  if (a.has_attr("axis"))
    axis = norm_axis(a, a.attr_int("axis"), x.dim());
  else
    x = x.reshape({x.numel()});
  const Tensor c = a.input(1).cpu().to(kBool).contiguous();
  if (c.numel() > x.size(axis)) a.invalid("condition is longer than the dim it selects from");
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < c.numel(); ++i)
    if (c.data<bool>()[i]) keep.push_back(i);
  return {index_select(x, axis, from_vector(keep, Shape{static_cast<int64_t>(keep.size())}))};
}

// Along time_axis, the first sequence_lens[b] entries of each batch entry b reversed, the rest kept.
Outs reverse_sequence_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() < 2) a.invalid("input must have at least 2 dims");
  const int64_t ta = norm_axis(a, a.attr_int("time_axis", 0), x.dim());
  const int64_t ba = norm_axis(a, a.attr_int("batch_axis", 1), x.dim());
  if (ta == ba || ta > 1 || ba > 1) a.invalid("time_axis and batch_axis must be 0 and 1 in some order");
  const std::vector<int64_t> lens = a.ints_input(1);
  const int64_t T = x.size(ta), B = x.size(ba);
  if (static_cast<int64_t>(lens.size()) != B) a.invalid("sequence_lens must have one entry per batch entry");
  std::vector<int64_t> src(T * B);  // [T, B] when time is dim 0, [B, T] otherwise
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = std::clamp<int64_t>(lens[b], 0, T);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = t < len ? len - 1 - t : t;
      src[ta == 0 ? t * B + b : b * T + t] = s;
    }
  }
  Shape s = Shape::filled(x.dim(), 1);
  s[0] = ta == 0 ? T : B;
  s[1] = ta == 0 ? B : T;
  return {gather(x, ta, from_vector(src, Shape{s[0], s[1]}).reshape(s).expand(x.shape()).contiguous())};
}

// The distinct entries of the flattened input, or the distinct slices along axis: ascending (sorted, in
// lexicographic order for slices) or in order of first appearance; with the first position of each, each
// entry's place among them, and their counts. Y is picked from X by index_select, so it carries gradients.
Outs unique_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const bool by_axis = a.has_attr("axis");
  const Tensor src = by_axis ? x : x.reshape({x.numel()});
  const int64_t axis = by_axis ? norm_axis(a, a.attr_int("axis"), x.dim()) : 0;
  const int64_t n = src.size(axis);
  Shape perm{axis};
  for (int64_t d = 0; d < src.dim(); ++d)
    if (d != axis) perm.push_back(d);
  const int64_t width = n ? src.numel() / n : 0;
  const Tensor rows = src.permute(perm).cpu().to(kFloat64).contiguous().reshape({n, width});
  const double* p = rows.data<double>();
  // NaN after every number and equal to NaN, so that the order is a strict weak one.
  auto lt = [](double u, double v) { return std::isnan(u) ? false : (std::isnan(v) || u < v); };
  auto eq = [](double u, double v) { return u == v || (std::isnan(u) && std::isnan(v)); };
  auto less = [&](int64_t i, int64_t j) {
    return std::lexicographical_compare(p + i * width, p + (i + 1) * width, p + j * width, p + (j + 1) * width, lt);
  };
  auto same = [&](int64_t i, int64_t j) { return std::equal(p + i * width, p + (i + 1) * width, p + j * width, eq); };
  // Entries sorted by value (stably, so each run of equal ones starts at its first appearance), then the
  // runs in ascending order (sorted) or by first appearance.
  std::vector<int64_t> by_value(n);
  for (int64_t i = 0; i < n; ++i) by_value[i] = i;
  std::stable_sort(by_value.begin(), by_value.end(), less);
  std::vector<int64_t> group(n), firsts, counts;
  for (int64_t k = 0; k < n; ++k) {
    if (k == 0 || !same(by_value[k - 1], by_value[k])) firsts.push_back(by_value[k]), counts.push_back(0);
    group[by_value[k]] = static_cast<int64_t>(firsts.size()) - 1;
    ++counts.back();
  }
  std::vector<int64_t> order(firsts.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
  if (a.attr_int("sorted", 1) == 0)
    std::sort(order.begin(), order.end(), [&](int64_t g, int64_t h) { return firsts[g] < firsts[h]; });
  std::vector<int64_t> rank(order.size()), picked, cnt, inverse(n);
  for (size_t k = 0; k < order.size(); ++k) {
    rank[order[k]] = static_cast<int64_t>(k);
    picked.push_back(firsts[order[k]]);
    cnt.push_back(counts[order[k]]);
  }
  for (int64_t i = 0; i < n; ++i) inverse[i] = rank[group[i]];
  const int64_t u = static_cast<int64_t>(picked.size());
  return {index_select(src, axis, from_vector(picked, Shape{u})), from_vector(picked, Shape{u}),
          from_vector(inverse, Shape{n}), from_vector(cnt, Shape{u})};
}

}  // namespace

void register_indexing_ops(OpTable& t) {
  t.add("Gather", gather_op);
  t.add("GatherElements", gather_elements_op);
  t.add("GatherND", gather_nd_op);
  t.add("ScatterElements", scatter_elements_op);
  t.add("Scatter", scatter_elements_op);  // opsets 9 and 10: ScatterElements under its old name
  t.add("ScatterND", scatter_nd_op);
  t.add("Tile", tile_op);
  t.add("Pad", pad_op);
  t.add("OneHot", one_hot_op);
  t.add("Trilu", trilu_op);
  t.add("NonZero", nonzero_op);
  t.add("Compress", compress_op);
  t.add("ReverseSequence", reverse_sequence_op);
  t.add("Unique", unique_op);
}

}  // namespace ember::onnx::detail
