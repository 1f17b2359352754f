// View ops: new shapes and strides over the same storage, no copy. Each is
// differentiable; its backward maps the gradient back with the inverse view
// (or, for expand, a sum the engine already knows how to do).
#include <algorithm>
#include <numeric>

#include <ember/core/autograd.h>
#include <ember/core/op.h>
#include <ember/core/tensor.h>
#include <ember/ops/onnx_lowerings.h>

namespace ember {

using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;

namespace {

// Strides for viewing a tensor of (shape, strides) as new_shape without a
// copy, or false when its memory layout forbids it (PyTorch's
// computeStride: each run of dims that merges into contiguous memory must
// map onto a run of the new shape with the same element count).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out = Shape::filled(new_shape.size(), 1);
  if (shape.numel() == 0 || shape.size() == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int view_d = new_shape.size() - 1;
  int64_t chunk_base_stride = strides.size() ? strides.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

// Resolves a single -1 in a requested shape.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape s = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      EMBER_CHECK(infer < 0, ShapeError, op, ": only one dimension can be -1, got ", requested.str());
      infer = i;
    } else {
      EMBER_CHECK(s[i] >= 0, ShapeError, op, ": invalid size ", s[i], " in shape ", requested.str());
      known *= s[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": shape ", requested.str(),
                " is invalid for input of shape ", from.str(), " (", numel, " elements)");
    s[infer] = numel / known;
  }
  EMBER_CHECK(s.numel() == numel, ShapeError, op, ": shape ", requested.str(), " is invalid for input of shape ",
              from.str(), " (", numel, " elements)");
  return s;
}

// Records a view op whose backward reshapes/permutes the gradient back.
template <class F>
Tensor finish_view(const char* name, const Tensor& self, Tensor out, F&& backward) {
  if (needs_grad({self})) record(name, {self}, out, std::forward<F>(backward));
  return out;
}

}  // namespace

namespace {
void lower_transpose(lowering::Graph& g, const lowering::Call& c) {
  const int64_t n = c.tensor(0).dim();
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  std::swap(perm[(c.i(1) % n + n) % n], perm[(c.i(2) % n + n) % n]);
  g.bind(c.outputs[0], g.node("Transpose", {g.value(c.tensor(0))}, {{"perm", perm}})[0]);
}
void lower_permute(lowering::Graph& g, const lowering::Call& c) {
  const int64_t n = c.tensor(0).dim();
  std::vector<int64_t> perm = c.ints(1);
  for (int64_t& p : perm) p = (p % n + n) % n;
  g.bind(c.outputs[0], g.node("Transpose", {g.value(c.tensor(0))}, {{"perm", perm}})[0]);
}
// slice(dim, start, end, step): Slice, whose ends are clamped as Ember's are.
void lower_slice(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0],
         g.node("Slice", {g.value(c.tensor(0)), g.ints(c, 2), g.ints(c, 3), g.ints(c, 1), g.ints(c, 4)})[0]);
}
// select(dim, index): Gather with a 0-d index drops the dim.
void lower_select(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Gather", {g.value(c.tensor(0)), g.scalar(static_cast<double>(c.i(2)), DType::Int64)},
                              {{"axis", c.i(1)}})[0]);
}
void lower_expand(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Expand", {g.value(c.tensor(0)), g.shape(c, 0)})[0]);
}
}  // namespace

constexpr OpDef view_op{.name = "view", .onnx = lowering::reshape_to_result};
EMBER_REGISTER_OP(view_op);

Tensor Tensor::view(const Shape& requested) const {
  return op::call_captured<view_op>(
      [&](const auto&...) -> Tensor {
        const Shape s = infer_shape(requested, numel(), "view", shape());
        Shape st;
        EMBER_CHECK(view_strides(shape(), strides(), s, st), ShapeError, "view: shape ", s.str(),
                    " is incompatible with the input's shape ", shape().str(), " and strides ", strides().str(),
                    " (at least one dimension spans across two contiguous subspaces); use reshape() instead");
        const Shape in_shape = shape();
        return finish_view("view", *this, make_view(*this, s, st, offset()),
                           [in_shape](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().reshape(in_shape)); });
      },
      *this, requested);
}

constexpr OpDef reshape_op{.name = "reshape", .onnx = lowering::reshape_to_result};
EMBER_REGISTER_OP(reshape_op);

