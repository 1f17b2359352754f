// Max/min (values and indices), amax/amin, argmax/argmin, var/std and
// logsumexp. One CPU kernel scans rows of the shared [A, R, B] layout for
// the extreme value and its first index (a NaN counts as the extreme, as in
// PyTorch); the statistics are composed from sum/mean so their backward
// comes from the ops they are made of.
#include <cmath>
#include <limits>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/reduce.h>
#include <ember/ops/reduce_layout.h>

namespace ember {

decltype(minmax_kernel) minmax_kernel("max/min");

namespace {

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  else
    return false;
}

void cpu_minmax(const Tensor& x3, Tensor& values2, Tensor& indices2, bool is_max) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  dispatch_numeric(x3.dtype(), is_max ? "max" : "min", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    T* v = static_cast<T*>(values2.data_ptr());
    int64_t* ix = indices2.defined() ? static_cast<int64_t*>(indices2.data_ptr()) : nullptr;
    parallel_for(0, A * B, std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const T* xr = x + (row / B) * R * B + row % B;
        T best = xr[0];
        int64_t bi = 0;
        for (int64_t r = 1; r < R && !is_nan(best); ++r) {
          const T c = xr[r * B];
          if (is_nan(c) || (is_max ? c > best : c < best)) {
            best = c;
            bi = r;
          }
        }
        v[row] = best;
        if (ix) ix[row] = bi;
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(minmax_kernel, CPU, cpu_minmax);

namespace {

// Values (and optionally indices) of the extreme over dims, no autograd.
void extreme(const Tensor& x, const Shape& dims, bool keepdim, bool is_max, bool want_indices, const char* op,
             Tensor& values, Tensor& indices, ReduceLayout& L) {
  EMBER_CHECK(x.dtype() != DType::Bool, DTypeError, op, ": not supported for bool tensors");
  L = reduce_layout(x, dims, keepdim, op);
  EMBER_CHECK(L.R > 0, IndexError, op, ": cannot reduce over a zero-size dim (input shape ", x.shape().str(), ")");
  values = empty(L.out_shape, TensorOptions(x.dtype(), x.device()));
  Tensor v2 = values.view({L.A, L.B});
  Tensor i2;
  if (want_indices) {
    indices = empty(L.out_shape, TensorOptions(DType::Int64, x.device()));
    i2 = indices.view({L.A, L.B});
  }
  minmax_kernel(x.device(), L.x3, v2, i2, is_max);
}

// amax/amin: the gradient is split evenly among tied extremes.
Tensor amaxmin(const Tensor& x, const Shape& dims, bool keepdim, bool is_max) {
  const char* op = is_max ? "amax" : "amin";
  Tensor values, indices;
  ReduceLayout L;
  extreme(x, dims, keepdim, is_max, false, op, values, indices, L);
  if (autograd::needs_grad({x})) {
    const Shape keep = L.keep_shape;
    std::vector<int64_t> rdims;
    for (int i = 0; i < x.dim(); ++i)
      if (L.reduced[i]) rdims.push_back(i);
    autograd::record(op, {x}, values,
                     [sx = autograd::SavedTensor(x), sv = autograd::SavedTensor(values), keep,
                      rd = Shape(rdims)](autograd::BackwardContext& ctx) {
                       const Tensor& xv = sx.get();
                       const Tensor hit = eq(xv, sv.get().reshape(keep)).to(xv.dtype());
                       const Tensor count = sum(hit, rd, true);
                       ctx.set_grad(0, mul(hit, div(ctx.grad_output().reshape(keep), count)));
                     });
  }
  return values;
}

// max/min along one dim: the gradient goes to the returned index, as a
// one-hot of the index along dim (keep: the values' shape with dim kept as
// 1) times the gradient.
void minmax_dim_backward(autograd::BackwardContext& ctx, const Tensor& indices, const Shape& keep,
                         const Shape& in_shape, int d) {
  const Tensor& g = ctx.grad_output();
  if (in_shape.size() == 0) {
    ctx.set_grad(0, g);
    return;
  }
  Shape pos_shape = Shape::filled(in_shape.size(), 1);
  pos_shape[d] = in_shape[d];
  const Tensor pos =
      arange(static_cast<double>(in_shape[d]), TensorOptions(DType::Int64, g.device())).reshape(pos_shape);
  const Tensor hit = eq(pos, indices.reshape(keep)).to(g.dtype());
  ctx.set_grad(0, mul(hit, g.reshape(keep)));
}

// max/min along one dim, with the index of each value.
ValuesIndices minmax_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  const int d = wrap_dim(dim, x.dim(), op);
  Tensor values, indices;
  ReduceLayout L;
  extreme(x, Shape{d}, keepdim, is_max, true, op, values, indices, L);
  if (autograd::needs_grad({x})) {
    const Shape keep = L.keep_shape, in_shape = x.shape();
    autograd::record(op, {x}, values, [indices, keep, in_shape, d](autograd::BackwardContext& ctx) {
      minmax_dim_backward(ctx, indices, keep, in_shape, d);
    });
  }
  return {values, indices};
}

Tensor var_body(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  EMBER_CHECK(x.is_floating_point(), DTypeError, "var: expected a floating-point tensor, got ", dtype_name(x.dtype()));
  // Two passes: the mean first, then squared deviations from it (no
  // cancellation, unlike E[x^2] - E[x]^2).
  const Tensor mu = mean(x, dims, true);
  const Tensor ss = sum(square(sub(x, mu)), dims, keepdim);
  const int64_t n = ss.numel() ? x.numel() / ss.numel() : 0;
  return div(ss, static_cast<double>(std::max<int64_t>(n - correction, 0)));
}

Tensor std_body(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return sqrt(var_body(x, dims, correction, keepdim));
}

Tensor logsumexp_body(const Tensor& x, const Shape& dims, bool keepdim) {
  EMBER_CHECK(x.is_floating_point(), DTypeError, "logsumexp: expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  // lse(x) = m + log sum exp(x - m) for any constant m; m = max keeps exp
  // from overflowing. m is a constant for autograd (lse's gradient,
  // softmax(x), does not depend on it); an infinite max is replaced by 0.
  Tensor m;
  {
    NoGradGuard no_grad;
    m = amax(x, dims, true);
    m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0.0);
  }
  Tensor out = add(log(sum(exp(sub(x, m)), dims, true)), m);
  if (!keepdim) {
    const ReduceLayout L = reduce_layout(x, dims, false, "logsumexp");
    out = out.reshape(L.out_shape);
  }
  return out;
}

// 16-bit inputs on float32 copies: extremes exactly (an extreme is one of
// its inputs), the statistics' sums in float32, each rounded once.
namespace {
void lower_amaxmin(lowering::Graph& g, const lowering::Call& c) {
  lowering::reduce_node(g, c, c.i(3) ? "ReduceMax" : "ReduceMin", false);
}
// max/min along a dim: the values and their first index.
void lower_minmax_dim(lowering::Graph& g, const lowering::Call& c) {
  const std::string x = g.value(c.tensor(0));
  const bool is_max = c.i(3);
  const std::vector<lowering::Attr> keep{{"keepdims", c.i(2)}};
  g.bind(c.outputs[0], g.node(is_max ? "ReduceMax" : "ReduceMin", {x},
                              {{"axes", std::vector<int64_t>{c.i(1)}}, {"keepdims", c.i(2)}})[0]);
  g.bind(c.outputs[1], g.node(is_max ? "ArgMax" : "ArgMin", {x}, {{"axis", c.i(1)}, {"keepdims", c.i(2)}})[0]);
}
// var = sum((x - mean)^2) / (n - correction) over the dims; std its square root.
std::string var_value(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  std::vector<int64_t> axes = c.ints(1);
  if (axes.empty())
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  int64_t n = 1;
  for (int64_t a : axes) n *= x.size(a);
  const std::string v = g.value(x);
  const std::string m = g.node("ReduceMean", {v}, {{"axes", axes}, {"keepdims", int64_t{1}}})[0];
  const std::string d = g.node("Sub", {v, m})[0];
  const std::string ss = g.node("ReduceSumSquare", {d}, {{"axes", axes}, {"keepdims", c.i(3)}})[0];
  return g.node("Div", {ss, g.scalar(static_cast<double>(n - c.i(2)), x.dtype())})[0];
}
void lower_var(lowering::Graph& g, const lowering::Call& c) { g.bind(c.outputs[0], var_value(g, c)); }
void lower_std(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Sqrt", {var_value(g, c)})[0]);
}
void lower_logsumexp(lowering::Graph& g, const lowering::Call& c) {
  lowering::reduce_node(g, c, "ReduceLogSumExp", false);
}
}  // namespace

constexpr OpDef amax_op{.name = "amax", .half = Half::Float32, .onnx = lower_amaxmin};
constexpr OpDef amin_op{.name = "amin", .half = Half::Float32, .onnx = lower_amaxmin};
constexpr OpDef max_op{.name = "max", .half = Half::Float32, .onnx = lower_minmax_dim};
constexpr OpDef min_op{.name = "min", .half = Half::Float32, .onnx = lower_minmax_dim};
constexpr OpDef var_op{.name = "var", .half = Half::Float32, .onnx = lower_var};
constexpr OpDef std_op{.name = "std", .half = Half::Float32, .onnx = lower_std};
constexpr OpDef logsumexp_op{.name = "logsumexp", .half = Half::Float32, .onnx = lower_logsumexp};
EMBER_REGISTER_OP(amax_op);
EMBER_REGISTER_OP(amin_op);
EMBER_REGISTER_OP(max_op);
EMBER_REGISTER_OP(min_op);
EMBER_REGISTER_OP(var_op);
EMBER_REGISTER_OP(std_op);
EMBER_REGISTER_OP(logsumexp_op);

}  // namespace

// max/min along a dim on float32 copies: the values rounded back, the
// indices as they are.
static ValuesIndices round_half_result(ValuesIndices r, DType dt) { return {r.values.to(dt), r.indices}; }

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return op::call<amax_op>(amaxmin, x, dims, keepdim, true);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return op::call<amin_op>(amaxmin, x, dims, keepdim, false);
}
Tensor max(const Tensor& x) { return amax(x, Shape{}, false); }
Tensor min(const Tensor& x) { return amin(x, Shape{}, false); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return op::call<max_op>(minmax_dim, x, dim, keepdim, true);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return op::call<min_op>(minmax_dim, x, dim, keepdim, false);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return max(x, dim, keepdim).indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return min(x, dim, keepdim).indices;
}
Tensor argmax(const Tensor& x) {
  NoGradGuard no_grad;
  return max(x.reshape({-1}), 0, false).indices;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return op::call<var_op>(var_body, x, dims, correction, keepdim);
}

Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return op::call<std_op>(std_body, x, dims, correction, keepdim);
}

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  return op::call<logsumexp_op>(logsumexp_body, x, dims, keepdim);
}

}  // namespace ember
