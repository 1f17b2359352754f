// ONNX import: shape, view, concat/split, cast and constant ops (gather,
// scatter, pad and the other indexing ops are in import_ops_indexing.cpp).
//
// Shapes computed inside a graph (Shape -> Gather -> Concat -> Reshape) are
// int64 tensors like any other value; ops that take a shape read it on the
// host (NodeArgs::ints_input). Views (Reshape, Transpose, Squeeze, Slice with
// a positive step, Split, Expand) stay views of their input, as in PyTorch.
#include <algorithm>
#include <limits>

#include <ember/core/half.h>
#include <ember/onnx/import_helpers.h>
#include <ember/onnx/import_math.h>
#include <ember/ops/factory.h>
#include <ember/ops/indexing.h>
#include <ember/ops/join.h>

namespace ember::onnx::detail {

namespace {

using Outs = std::vector<Tensor>;

// An axes list (attribute before opset 13, input 1 from 13 on); empty when neither is given.
std::vector<int64_t> axes_of(const NodeArgs& a, size_t input, int since) {
  if (a.opset() >= since) return a.has_input(input) ? a.ints_input(input) : std::vector<int64_t>{};
  return a.attr_ints("axes", {});
}

Outs identity_op(const NodeArgs& a) { return {a.input(0)}; }

Outs constant_op(const NodeArgs& a) {
  if (a.has_attr("value")) return {a.attr_tensor("value")};
  if (a.has_attr("value_float")) return {scalar_tensor(a.attr_float("value_float"))};
  if (a.has_attr("value_int")) return {scalar_tensor(static_cast<double>(a.attr_int("value_int")), kInt64)};
  if (a.has_attr("value_floats")) {
    const auto v = a.attr_floats("value_floats");
    return {from_vector(v, Shape{static_cast<int64_t>(v.size())})};
  }
  if (a.has_attr("value_ints")) {
    const auto v = a.attr_ints("value_ints");
    return {from_vector(v, Shape{static_cast<int64_t>(v.size())})};
  }
  if (a.has_attr("sparse_value")) a.unsupported("sparse tensor values are not supported");
  if (a.has_attr("value_string") || a.has_attr("value_strings")) a.unsupported("string values are not supported");
  a.invalid("no value attribute");
}

// A shape from an int64 tensor, each dim checked (a negative one is a broken graph, not an allocation).
Shape shape_of(const NodeArgs& a, const std::vector<int64_t>& dims) {
  if (static_cast<int>(dims.size()) > kMaxDims)
    a.unsupported(std::to_string(dims.size()) + " dims (Ember holds at most " + std::to_string(kMaxDims) + ")");
  for (int64_t d : dims)
    if (d < 0) a.invalid("negative dim " + std::to_string(d) + " in a shape");
  return Shape(dims);
}

Outs constant_of_shape_op(const NodeArgs& a) {
  const Shape s = shape_of(a, a.ints_input(0));
  if (!a.has_attr("value")) return {zeros(s)};
  const Tensor v = a.attr_tensor("value");
  if (v.numel() != 1) a.invalid("value must hold one element");
  return {v.reshape({}).expand(s).contiguous()};
}

Outs shape_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t r = x.dim();
  auto clip = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + r : i, 0, r); };
  const int64_t start = clip(a.attr_int("start", 0));
  const int64_t end = std::max(start, clip(a.attr_int("end", r)));
  std::vector<int64_t> dims(x.shape().begin() + start, x.shape().begin() + end);
  return {from_vector(dims, Shape{end - start})};
}
Outs size_op(const NodeArgs& a) { return {scalar_tensor(static_cast<double>(a.input(0).numel()), kInt64)}; }

// 0 copies the input's dim (unless allowzero), -1 takes what is left.
Outs reshape_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  std::vector<int64_t> s = a.opset() >= 5 ? a.ints_input(1) : a.attr_ints("shape");
  const bool allowzero = a.attr_int("allowzero", 0) != 0;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.dim())
        a.invalid("shape copies dim " + std::to_string(i) + " of a rank-" + std::to_string(x.dim()) + " input");
      s[i] = x.size(static_cast<int64_t>(i));
    }
    if (s[i] == -1) {
      if (infer >= 0) a.invalid("shape has more than one -1");
      infer = static_cast<int>(i);
    } else if (s[i] < 0) {
      a.invalid("negative dim " + std::to_string(s[i]) + " in the shape");
    } else {
      if (s[i] > 0 && known > std::numeric_limits<int64_t>::max() / s[i]) a.invalid("the shape is too large");
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      a.invalid("cannot infer the -1 of the shape for an input of shape " + x.shape().str());
    s[infer] = x.numel() / known;
  }
  return {x.reshape(shape_of(a, s))};
}

Outs flatten_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  int64_t axis = a.attr_int("axis", 1);
  if (axis < -x.dim() || axis > x.dim()) a.invalid("axis " + std::to_string(axis) + " is out of range");
  if (axis < 0) axis += x.dim();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < axis ? outer : inner) *= x.size(i);
  return {x.reshape({outer, inner})};
}