Tensor Tensor::reshape(const Shape& requested) const {
  return op::call_captured<reshape_op>(
      [&](const auto&...) -> Tensor {
        const Shape s = infer_shape(requested, numel(), "reshape", shape());
        Shape st;
        if (view_strides(shape(), strides(), s, st)) return view(s);
        return contiguous().view(s);
      },
      *this, requested);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  EMBER_CHECK(s <= e, IndexError, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape ns;
  for (int i = 0; i < s; ++i) ns.push_back(shape()[i]);
  int64_t p = 1;
  for (int i = s; i <= e; ++i) p *= shape()[i];
  ns.push_back(p);
  for (int i = e + 1; i < dim(); ++i) ns.push_back(shape()[i]);
  return reshape(ns);
}

Tensor Tensor::unflatten(int64_t d, const Shape& sizes) const {
  const int w = wrap_dim(d, dim(), "unflatten");
  Shape ns;
  for (int i = 0; i < w; ++i) ns.push_back(shape()[i]);
  const Shape inner = infer_shape(sizes, shape()[w], "unflatten", Shape{shape()[w]});
  for (int64_t v : inner) ns.push_back(v);
  for (int i = w + 1; i < dim(); ++i) ns.push_back(shape()[i]);
  return view(ns);
}

constexpr OpDef transpose_op{.name = "transpose", .onnx = lower_transpose};
EMBER_REGISTER_OP(transpose_op);

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return op::call_captured<transpose_op>(
      [&](const auto&...) -> Tensor {
        if (dim() == 0) return *this;
        const int a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
        Shape sh = shape(), st = strides();
        std::swap(sh[a], sh[b]);
        std::swap(st[a], st[b]);
        return finish_view("transpose", *this, make_view(*this, sh, st, offset()),
                           [a, b](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().transpose(a, b)); });
      },
      *this, d0, d1);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, ShapeError, "t: expects a tensor with <= 2 dims, got shape ", shape().str());
  return dim() < 2 ? *this : transpose(0, 1);
}

constexpr OpDef permute_op{.name = "permute", .onnx = lower_permute};
EMBER_REGISTER_OP(permute_op);

Tensor Tensor::permute(const Shape& dims) const {
  return op::call_captured<permute_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(dims.size() == dim(), ShapeError, "permute: got ", dims.size(), " dims for a tensor of shape ",
                    shape().str());
        Shape sh, st, inverse = Shape::filled(dim(), -1);
        for (int i = 0; i < dim(); ++i) {
          const int d = wrap_dim(dims[i], dim(), "permute");
          EMBER_CHECK(inverse[d] < 0, IndexError, "permute: dim ", d, " repeats in ", dims.str());
          inverse[d] = i;
          sh.push_back(shape()[d]);
          st.push_back(strides()[d]);
        }
        return finish_view("permute", *this, make_view(*this, sh, st, offset()),
                           [inverse](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().permute(inverse)); });
      },
      *this, dims);
}

constexpr OpDef slice_op{.name = "slice", .onnx = lower_slice};
EMBER_REGISTER_OP(slice_op);

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return op::call_captured<slice_op>(
      [&](const auto&...) -> Tensor {
        const int w = wrap_dim(d, dim(), "slice");
        EMBER_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
        const int64_t n = shape()[w];
        if (start < 0) start += n;
        if (end < 0) end += n;
        start = std::clamp<int64_t>(start, 0, n);
        end = std::clamp<int64_t>(end, start, n);
        Shape sh = shape(), st = strides();
        sh[w] = (end - start + step - 1) / step;
        st[w] = strides()[w] * step;
        const Shape in_shape = shape();
        const DType dt = dtype();
        return finish_view("slice", *this, make_view(*this, sh, st, offset() + start * strides()[w]),
                           [in_shape, dt, w, start, end, step](BackwardContext& ctx) {
                             const Tensor& g = ctx.grad_output();
                             Tensor full = empty(in_shape, TensorOptions(dt, g.device()));
                             full.zero_();
                             full.slice(w, start, end, step).copy_(g);
                             ctx.set_grad(0, full);
                           });
      },
      *this, d, start, end, step);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  const int w = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[w];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n, IndexError, "narrow: start ", start, " + length ",
              length, " exceeds dim ", w, " of size ", n, " (shape ", shape().str(), ")");
  return slice(w, start, start + length, 1);
}

constexpr OpDef select_op{.name = "select", .onnx = lower_select};
EMBER_REGISTER_OP(select_op);

