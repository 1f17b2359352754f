// Losses: mse_loss, cross_entropy, nll_loss and
// binary_cross_entropy_with_logits, with their CPU kernels.
//
// cross_entropy and nll_loss see their input as a contiguous [N, C, L] block
// (L = product of the trailing dims d1..., 1 for (N, C) input) and their
// target as [N * L] rows; each row is one classification. Targets are checked
// (in [0, C) or ignore_index) in one scan that also counts the rows that
// take part, which is the mean's denominator. Each op records one autograd
// node whose output is already reduced, so the backward kernel applies the
// reduction's scale itself: no chain of sum / div nodes. Where the index
// check leaves its count on the device (CUDA), cross_entropy's kernels
// also reduce the rows (forward) and divide by that count (backward) in
// their own launches.
#include <ember/ops/functors.h>
#include <ember/ops/loss.h>

#include <algorithm>
#include <cmath>

#include <ember/core/autograd.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/cpu_loops.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/indexing.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/reduce.h>

namespace ember {

decltype(cross_entropy_kernel) cross_entropy_kernel("cross_entropy");
decltype(cross_entropy_backward_kernel) cross_entropy_backward_kernel("cross_entropy_backward");
decltype(nll_loss_kernel) nll_loss_kernel("nll_loss");
decltype(nll_loss_backward_kernel) nll_loss_backward_kernel("nll_loss_backward");
decltype(bce_with_logits_kernel) bce_with_logits_kernel("binary_cross_entropy_with_logits");
decltype(bce_with_logits_backward_kernel) bce_with_logits_backward_kernel("binary_cross_entropy_with_logits_backward");

// ---- CPU kernels ------------------------------------------------------------
namespace {

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(C, 1)); }

// One sweep for the max and the sum of the logits of a row, one for the sum
// of exp(x - max); accumulated in double.
template <class T>
inline void row_logsumexp(const T* row, int64_t C, int64_t stride, bool want_sum, double& lse, double& sumx) {
  T m = row[0];
  double s = 0;
#pragma omp simd reduction(max : m) reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) {
    const T v = row[c * stride];
    m = v > m ? v : m;
    s += v;
  }
  double e = 0;
#pragma omp simd reduction(+ : e)
  for (int64_t c = 0; c < C; ++c) e += fn::hd::exp(row[c * stride] - m);
  lse = static_cast<double>(m) + std::log(e);
  sumx = want_sum ? s : 0.0;
}

void cpu_cross_entropy(const Tensor& logits3, const Tensor& target, const Tensor& count, Tensor& loss, Tensor& lse,
                       Tensor& reduced, int64_t ignore, double eps) {
  const int64_t N = logits3.size(0), C = logits3.size(1), L = logits3.size(2);
  const int64_t* t = target.data<int64_t>();
  // loss = lse - (1 - eps) x_t - eps / C * sum_c x_c: the smoothed target
  // distribution q = (1 - eps) onehot + eps / C, and -sum_c q_c log p_c with
  // log p_c = x_c - lse (sum_c q_c = 1, so the lse term is lse once).
  const double keep = 1.0 - eps, spread = C > 0 ? eps / static_cast<double>(C) : 0.0;
  const bool smooth = eps > 0;  // skip sum x when eps = 0: 0 * -inf would be NaN
  dispatch_floating(logits3.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits3.data_ptr());
    T* lo = static_cast<T*>(loss.data_ptr());
    T* ls = static_cast<T*>(lse.data_ptr());
    parallel_for(0, N * L, row_grain(C), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t tr = t[r];
        if (tr == ignore) {
          lo[r] = T(0);
          ls[r] = T(0);
          continue;
        }
        const T* row = x + (r / L) * C * L + r % L;
        double l, sx;
        if (L == 1)
          row_logsumexp(row, C, 1, smooth, l, sx);
        else
          row_logsumexp(row, C, L, smooth, l, sx);
        ls[r] = static_cast<T>(l);
        lo[r] = static_cast<T>(l - keep * static_cast<double>(row[tr * L]) - spread * sx);
      }
    });
    if (reduced.defined()) {  // rows in order, in double
      double total = 0;
      for (int64_t r = 0; r < N * L; ++r) total += static_cast<double>(lo[r]);
      const T s = static_cast<T>(total);
      *static_cast<T*>(reduced.data_ptr()) = count.defined() ? s / static_cast<T>(count.data<int64_t>()[0]) : s;
    }
  });
}

