// cat, stack, split, chunk and pad. Data moves through the copy kernel
// (ops/copy.h), which every backend provides, so these ops need no kernels of
// their own; split and chunk are narrow views.
#include <ember/core/op.h>
#include <ember/ops/join.h>
#include <ember/ops/onnx_lowerings.h>

#include <ember/core/autograd.h>
#include <ember/ops/copy.h>
#include <ember/ops/pointwise.h>

namespace ember {

namespace {
// Concat of the tensors in the result's dtype (cat promotes).
void lower_cat(lowering::Graph& g, const lowering::Call& c) {
  std::vector<std::string> in;
  for (const Tensor& t : c.tensors(0))
    if (t.numel() > 0 || t.dim() > 1) in.push_back(lowering::cast_to(g, t, c.outputs[0].dtype()));
  g.bind(c.outputs[0], g.node("Concat", in, {{"axis", c.i(1)}})[0]);
}
void lower_split(lowering::Graph& g, const lowering::Call& c) {
  const auto out =
      g.node("Split", {g.value(c.tensor(0)), g.ints(c, 1)}, {{"axis", c.i(2)}}, static_cast<int>(c.outputs.size()));
  for (size_t i = 0; i < c.outputs.size(); ++i) g.bind(c.outputs[i], out[i]);
}
// Ember's pads run from the last dim backwards, (begin, end) each; ONNX's are every begin, then every end.
void lower_pad(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  const std::vector<int64_t>& p = c.ints(1);
  const int64_t n = x.dim();
  std::vector<int64_t> pads(2 * n, 0);
  for (size_t i = 0; i + 1 < p.size(); i += 2) {
    const int64_t d = n - 1 - static_cast<int64_t>(i / 2);
    pads[d] = p[i], pads[n + d] = p[i + 1];
  }
  g.bind(c.outputs[0], g.node("Pad", {g.value(x), g.constant_ints(pads), g.scalar(c.f(2), x.dtype())})[0]);
}
}  // namespace

constexpr OpDef cat_op{.name = "cat", .onnx = lower_cat};
EMBER_REGISTER_OP(cat_op);

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  return op::call_captured<cat_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(!tensors.empty(), ValueError, "cat: expected a non-empty list of tensors");
        const Tensor& first = tensors[0];
        const int d = wrap_dim(dim, first.dim(), "cat");
        EMBER_CHECK(first.dim() > 0, ShapeError, "cat: zero-dimensional tensors cannot be concatenated");
        DType dt = first.dtype();
        Shape out_shape = first.shape();
        out_shape[d] = 0;
        for (size_t i = 0; i < tensors.size(); ++i) {
          const Tensor& t = tensors[i];
          check_same_device("cat", first, t);
          bool fits = t.dim() == first.dim();
          for (int k = 0; fits && k < t.dim(); ++k) fits = k == d || t.shape()[k] == first.shape()[k];
          EMBER_CHECK(fits, ShapeError, "cat: tensor ", i, " has shape ", t.shape().str(),
                      ", which does not match tensor 0's ", first.shape().str(), " outside dim ", d);
          out_shape[d] += t.shape()[d];
          dt = promote_types(dt, t.dtype());
        }
        Tensor out = empty(out_shape, TensorOptions(dt, first.device()));
        int64_t off = 0;
        std::vector<int64_t> sizes;
        for (const Tensor& t : tensors) {
          const int64_t n = t.shape()[d];
          if (n && t.numel()) {
            Tensor dst = make_view(out, t.shape(), out.strides(), out.offset() + off * out.strides()[d]);
            copy_kernel(out.device(), t, dst);
          }
          sizes.push_back(n);
          off += n;
        }
        if (autograd::needs_grad(tensors))
          autograd::record("cat", tensors, out, [sizes, d](autograd::BackwardContext& ctx) {
            // Each input gets its slice of the gradient.
            int64_t o = 0;
            for (size_t i = 0; i < sizes.size(); ++i) {
              if (ctx.needs_grad(static_cast<int>(i)))
                ctx.set_grad(static_cast<int>(i), ctx.grad_output().narrow(d, o, sizes[i]));
              o += sizes[i];
            }
          });
        return out;
      },
      tensors, dim);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), ValueError, "stack: expected a non-empty list of tensors");
  const int d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].shape() == tensors[0].shape(), ShapeError, "stack: tensor ", i, " has shape ",
                tensors[i].shape().str(), " but tensor 0 has ", tensors[0].shape().str(), "; stack needs equal shapes");
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int d = wrap_dim(dim, x.dim(), "split");
  EMBER_CHECK(split_size > 0, ValueError, "split: split_size must be positive, got ", split_size);
  std::vector<int64_t> sizes;
  const int64_t n = x.shape()[d];
  for (int64_t s = 0; s < n; s += split_size) sizes.push_back(std::min(split_size, n - s));
  if (n == 0) sizes.push_back(0);
  return split(x, sizes, d);
}