Tensor Tensor::select(int64_t d, int64_t index) const {
  return op::call_captured<select_op>(
      [&](const auto&...) -> Tensor {
        const int w = wrap_dim(d, dim(), "select");
        const int64_t n = shape()[w];
        EMBER_CHECK(index >= -n && index < n, IndexError, "select: index ", index, " is out of range for dim ", w,
                    " of size ", n, " (shape ", shape().str(), ")");
        if (index < 0) index += n;
        Shape sh = shape(), st = strides();
        sh.erase(w);
        st.erase(w);
        const Shape in_shape = shape();
        const DType dt = dtype();
        return finish_view("select", *this, make_view(*this, sh, st, offset() + index * strides()[w]),
                           [in_shape, dt, w, index](BackwardContext& ctx) {
                             Tensor full = empty(in_shape, TensorOptions(dt, ctx.grad_output().device()));
                             full.zero_();
                             full.select(w, index).copy_(ctx.grad_output());
                             ctx.set_grad(0, full);
                           });
      },
      *this, d, index);
}

constexpr OpDef unsqueeze_op{.name = "unsqueeze", .onnx = lowering::reshape_to_result};
EMBER_REGISTER_OP(unsqueeze_op);

Tensor Tensor::unsqueeze(int64_t d) const {
  return op::call_captured<unsqueeze_op>(
      [&](const auto&...) -> Tensor {
        const int w = wrap_dim(d, dim() + 1, "unsqueeze");
        Shape sh = shape(), st = strides();
        const int64_t new_stride = w < dim() ? strides()[w] * shape()[w] : 1;
        sh.insert(w, 1);
        st.insert(w, new_stride);
        return finish_view("unsqueeze", *this, make_view(*this, sh, st, offset()),
                           [w](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().squeeze(w)); });
      },
      *this, d);
}

constexpr OpDef squeeze_dim_op{.name = "squeeze_dim", .onnx = lowering::reshape_to_result};
EMBER_REGISTER_OP(squeeze_dim_op);

Tensor Tensor::squeeze(int64_t d) const {
  return op::call_captured<squeeze_dim_op>(
      [&](const auto&...) -> Tensor {
        if (dim() == 0) return *this;
        const int w = wrap_dim(d, dim(), "squeeze");
        if (shape()[w] != 1) return *this;
        Shape sh = shape(), st = strides();
        sh.erase(w);
        st.erase(w);
        return finish_view("squeeze", *this, make_view(*this, sh, st, offset()),
                           [w](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().unsqueeze(w)); });
      },
      *this, d);
}

constexpr OpDef squeeze_op{.name = "squeeze", .onnx = lowering::reshape_to_result};
EMBER_REGISTER_OP(squeeze_op);

Tensor Tensor::squeeze() const {
  return op::call_captured<squeeze_op>(
      [&](const auto&...) -> Tensor {
        Shape sh, st;
        for (int i = 0; i < dim(); ++i)
          if (shape()[i] != 1) {
            sh.push_back(shape()[i]);
            st.push_back(strides()[i]);
          }
        if (sh.size() == dim()) return *this;
        const Shape in_shape = shape();
        return finish_view("squeeze", *this, make_view(*this, sh, st, offset()),
                           [in_shape](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output().reshape(in_shape)); });
      },
      *this);
}

constexpr OpDef expand_op{.name = "expand", .onnx = lower_expand};
EMBER_REGISTER_OP(expand_op);

Tensor Tensor::expand(const Shape& requested) const {
  return op::call_captured<expand_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(requested.size() >= dim(), ShapeError, "expand: the target shape ", requested.str(),
                    " has fewer dims than the tensor's shape ", shape().str());
        const int off = requested.size() - dim();
        Shape sh = requested, st = Shape::filled(requested.size(), 0);
        for (int i = 0; i < requested.size(); ++i) {
          const int j = i - off;
          if (j < 0) {
            EMBER_CHECK(requested[i] >= 0, ShapeError, "expand: -1 is not allowed for a new leading dim in ",
                        requested.str());
            continue;
          }
          const int64_t s = shape()[j];
          if (requested[i] == -1) sh[i] = s;
          EMBER_CHECK(sh[i] == s || s == 1, ShapeError, "expand: the tensor's shape ", shape().str(),
                      " cannot be expanded to ", requested.str(), " (dim ", i, ": ", s, " vs ", sh[i], ")");
          st[i] = (sh[i] == s) ? strides()[j] : 0;
        }
        if (sh == shape()) return *this;
        // The engine sums the gradient back over the expanded dims.
        return finish_view("expand", *this, make_view(*this, sh, st, offset()),
                           [](BackwardContext& ctx) { ctx.set_grad(0, ctx.grad_output()); });
      },
      *this, requested);
}

}  // namespace ember
