// ONNX import: reductions (ReduceSum ... ReduceLogSumExp), ArgMax/ArgMin,
// CumSum and TopK, composed from Ember's ops so they differentiate.
//
// The Reduce ops share one shape: the axes (an attribute, or since opset 13
// for ReduceSum an optional int64 input), keepdims (default 1) and
// noop_with_empty_axes (with no axes: reduce nothing instead of everything).
#include <algorithm>
#include <cmath>
#include <numeric>

#include <ember/onnx/import_ops.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>
#include <ember/ops/reduce.h>

namespace ember::onnx::detail {

namespace {

int64_t norm_axis(const NodeArgs& a, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    a.invalid(ember::detail::cat_str("axis ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

// The node's axes, sorted and non-negative; nullopt when none are given.
std::optional<std::vector<int64_t>> reduce_axes(const NodeArgs& a, int64_t rank, bool axes_input) {
  std::vector<int64_t> axes;
  if (axes_input) {
    if (!a.has_input(1)) return std::nullopt;
    axes = a.ints_input(1);
    // An empty axes tensor counts as none given.
    if (axes.empty()) return std::nullopt;
  } else {
    if (!a.has_attr("axes")) return std::nullopt;
    axes = a.attr_ints("axes");
  }
  for (auto& ax : axes) ax = norm_axis(a, ax, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) a.invalid("axes repeat an axis");
  return axes;
}

enum class Kind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

// The product over the last dim, by halving: pairs multiplied, an odd tail
// padded with 1, so log2(n) differentiable multiplies.
Tensor prod_last(Tensor x) {
  while (x.size(-1) > 1) {
    const int64_t n = x.size(-1);
    if (n % 2) x = pad(x, {0, 1}, 1.0);
    x = mul(x.slice(-1, 0, x.size(-1), 2), x.slice(-1, 1, x.size(-1), 2));
  }
  return x.squeeze(-1);
}

Tensor reduce_prod(const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  // Reduced axes moved to the end and merged, then multiplied out.
  std::vector<int64_t> order, kept_shape;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::count(axes.begin(), axes.end(), d)) {
      order.push_back(d);
      kept_shape.push_back(x.size(d));
    }
  for (int64_t d : axes) order.push_back(d);
  kept_shape.push_back(-1);
  Tensor y = prod_last(x.permute(Shape(order)).reshape(Shape(kept_shape)));
  if (keepdims)
    for (int64_t d : axes) y = y.unsqueeze(d);
  return y;
}

Tensor reduce(const NodeArgs& a, Kind kind, bool axes_input) {
  const Tensor& x = a.input(0);
  const bool keepdims = a.attr_int("keepdims", 1) != 0;
  auto axes_opt = reduce_axes(a, x.dim(), axes_input);
  if (!axes_opt) {
    if (a.attr_int("noop_with_empty_axes", 0)) return x;
    axes_opt.emplace(x.dim());
    std::iota(axes_opt->begin(), axes_opt->end(), 0);
  }
  const std::vector<int64_t>& axes = *axes_opt;
  if (axes.empty()) return x;  // a 0-dim input: nothing to reduce
  const Shape dims(axes);
  // Integer inputs: sums stay int64 (Ember's sum), means and logs go through float64 and come back.
  const bool integer = !x.is_floating_point();
  auto as_float = [&](const Tensor& t) { return integer ? t.to(kFloat64) : t; };
  auto back = [&](const Tensor& t) { return integer ? t.to(x.dtype()) : t; };
  switch (kind) {
    case Kind::Sum:
      return back(sum(x, dims, keepdims));
    case Kind::Mean:
      return back(mean(as_float(x), dims, keepdims));
    case Kind::Max:
      return amax(x, dims, keepdims);
    case Kind::Min:
      return amin(x, dims, keepdims);
    case Kind::Prod:
      return reduce_prod(x, axes, keepdims);
    case Kind::L1:
      return back(sum(abs(as_float(x)), dims, keepdims));
    case Kind::L2:
      return back(sqrt(sum(square(as_float(x)), dims, keepdims)));
    case Kind::LogSum:
      return back(log(sum(as_float(x), dims, keepdims)));
    case Kind::LogSumExp:
      return back(logsumexp(as_float(x), dims, keepdims));
    case Kind::SumSquare:
      return back(sum(square(as_float(x)), dims, keepdims));
  }
  return x;
}

template <Kind K>
std::vector<Tensor> reduce_op(const NodeArgs& a) {
  // ReduceSum takes its axes as an input from opset 13, the others from opset 18.
  const bool axes_input = K == Kind::Sum ? a.opset() >= 13 : a.opset() >= 18;
  return {reduce(a, K, axes_input)};
}

// x reversed along dim (a differentiable index_select).
Tensor flip(const Tensor& x, int64_t dim) {
  const int64_t n = x.size(dim);
  return index_select(x, dim, arange(n - 1, -1, -1, TensorOptions(kInt64, x.device())));
}

std::vector<Tensor> arg_op(const NodeArgs& a, bool is_max) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 0), x.dim());
  const bool keepdims = a.attr_int("keepdims", 1) != 0;
  // Ember's argmax picks the first of equal values; the last is the first of the reversed axis.
  if (a.attr_int("select_last_index", 0)) {
    const Tensor r = is_max ? argmax(flip(x, axis), axis, keepdims) : argmin(flip(x, axis), axis, keepdims);
    return {sub(x.size(axis) - 1, r).to(kInt64)};
  }
  return {is_max ? argmax(x, axis, keepdims) : argmin(x, axis, keepdims)};
}

std::vector<Tensor> argmax_op(const NodeArgs& a) { return arg_op(a, true); }
std::vector<Tensor> argmin_op(const NodeArgs& a) { return arg_op(a, false); }

// x shifted by s along dim, zeros entering from the front.
Tensor shift(const Tensor& x, int64_t dim, int64_t s) {
  std::vector<int64_t> pads(2 * (x.dim() - dim), 0);
  pads[pads.size() - 2] = s;  // {before, after} of dim comes last in pad's order
  return pad(x.narrow(dim, 0, x.size(dim) - s), pads, 0.0);
}

// CumSum: the inclusive scan by doubling (y += y shifted by 1, 2, 4, ...),
// log2(n) adds of any dtype; exclusive shifts the result by one, reverse
// scans the reversed axis.
std::vector<Tensor> cumsum_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  const auto axis_v = a.ints_input(1);
  if (axis_v.size() != 1) a.invalid("axis must hold one value");
  const int64_t axis = norm_axis(a, axis_v[0], x.dim());
  const bool reverse = a.attr_int("reverse", 0) != 0;
  const bool exclusive = a.attr_int("exclusive", 0) != 0;
  if (reverse) x = flip(x, axis);
  const int64_t n = x.size(axis);
  Tensor y = x;
  for (int64_t s = 1; s < n; s *= 2) y = add(y, shift(y, axis, s));
  if (exclusive && n > 0) y = shift(y, axis, 1);
  if (reverse) y = flip(y, axis);
  return {y};
}