void cpu_cross_entropy_backward(const Tensor& logits3, const Tensor& target, const Tensor& lse, const Tensor& grad,
                                const Tensor& count, Tensor& dlogits3, int64_t ignore, double eps, double scale) {
  const int64_t N = logits3.size(0), C = logits3.size(1), L = logits3.size(2);
  const int64_t* t = target.data<int64_t>();
  const bool per_row = grad.numel() != 1;
  dispatch_floating(logits3.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits3.data_ptr());
    const T* ls = static_cast<const T*>(lse.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    T* d = static_cast<T*>(dlogits3.data_ptr());
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(C > 0 ? eps / static_cast<double>(C) : 0.0);
    const T cnt = count.defined() ? static_cast<T>(count.data<int64_t>()[0]) : T(1);
    parallel_for(0, N * L, row_grain(C), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t off = (r / L) * C * L + r % L, tr = t[r];
        const T* row = x + off;
        T* drow = d + off;
        if (tr == ignore) {
          for (int64_t c = 0; c < C; ++c) drow[c * L] = T(0);
          continue;
        }
        // d loss / d x_c = softmax_c - q_c with q the smoothed target.
        const T gc = count.defined() ? g[per_row ? r : 0] / cnt : g[per_row ? r : 0];
        const T gr = static_cast<T>(static_cast<double>(gc) * scale), l = ls[r];
        if (L == 1) {
          for (int64_t c = 0; c < C; ++c) drow[c] = (fn::hd::exp(row[c] - l) - spread) * gr;
        } else {
          for (int64_t c = 0; c < C; ++c) drow[c * L] = (fn::hd::exp(row[c * L] - l) - spread) * gr;
        }
        drow[tr * L] -= keep * gr;
      }
    });
  });
}

void cpu_nll_loss(const Tensor& lp3, const Tensor& target, Tensor& loss, int64_t ignore) {
  const int64_t N = lp3.size(0), C = lp3.size(1), L = lp3.size(2);
  const int64_t* t = target.data<int64_t>();
  dispatch_floating(lp3.dtype(), "nll_loss", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(lp3.data_ptr());
    T* lo = static_cast<T*>(loss.data_ptr());
    parallel_for(0, N * L, 32768, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) lo[r] = t[r] == ignore ? T(0) : -x[(r / L) * C * L + t[r] * L + r % L];
    });
  });
}

void cpu_nll_loss_backward(const Tensor& target, const Tensor& grad, Tensor& dlp3, int64_t ignore, double scale) {
  const int64_t N = dlp3.size(0), C = dlp3.size(1), L = dlp3.size(2);
  const int64_t* t = target.data<int64_t>();
  const bool per_row = grad.numel() != 1;
  dispatch_floating(dlp3.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad.data_ptr());
    T* d = static_cast<T*>(dlp3.data_ptr());
    // Whole samples n per task, so zeroing and the writes stay in one thread.
    parallel_for(0, N, row_grain(C * L), [&](int64_t n0, int64_t n1) {
      std::fill(d + n0 * C * L, d + n1 * C * L, T(0));
      for (int64_t r = n0 * L; r < n1 * L; ++r)
        if (t[r] != ignore)
          d[(r / L) * C * L + t[r] * L + r % L] = static_cast<T>(-static_cast<double>(g[per_row ? r : 0]) * scale);
    });
  });
}