constexpr OpDef split_op{.name = "split", .onnx = lower_split};
EMBER_REGISTER_OP(split_op);

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return op::call_captured<split_op>(
      [&](const auto&...) -> std::vector<Tensor> {
        const int d = wrap_dim(dim, x.dim(), "split");
        int64_t total = 0;
        for (int64_t s : sizes) {
          EMBER_CHECK(s >= 0, ValueError, "split: sizes must be non-negative, got ", s);
          total += s;
        }
        EMBER_CHECK(total == x.shape()[d], ShapeError, "split: sizes add up to ", total, " but dim ", d, " of shape ",
                    x.shape().str(), " has ", x.shape()[d]);
        // Views of x, with one backward node for all of them: the gradient of x is
        // the pieces' gradients concatenated (zeros for pieces that got none),
        // one copy instead of a zero-filled x per piece.
        const bool grad = autograd::needs_grad({x});
        const Tensor base = grad ? x.detach() : x;
        std::vector<Tensor> out;
        int64_t off = 0;
        for (int64_t s : sizes) {
          out.push_back(base.narrow(d, off, s));
          off += s;
        }
        if (grad && x.is_floating_point())
          autograd::record("split", {x}, out, [d, n = out.size()](autograd::BackwardContext& ctx) {
            std::vector<Tensor> g;
            for (size_t i = 0; i < n; ++i) g.push_back(ctx.grad_output(static_cast<int>(i)));
            ctx.set_grad(0, cat(g, d));
          });
        return out;
      },
      x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  EMBER_CHECK(chunks > 0, ValueError, "chunk: chunks must be positive, got ", chunks);
  const int d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.shape()[d];
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

constexpr OpDef pad_op{.name = "pad", .onnx = lower_pad};
EMBER_REGISTER_OP(pad_op);

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  return op::call_captured<pad_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(pads.size() % 2 == 0 && static_cast<int>(pads.size()) / 2 <= x.dim(), ShapeError,
                    "pad: expected an even number of pads covering at most ", x.dim(), " dims, got ", pads.size(),
                    " for shape ", x.shape().str());
        Shape out_shape = x.shape();
        Shape start = Shape::filled(x.dim(), 0);
        for (size_t i = 0; i < pads.size() / 2; ++i) {
          const int d = x.dim() - 1 - static_cast<int>(i);
          EMBER_CHECK(pads[2 * i] >= 0 && pads[2 * i + 1] >= 0, ValueError,
                      "pad: negative padding (cropping) is not supported, got ", pads[2 * i], ", ", pads[2 * i + 1]);
          out_shape[d] += pads[2 * i] + pads[2 * i + 1];
          start[d] = pads[2 * i];
        }
        Tensor out = empty(out_shape, TensorOptions(x.dtype(), x.device()));
        out.fill_(value);
        int64_t off = out.offset();
        for (int d = 0; d < x.dim(); ++d) off += start[d] * out.strides()[d];
        Tensor inner = make_view(out, x.shape(), out.strides(), off);
        if (x.numel()) copy_kernel(x.device(), x, inner);
        if (autograd::needs_grad({x})) {
          const Shape in_shape = x.shape();
          autograd::record("pad", {x}, out, [start, in_shape](autograd::BackwardContext& ctx) {
            Tensor g = ctx.grad_output();
            for (int d = 0; d < in_shape.size(); ++d) g = g.narrow(d, start[d], in_shape[d]);
            ctx.set_grad(0, g);
          });
        }
        return out;
      },
      x, pads, value);
}

}  // namespace ember