Outs squeeze_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  std::vector<int64_t> axes = axes_of(a, 1, 13);
  if (axes.empty()) return {x.squeeze()};
  for (auto& ax : axes) ax = norm_axis(a, ax, x.dim());
  std::sort(axes.rbegin(), axes.rend());
  for (int64_t ax : axes) {
    if (x.size(ax) != 1) a.invalid("dim " + std::to_string(ax) + " of shape " + x.shape().str() + " is not 1");
    x = x.squeeze(ax);
  }
  return {x};
}

Outs unsqueeze_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  std::vector<int64_t> axes = axes_of(a, 1, 13);
  const int64_t out_rank = x.dim() + static_cast<int64_t>(axes.size());
  for (auto& ax : axes) ax = norm_axis(a, ax, out_rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) a.invalid("axes repeat");
  if (out_rank > kMaxDims) a.unsupported("a result of " + std::to_string(out_rank) + " dims");
  for (int64_t ax : axes) x = x.unsqueeze(ax);
  return {x};
}

Outs transpose_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  std::vector<int64_t> perm = a.attr_ints("perm", {});
  if (perm.empty())
    for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != x.dim()) a.invalid("perm does not match the input's rank");
  for (auto& p : perm) p = norm_axis(a, p, x.dim());
  return {x.permute(Shape(perm))};
}

Outs concat_op(const NodeArgs& a) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < a.num_inputs(); ++i)
    if (a.has_input(i)) xs.push_back(a.input(i));
  if (xs.empty()) a.invalid("no inputs");
  const int64_t rank = xs[0].dim();
  const int64_t axis = norm_axis(a, a.opset() < 4 ? a.attr_int("axis", 1) : a.attr_int("axis"), rank);
  return {cat(xs, axis)};
}

// Sizes from the split attribute (before 13) or input, else equal parts (the last smaller, as opset 18).
Outs split_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t axis = norm_axis(a, a.attr_int("axis", 0), x.dim());
  std::vector<int64_t> sizes =
      a.opset() >= 13 ? (a.has_input(1) ? a.ints_input(1) : std::vector<int64_t>{}) : a.attr_ints("split", {});
  if (sizes.empty()) {
    const int64_t n = static_cast<int64_t>(std::max<size_t>(a.num_outputs(), 1));
    const int64_t d = x.size(axis), part = (d + n - 1) / n;
    for (int64_t i = 0, left = d; i < n; ++i, left -= part) sizes.push_back(std::clamp<int64_t>(left, 0, part));
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != x.size(axis) || std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; }))
    a.invalid("split sizes do not add up to dim " + std::to_string(axis) + " of shape " + x.shape().str());
  return split(x, sizes, axis);
}

// One axis of Slice: start, end and step clamped as the spec says, then a strided view (step > 0) or the
// picked entries in reverse (step < 0, by index_select, which carries the gradient back).
Tensor slice_axis(const NodeArgs& a, const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  if (step == 0) a.invalid("step 0");
  const int64_t n = x.size(axis);
  if (start < 0) start += n;  // no overflow: n >= 0
  if (end < 0) end += n;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, start, n);
    return x.slice(axis, start, end, step);
  }
  if (n == 0) return x;
  start = std::clamp<int64_t>(start, 0, n - 1);
  end = std::clamp<int64_t>(end, -1, n - 1);
  // start > end >= -1, so the count start - end fits; a step of -2^63 takes one entry.
  const int64_t count =
      start <= end ? 0 : (step == std::numeric_limits<int64_t>::min() ? 1 : (start - end - 1) / -step + 1);
  std::vector<int64_t> idx(count);
  for (int64_t i = 0; i < count; ++i) idx[i] = start + i * step;
  return index_select(x, axis, from_vector(idx, Shape{static_cast<int64_t>(idx.size())}));
}

