// Sum and mean: forward, backward and CPU kernels, plus the [A, R, B] layout
// every reduction shares and sum_to for the autograd engine.
#include <ember/ops/reduce.h>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/reduce_layout.h>

namespace ember {

ReduceLayout reduce_layout(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  ReduceLayout L;
  const int nd = x.dim();
  L.reduced.assign(static_cast<size_t>(nd), dims.empty());
  for (int64_t d : dims) {
    const int w = wrap_dim(d, nd, op);
    if (nd == 0) continue;
    EMBER_CHECK(!L.reduced[w], IndexError, op, ": dim ", d, " appears more than once in ", dims.str());
    L.reduced[w] = true;
  }
  for (int i = 0; i < nd; ++i) {
    if (L.reduced[i]) {
      L.keep_shape.push_back(1);
      if (keepdim) L.out_shape.push_back(1);
    } else {
      L.keep_shape.push_back(x.shape()[i]);
      L.out_shape.push_back(x.shape()[i]);
    }
  }
  // Find whether reduced dims form one adjacent block.
  int first = -1, last = -1;
  for (int i = 0; i < nd; ++i)
    if (L.reduced[i]) {
      if (first < 0) first = i;
      last = i;
    }
  bool block = first >= 0;
  for (int i = first; block && i <= last; ++i)
    if (!L.reduced[i]) block = false;
  Tensor plain = x.detach();
  if (first < 0) {  // nothing to reduce (0-dim input)
    L.A = x.numel();
    L.x3 = plain.contiguous().view({L.A, 1, 1});
    return L;
  }
  if (block) {
    for (int i = 0; i < first; ++i) L.A *= x.shape()[i];
    for (int i = first; i <= last; ++i) L.R *= x.shape()[i];
    for (int i = last + 1; i < nd; ++i) L.B *= x.shape()[i];
    L.x3 = plain.contiguous().view({L.A, L.R, L.B});
    return L;
  }
  Shape perm;
  for (int i = 0; i < nd; ++i)
    if (!L.reduced[i]) {
      perm.push_back(i);
      L.A *= x.shape()[i];
    }
  for (int i = 0; i < nd; ++i)
    if (L.reduced[i]) {
      perm.push_back(i);
      L.R *= x.shape()[i];
    }
  L.x3 = plain.permute(perm).contiguous().view({L.A, L.R, 1});
  return L;
}

// ---- sum kernel: out[a, b] = sum_r x[a, r, b] --------------------------------
decltype(sum_kernel) sum_kernel("sum");

namespace {

void cpu_sum(const Tensor& x3, Tensor& out) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  dispatch_numeric_and_half(x3.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    // Accumulate in double (float inputs) for accuracy on long rows; the
    // loop is memory bound, so it costs nothing measurable. bfloat16 and
    // float16 load as float32 and are rounded once, at the store (through
    // float32, as PyTorch's), without a float32 copy of the input: a bf16
    // linear's bias gradient sums the whole [rows, out] output gradient.
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
    const T* x = static_cast<const T*>(x3.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    if (B == 1) {
      parallel_for(0, A, std::max<int64_t>(1, 32768 / std::max<int64_t>(R, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t a = lo; a < hi; ++a) {
          const T* row = x + a * R;
          Acc s[4] = {0, 0, 0, 0};
          int64_t r = 0;
          for (; r + 4 <= R; r += 4) {
            s[0] += row[r];
            s[1] += row[r + 1];
            s[2] += row[r + 2];
            s[3] += row[r + 3];
          }
          for (; r < R; ++r) s[0] += row[r];
          o[a] = static_cast<T>((s[0] + s[1]) + (s[2] + s[3]));
        }
      });
      return;
    }
    // Columns: add whole rows of B at a time, so the inner loop is contiguous.
    const int64_t bchunk = 1024;
    const int64_t nb = (B + bchunk - 1) / bchunk;
    parallel_for(0, A * nb, std::max<int64_t>(1, 32768 / std::max<int64_t>(R * std::min(B, bchunk), 1)),
                 [&](int64_t lo, int64_t hi) {
                   std::vector<Acc> acc(static_cast<size_t>(std::min(B, bchunk)));
                   for (int64_t t = lo; t < hi; ++t) {
                     const int64_t a = t / nb, b0 = (t % nb) * bchunk, nbk = std::min(bchunk, B - b0);
                     std::fill(acc.begin(), acc.begin() + nbk, Acc(0));
                     for (int64_t r = 0; r < R; ++r) {
                       const T* row = x + (a * R + r) * B + b0;
                       for (int64_t b = 0; b < nbk; ++b) acc[b] += row[b];
                     }
                     for (int64_t b = 0; b < nbk; ++b) o[a * B + b0 + b] = static_cast<T>(acc[b]);
                   }
                 });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(sum_kernel, CPU, cpu_sum);
EMBER_REGISTER_HALF_KERNEL(sum_kernel, CPU);

using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;

namespace {

Tensor sum_body(const Tensor& x, const Shape& dims, bool keepdim) {
  Tensor in = x.dtype() == DType::Bool ? x.to(DType::Int64) : x;
  ReduceLayout L = reduce_layout(in, dims, keepdim, "sum");
  Tensor out = empty(L.out_shape, TensorOptions(in.dtype(), in.device()));
  Tensor o2 = out.view({L.A, L.B});
  if (L.R == 0)
    o2.zero_();
  else
    sum_kernel(in.device(), L.x3, o2);
  if (needs_grad({x})) {
    const Shape keep = L.keep_shape, in_shape = x.shape();
    record("sum", {x}, out, [keep, in_shape](BackwardContext& ctx) {
      // Every input element contributed once: broadcast the gradient back.
      ctx.set_grad(0, ctx.grad_output().reshape(keep).expand(in_shape));
    });
  }
  return out;
}

Tensor mean_body(const Tensor& x, const Shape& dims, bool keepdim) {
  EMBER_CHECK(x.is_floating_point(), DTypeError, "mean: expected a floating-point tensor, got ", dtype_name(x.dtype()));
  const Tensor s = sum(x, dims, keepdim);
  const int64_t count = s.numel() ? x.numel() / s.numel() : 0;
  return mul(s, 1.0 / static_cast<double>(count));
}

// A 16-bit input is accumulated in float32: by the kernel itself where the
// device's is marked, on a float32 copy otherwise.
namespace {
void lower_sum(lowering::Graph& g, const lowering::Call& c) { lowering::reduce_node(g, c, "ReduceSum", true); }
void lower_mean(lowering::Graph& g, const lowering::Call& c) { lowering::reduce_node(g, c, "ReduceMean", false); }
}  // namespace

constexpr OpDef sum_op{.name = "sum",
                       .autocast = Autocast::Float32,
                       .half = Half::NativeWhere,
                       .native_half = op::marked<sum_kernel>,
                       .onnx = lower_sum};
// On the CPU a 16-bit mean stays on a float32 copy and rounds once, as
// PyTorch's; elsewhere the 16-bit sum then a 16-bit division round twice, as
// CUDA's does (docs/PRECISION.md).
constexpr OpDef mean_op{.name = "mean",
                        .autocast = Autocast::Float32,
                        .half = Half::NativeWhere,
                        .native_half = [](Device d) { return !d.is_cpu() && takes_half(sum_kernel, d); },
                        .onnx = lower_mean};
EMBER_REGISTER_OP(sum_op);
EMBER_REGISTER_OP(mean_op);

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) { return op::call<sum_op>(sum_body, x, dims, keepdim); }
Tensor sum(const Tensor& x) { return sum(x, Shape{}, false); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) { return op::call<mean_op>(mean_body, x, dims, keepdim); }
Tensor mean(const Tensor& x) { return mean(x, Shape{}, false); }

// The methods (core/tensor.h) are the free functions.
Tensor Tensor::sum() const { return ember::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return ember::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return ember::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return ember::mean(*this, dims, keepdim); }
Tensor Tensor::argmax() const { return ember::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return ember::argmax(*this, dim, keepdim); }

namespace autograd {
Tensor sum_to(const Tensor& grad, const Shape& shape) {
  // Sum the leading dims broadcasting added, and dims that were 1 in shape.
  const int lead = grad.dim() - shape.size();
  Shape dims;
  for (int i = 0; i < grad.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) dims.push_back(i);
  if (dims.empty()) return grad.reshape(shape);
  return sum(grad, dims, true).reshape(shape);
}
}  // namespace autograd

}  // namespace ember