// TopK: the order is found on the host (ties: the lower index first, as
// ONNX asks), and the values are gathered from x so they carry gradients.
std::vector<Tensor> topk_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const auto kv = a.ints_input(1);
  if (kv.size() != 1) a.invalid("K must hold one value");
  const int64_t k = kv[0];
  const int64_t axis = norm_axis(a, a.attr_int("axis", -1), x.dim());
  const bool largest = a.attr_int("largest", 1) != 0;
  const int64_t n = x.size(axis);
  if (k < 0 || k > n) a.invalid(ember::detail::cat_str("K = ", k, " is out of range for an axis of ", n));
  // Rows along the last dim, on the host, in float64 (exact for every Ember dtype but the largest int64).
  const Tensor rows = x.transpose(axis, -1).contiguous();
  const auto v = rows.cpu().to(kFloat64).to_vector<double>();
  const int64_t m = n ? static_cast<int64_t>(v.size()) / n : 0;
  std::vector<int64_t> idx(m * k), order(n);
  for (int64_t r = 0; r < m; ++r) {
    const double* row = v.data() + r * n;
    std::iota(order.begin(), order.end(), 0);
    // NaN counts as larger than every number, as in NumPy's sort.
    auto before = [&](int64_t i, int64_t j) {
      const double p = row[i], q = row[j];
      if (std::isnan(p) || std::isnan(q))
        return largest ? (std::isnan(p) && !std::isnan(q)) : (!std::isnan(p) && std::isnan(q));
      return largest ? p > q : p < q;
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t i, int64_t j) { return before(i, j) || (!before(j, i) && i < j); });
    std::copy(order.begin(), order.begin() + k, idx.begin() + r * k);
  }
  Shape ishape = rows.shape();
  ishape[ishape.size() - 1] = k;
  const Tensor indices = from_vector(idx, ishape).to(x.device()).transpose(axis, -1).contiguous();
  return {gather(x, axis, indices), indices};
}

}  // namespace

void register_reduce_ops(OpTable& t) {
  t.add("ReduceSum", reduce_op<Kind::Sum>);
  t.add("ReduceMean", reduce_op<Kind::Mean>);
  t.add("ReduceMax", reduce_op<Kind::Max>);
  t.add("ReduceMin", reduce_op<Kind::Min>);
  t.add("ReduceProd", reduce_op<Kind::Prod>);
  t.add("ReduceL1", reduce_op<Kind::L1>);
  t.add("ReduceL2", reduce_op<Kind::L2>);
  t.add("ReduceLogSum", reduce_op<Kind::LogSum>);
  t.add("ReduceLogSumExp", reduce_op<Kind::LogSumExp>);
  t.add("ReduceSumSquare", reduce_op<Kind::SumSquare>);
  t.add("ArgMax", argmax_op);
  t.add("ArgMin", argmin_op);
  t.add("CumSum", cumsum_op);
  t.add("TopK", topk_op);
}

}  // namespace ember::onnx::detail