Outs slice_op(const NodeArgs& a) {
  Tensor x = a.input(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (a.opset() < 10) {
    starts = a.attr_ints("starts");
    ends = a.attr_ints("ends");
    axes = a.attr_ints("axes", {});
  } else {
    starts = a.ints_input(1);
    ends = a.ints_input(2);
    if (a.has_input(3)) axes = a.ints_input(3);
    if (a.has_input(4)) steps = a.ints_input(4);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    a.invalid("starts, ends, axes and steps differ in length");
  for (size_t i = 0; i < starts.size(); ++i)
    x = slice_axis(a, x, norm_axis(a, axes[i], x.dim()), starts[i], ends[i], steps[i]);
  return {x};
}

// Bidirectional: the result has the broadcast of the input's shape and the given one.
Outs expand_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const Shape target = shape_of(a, a.ints_input(1));
  return {x.expand(broadcast_shapes(x.shape(), target, "Expand"))};
}

// ONNX's narrow integer types are held in int64; a cast to one wraps as the type would.
Tensor wrap_to(const Tensor& t, int64_t onnx_type) {
  using TP = ::onnx::TensorProto;
  int bits = 64, sign = 1;
  switch (onnx_type) {
    case TP::INT8:
      bits = 8;
      break;
    case TP::UINT8:
      bits = 8, sign = 0;
      break;
    case TP::INT16:
      bits = 16;
      break;
    case TP::UINT16:
      bits = 16, sign = 0;
      break;
    case TP::INT32:
      bits = 32;
      break;
    case TP::UINT32:
      bits = 32, sign = 0;
      break;
    default:
      return t;
  }
  return run_unary<fn::WrapInt>(t, bits, sign);
}

Tensor cast_to(const NodeArgs& a, const Tensor& x, int64_t to) {
  const DType dt = dtype_of_onnx(a, to);
  Tensor y = x.dtype() == dt ? x : x.to(dt);
  return dt == DType::Int64 ? wrap_to(y, to) : y;
}
Outs cast_op(const NodeArgs& a) { return {cast_to(a, a.input(0), a.attr_int("to"))}; }
Outs cast_like_op(const NodeArgs& a) {
  const Tensor &x = a.input(0), &like = a.input(1);
  return {x.dtype() == like.dtype() ? x : x.to(like.dtype())};
}

// start, start + delta, ... before limit: max(ceil((limit - start) / delta), 0) values of start's type.
Outs range_op(const NodeArgs& a) {
  const Tensor& s = a.input(0);
  const double start = scalar_value(a, 0), limit = scalar_value(a, 1), delta = scalar_value(a, 2);
  if (delta == 0) a.invalid("delta is 0");
  const double count = std::max(std::ceil((limit - start) / delta), 0.0);
  if (!(count < 2147483648.0)) a.invalid("the range has more than 2^31 values");
  const int64_t n = static_cast<int64_t>(count);
  if (!s.is_floating_point()) {
    const int64_t st = a.input(0).cpu().item<int64_t>(), d = a.input(2).cpu().to(kInt64).item<int64_t>();
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = st + i * d;
    return {from_vector(v, Shape{n})};
  }
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * delta;
  return {from_vector(v, Shape{n}).to(s.dtype())};
}

// Ones on the k-th diagonal of a 2-D tensor's shape.
Outs eye_like_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  if (x.dim() != 2) a.invalid("input must be 2-D, got shape " + x.shape().str());
  const DType dt = a.has_attr("dtype") ? dtype_of_onnx(a, a.attr_int("dtype")) : x.dtype();
  const int64_t rows = x.size(0), cols = x.size(1), k = a.attr_int("k", 0);
  std::vector<double> v(rows * cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    if (r + k >= 0 && r + k < cols) v[r * cols + r + k] = 1.0;
  return {from_vector(v, Shape{rows, cols}).to(dt)};
}

// [N, C, H, W] <-> [N, C / b^2, H b, W b]: a reshape, a permutation and a reshape. DCR takes the block
// from the channels' leading part, CRD from their trailing part.
Outs depth_to_space_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t b = a.attr_int("blocksize");
  if (x.dim() != 4 || b <= 0 || x.size(1) % (b * b) != 0) a.invalid("needs [N, C, H, W] with C divisible by b^2");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), c = C / (b * b);
  const bool crd = a.attr_string("mode", "DCR") == "CRD";
  const Tensor y = crd ? x.reshape({N, c, b, b, H, W}).permute({0, 1, 4, 2, 5, 3})
                       : x.reshape({N, b, b, c, H, W}).permute({0, 3, 4, 1, 5, 2});
  return {y.reshape({N, c, H * b, W * b})};
}
Outs space_to_depth_op(const NodeArgs& a) {
  const Tensor& x = a.input(0);
  const int64_t b = a.attr_int("blocksize");
  if (x.dim() != 4 || b <= 0 || x.size(2) % b != 0 || x.size(3) % b != 0)
    a.invalid("needs [N, C, H, W] with H and W divisible by the block size");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  return {x.reshape({N, C, H / b, b, W / b, b}).permute({0, 3, 5, 1, 2, 4}).reshape({N, C * b * b, H / b, W / b})};
}

}  // namespace

void register_tensor_ops(OpTable& t) {
  t.add("Identity", identity_op);
  t.add("Constant", constant_op);
  t.add("ConstantOfShape", constant_of_shape_op);
  t.add("Shape", shape_op);
  t.add("Size", size_op);
  t.add("Reshape", reshape_op);
  t.add("Flatten", flatten_op);
  t.add("Squeeze", squeeze_op);
  t.add("Unsqueeze", unsqueeze_op);
  t.add("Transpose", transpose_op);
  t.add("Concat", concat_op);
  t.add("Split", split_op);
  t.add("Slice", slice_op);
  t.add("Expand", expand_op);
  t.add("Cast", cast_op);
  t.add("CastLike", cast_like_op);
  t.add("Range", range_op);
  t.add("EyeLike", eye_like_op);
  t.add("DepthToSpace", depth_to_space_op);
  t.add("SpaceToDepth", space_to_depth_op);
}

}  // namespace ember::onnx::detail