void cpu_bce_with_logits(const Tensor& x, const Tensor& t, const Tensor& pw, Tensor& out) {
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits", [&](auto tag) {
    using T = decltype(tag);
    if (pw.defined())
      cpu::map<T, T, T, T>(out, {&x, &t, &pw}, [](T a, T b, T w) { return fn::bce_with_logits(a, b, w); });
    else
      cpu::map<T, T, T>(out, {&x, &t}, [](T a, T b) { return fn::bce_with_logits(a, b); });
  });
}

void cpu_bce_with_logits_backward(const Tensor& x, const Tensor& t, const Tensor& pw, const Tensor& g, Tensor& out,
                                  int wrt) {
  dispatch_floating(x.dtype(), "binary_cross_entropy_with_logits_backward", [&](auto tag) {
    using T = decltype(tag);
    if (wrt == 0) {
      if (pw.defined())
        cpu::map<T, T, T, T, T>(out, {&x, &t, &pw, &g},
                                [](T a, T b, T w, T gy) { return gy * fn::bce_with_logits_dx(a, b, w); });
      else
        cpu::map<T, T, T, T>(out, {&x, &t, &g}, [](T a, T b, T gy) { return gy * (fn::Sigmoid{}(a)-b); });
    } else if (wrt == 1) {
      if (pw.defined())
        cpu::map<T, T, T, T>(out, {&x, &pw, &g}, [](T a, T w, T gy) { return gy * fn::bce_with_logits_dt(a, w); });
      else
        cpu::map<T, T, T>(out, {&x, &g}, [](T a, T gy) { return -gy * a; });
    } else {
      cpu::map<T, T, T, T>(out, {&x, &t, &g}, [](T a, T b, T gy) { return gy * fn::bce_with_logits_dpw(a, b); });
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(cross_entropy_kernel, CPU, cpu_cross_entropy);
EMBER_REGISTER_KERNEL(cross_entropy_backward_kernel, CPU, cpu_cross_entropy_backward);
EMBER_REGISTER_KERNEL(nll_loss_kernel, CPU, cpu_nll_loss);
EMBER_REGISTER_KERNEL(nll_loss_backward_kernel, CPU, cpu_nll_loss_backward);
EMBER_REGISTER_KERNEL(bce_with_logits_kernel, CPU, cpu_bce_with_logits);
EMBER_REGISTER_KERNEL(bce_with_logits_backward_kernel, CPU, cpu_bce_with_logits_backward);

// ---- ops --------------------------------------------------------------------
using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

Tensor reduce_loss(const Tensor& per_element, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return per_element;
    case Reduction::Sum:
      return sum(per_element);
    case Reduction::Mean:
      return mean(per_element);
  }
  return per_element;
}

// The (N, C, d1...) / (N, d1...) layout of cross_entropy and nll_loss, and
// the target check. `input_name` is "logits" or "log_probs".
struct ClassRows {
  Tensor x3;      // [N, C, L], contiguous, no autograd
  Tensor target;  // [N * L], contiguous
  int64_t count;  // rows whose target is not ignore_index
  // The same count on the device where the index check leaves it there
  // (CUDA): the mean then divides by it there, so nothing is read back and
  // the loss can be captured in a CUDA graph. Undefined on the CPU.
  Tensor count_device;
};

ClassRows class_rows(const char* op, const char* input_name, const Tensor& input, const Tensor& target,
                     int64_t ignore_index) {
  EMBER_CHECK(input.is_floating_point(), DTypeError, op, ": ", input_name, " must be floating point, got ",
              dtype_name(input.dtype()), " (", input_name, " shape ", input.shape().str(), ", target shape ",
              target.shape().str(), ")");
  EMBER_CHECK(target.dtype() == DType::Int64, DTypeError, op, ": target must hold int64 class indices, got ",
              dtype_name(target.dtype()), " (", input_name, " shape ", input.shape().str(), ", target shape ",
              target.shape().str(), "); class-probability targets are not supported");
  check_same_device(op, input, target);
  EMBER_CHECK(input.dim() >= 1, ShapeError, op, ": ", input_name, " must have a class dim, got shape ",
              input.shape().str(), " (target shape ", target.shape().str(), ")");
  // Expected target shape: input's without the class dim (dim 1, or dim 0 for 1-D input).
  Shape expect = input.shape();
  expect.erase(input.dim() == 1 ? 0 : 1);
  EMBER_CHECK(target.shape() == expect, ShapeError, op, ": ", input_name, " shape ", input.shape().str(),
              " and target shape ", target.shape().str(), " do not match (expected target shape ", expect.str(), ")");
  const int64_t N = input.dim() == 1 ? 1 : input.size(0), C = input.size(input.dim() == 1 ? 0 : 1);
  int64_t L = 1;
  for (int i = 2; i < input.dim(); ++i) L *= input.size(i);
  ClassRows rows;
  rows.target = target.contiguous().view({N * L});
  if (auto bad = find_bad_index(rows.target, C, ignore_index, &rows.count, &rows.count_device))
    EMBER_CHECK(false, IndexError, op, ": target ", *bad, " is out of range for ", C, " classes (expected in [0, ", C,
                ") or ignore_index ", ignore_index, "; ", input_name, " shape ", input.shape().str(), ", target shape ",
                target.shape().str(), ")");
  rows.x3 = input.detach().contiguous().view({N, C, L});
  return rows;
}

// Reduces per-row losses [N * L]; mean divides by the rows that take part
// (0 / 0 = NaN when none does, as in PyTorch).
Tensor reduce_rows(const Tensor& loss, const Shape& target_shape, Reduction reduction, const ClassRows& rows) {
  switch (reduction) {
    case Reduction::None:
      return loss.view(target_shape);
    case Reduction::Sum:
      return sum(loss);
    case Reduction::Mean:
      if (rows.count_device.defined()) return div(sum(loss), rows.count_device.to(loss.dtype()));
      return div(sum(loss), static_cast<double>(rows.count));
  }
  return loss;
}

// The dtype of cross_entropy's per-row losses and logsumexps for logits of dt.
DType lse_dtype(DType dt) { return is_half(dt) ? DType::Float32 : dt; }

// The gradient of a reduced loss w.r.t. each row's loss is g (None: one per
// row), times 1 / count for the mean. The kernels take g contiguous in the
// loss's dtype and apply the scale.

// With the count on the device (ClassRows::count_device), the mean's 1 /
// count goes into g there, and the kernels' scale is 1.
Tensor row_grad(BackwardContext& ctx, DType dt, Reduction reduction, const Tensor& count_device) {
  Tensor g = ctx.grad_output();
  if (g.dtype() != dt) g = g.to(dt);
  if (reduction == Reduction::Mean && count_device.defined()) g = div(g, count_device.to(dt));
  return g.contiguous();
}
double row_scale(Reduction reduction, int64_t count, const Tensor& count_device) {
  return reduction == Reduction::Mean && !count_device.defined() ? 1.0 / static_cast<double>(count) : 1.0;
}

Tensor mse_loss_body(const Tensor& input, const Tensor& target, Reduction reduction) {
  EMBER_CHECK(input.is_floating_point(), DTypeError, "mse_loss: input must be floating point, got ",
              dtype_name(input.dtype()), " (input shape ", input.shape().str(), ")");
  EMBER_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: input shape ", input.shape().str(),
              " and target shape ", target.shape().str(), " must be equal");
  check_same_device("mse_loss", input, target);
  // d/dinput (input - target)^2 = 2 (input - target); the sub, square and
  // reduction ops record their own backward.
  return reduce_loss(square(sub(input, target)), reduction);
}

Tensor cross_entropy_body(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                          double label_smoothing) {
  EMBER_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
              "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  ClassRows rows = class_rows("cross_entropy", "logits", logits, target, ignore_index);
  const int64_t R = rows.target.numel();
  const DType acc = lse_dtype(logits.dtype());
  const TensorOptions opts(acc, logits.device());
  Tensor loss = empty({R}, opts), lse = empty({R}, opts);
  // Where the count stays on the device, the kernel reduces the rows too
  // (dividing by that count for the mean); elsewhere the sum and division
  // are ops of their own.
  const bool fused = reduction != Reduction::None && rows.count_device.defined() && R > 0;
  Tensor reduced = fused ? empty({}, opts) : Tensor();
  const Tensor divisor = fused && reduction == Reduction::Mean ? rows.count_device : Tensor();
  if (R > 0)
    cross_entropy_kernel(logits.device(), rows.x3, rows.target, divisor, loss, lse, reduced, ignore_index,
                         label_smoothing);
  Tensor out = fused ? reduced : reduce_rows(loss, target.shape(), reduction, rows);
  if (needs_grad({logits})) {
    record("cross_entropy", {logits}, out,
           [sx = SavedTensor(rows.x3), st = SavedTensor(rows.target), slse = SavedTensor(lse), reduction, ignore_index,
            label_smoothing, count = rows.count, cd = rows.count_device](BackwardContext& ctx) {
             // loss_r = lse_r - (1 - eps) x_t - eps / C sum_c x_c, so
             // d loss_r / d x_c = softmax_c - (1 - eps) [c == t] - eps / C;
             // times g_r (and 1 / count for the mean); ignored rows get 0.
             // The mean's device count divides g inside the kernel.
             const Tensor& x3 = sx.get();
             const DType dt = lse_dtype(x3.dtype());
             Tensor g = ctx.grad_output();
             if (g.dtype() != dt) g = g.to(dt);
             g = g.contiguous();
             const Tensor divisor = reduction == Reduction::Mean ? cd : Tensor();
             Tensor d = empty(x3.shape(), TensorOptions(x3.dtype(), x3.device()));
             if (d.numel() > 0)
               cross_entropy_backward_kernel(x3.device(), x3, st.get(), slse.get(), g, divisor, d, ignore_index,
                                             label_smoothing, row_scale(reduction, count, cd));
             ctx.set_grad(0, d.view(ctx.input_meta(0).shape));
           });
  }
  return acc == logits.dtype() ? out : out.to(logits.dtype());
}

Tensor nll_loss_body(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  ClassRows rows = class_rows("nll_loss", "log_probs", log_probs, target, ignore_index);
  const int64_t R = rows.target.numel();
  Tensor loss = empty({R}, TensorOptions(log_probs.dtype(), log_probs.device()));
  if (R > 0) nll_loss_kernel(log_probs.device(), rows.x3, rows.target, loss, ignore_index);
  Tensor out = reduce_rows(loss, target.shape(), reduction, rows);
  if (needs_grad({log_probs})) {
    record("nll_loss", {log_probs}, out,
           [st = SavedTensor(rows.target), shape3 = rows.x3.shape(), reduction, ignore_index, count = rows.count,
            cd = rows.count_device](BackwardContext& ctx) {
             // d (-lp[r, t_r]) / d lp[r, c] = -[c == t_r], times g_r (and 1 / count).
             Tensor g = row_grad(ctx, ctx.input_meta(0).dtype, reduction, cd);
             Tensor d = empty(shape3, TensorOptions(ctx.input_meta(0).dtype, ctx.input_meta(0).device));
             if (d.numel() > 0)
               nll_loss_backward_kernel(d.device(), st.get(), g, d, ignore_index, row_scale(reduction, count, cd));
             ctx.set_grad(0, d.view(ctx.input_meta(0).shape));
           });
  }
  return out;
}

// loss = (1 - t) x + w softplus(-x) with w = 1 + (pw - 1) t:
//   d/dx  = (1 - t) - w sigmoid(-x)   (sigmoid(x) - t without pos_weight)
//   d/dt  = -x + (pw - 1) softplus(-x)
//   d/dpw = t softplus(-x)            (summed over broadcast dims by the engine)
void bce_with_logits_backward(BackwardContext& ctx, const SavedTensor& sx, const SavedTensor& st,
                              const SavedTensor& spw) {
  const Tensor& x = sx.get();
  Tensor g = ctx.grad_output();
  if (g.dtype() != x.dtype()) g = g.to(x.dtype());
  for (int i = 0; i < 3; ++i) {
    if (!ctx.needs_grad(i)) continue;
    Tensor o = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
    if (o.numel() > 0) bce_with_logits_backward_kernel(x.device(), x, st.get(), spw.get(), g, o, i);
    ctx.set_grad(i, o);
  }
}

Tensor bce_with_logits_body(const Tensor& input, const Tensor& target, Reduction reduction, const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  EMBER_CHECK(input.is_floating_point(), DTypeError, op, ": input must be floating point, got ",
              dtype_name(input.dtype()), " (input shape ", input.shape().str(), ")");
  EMBER_CHECK(target.is_floating_point(), DTypeError, op, ": target must be floating point, got ",
              dtype_name(target.dtype()), " (input shape ", input.shape().str(), ", target shape ",
              target.shape().str(), ")");
  EMBER_CHECK(input.shape() == target.shape(), ShapeError, op, ": target shape ", target.shape().str(),
              " must equal input shape ", input.shape().str());
  check_same_device(op, input, target);
  const DType dt = input.dtype();
  const Shape shape = input.shape();
  Tensor pw;
  if (pos_weight.defined()) {
    EMBER_CHECK(pos_weight.is_floating_point(), DTypeError, op, ": pos_weight must be floating point, got ",
                dtype_name(pos_weight.dtype()));
    check_same_device(op, input, pos_weight);
    EMBER_CHECK(broadcast_shapes(shape, pos_weight.shape(), op) == shape, ShapeError, op, ": pos_weight shape ",
                pos_weight.shape().str(), " does not broadcast to input shape ", shape.str());
    pw = broadcast_view(pos_weight.detach().dtype() == dt ? pos_weight.detach() : pos_weight.detach().to(dt), shape);
  }
  const Tensor x = input.detach();
  const Tensor t = target.dtype() == dt ? target.detach() : target.detach().to(dt);
  Tensor out = empty(shape, TensorOptions(dt, input.device()));
  if (out.numel() > 0) bce_with_logits_kernel(input.device(), x, t, pw, out);
  if (needs_grad({input, target, pos_weight}))
    record(op, {input, target, pos_weight}, out,
           [sx = SavedTensor(x), st = SavedTensor(t), spw = SavedTensor(pw)](BackwardContext& ctx) {
             bce_with_logits_backward(ctx, sx, st, spw);
           });
  return reduce_loss(out, reduction);
}

// Every loss is on PyTorch's float32 autocast list. 16-bit inputs: computed
// in float32 and returned in their dtype; cross_entropy's kernels read
// 16-bit logits themselves where the device's are marked (the per-row
// losses and logsumexps, and so the reduction, stay float32).
constexpr OpDef mse_loss_op{.name = "mse_loss", .autocast = Autocast::Float32, .half = Half::Float32};
constexpr OpDef cross_entropy_op{
    .name = "cross_entropy",
    .autocast = Autocast::Float32,
    .half = Half::NativeWhere,
    .native_half = op::marked<cross_entropy_kernel, cross_entropy_backward_kernel>,
};
constexpr OpDef nll_loss_op{.name = "nll_loss", .autocast = Autocast::Float32, .half = Half::Float32};
constexpr OpDef bce_with_logits_op{
    .name = "binary_cross_entropy_with_logits", .autocast = Autocast::Float32, .half = Half::Float32};
EMBER_REGISTER_OP(mse_loss_op);
EMBER_REGISTER_OP(cross_entropy_op);
EMBER_REGISTER_OP(nll_loss_op);
EMBER_REGISTER_OP(bce_with_logits_op);

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return op::call<mse_loss_op>(mse_loss_body, input, target, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  return op::call<cross_entropy_op>(cross_entropy_body, logits, target, reduction, ignore_index, label_smoothing);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  return op::call<nll_loss_op>(nll_loss_body, log_probs, target, reduction, ignore_index);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, Reduction reduction,
                                        const Tensor& pos_weight) {
  return op::call<bce_with_logits_op>(bce_with_logits_body, input, target, reduction, pos_weight);
}

}  // namespace ember
