// batch_norm (any (N, C, *) input: BatchNorm1d and BatchNorm2d) with fused
// CPU kernels; a backend without them (CUDA) runs it composed from ops.
//
// With x viewed as (N, C, S) and M = N * S values per channel:
//   training: mean_c = sum x / M;  var_c = sum (x - mean_c)^2 / M (biased, to
//             normalise; the running variance gets the unbiased M / (M - 1))
//   eval:     mean_c, var_c = the running statistics
//   rstd_c = 1 / sqrt(var_c + eps);  xhat = (x - mean_c) rstd_c;  y = xhat w_c + b_c
// Backward, per channel, with sums over its M values:
//   db_c = sum dy;  dw_c = sum dy xhat
//   training: dx = w_c rstd_c (dy - sum dy / M - xhat sum(dy xhat) / M)
//             term 1: direct path; term 2: through the mean; term 3: through var
//   eval:     dx = w_c rstd_c dy (the statistics are constants)
// Channels are split over the pool, each channel's sums taken in one fixed
// order in float64: the same result for any thread count.
#include <cmath>

#include <ember/core/autograd.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/norm.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/reduce.h>

namespace ember {

decltype(batch_norm_stats_kernel) batch_norm_stats_kernel("batch_norm_stats");
decltype(batch_norm_apply_kernel) batch_norm_apply_kernel("batch_norm");
decltype(batch_norm_backward_kernel) batch_norm_backward_kernel("batch_norm_backward");

namespace {

// Channels per task: about 64K values of x each.
int64_t channel_grain(int64_t m) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(m, 1)); }

void cpu_batch_norm_stats(const Tensor& x3, double eps, Tensor& mean, Tensor& var, Tensor& rstd) {
  const int64_t N = x3.size(0), C = x3.size(1), S = x3.size(2);
  dispatch_floating(x3.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    T *mp = static_cast<T*>(mean.data_ptr()), *vp = static_cast<T*>(var.data_ptr());
    T* rp = static_cast<T*>(rstd.data_ptr());
    const auto M = static_cast<double>(N * S);
    parallel_for(0, C, channel_grain(N * S), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n) {
          const T* xs = x + (n * C + c) * S;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < S; ++i) s += xs[i];
        }
        const double mu = s / M;
        double v = 0;  // two passes: no cancellation as in E[x^2] - E[x]^2
        for (int64_t n = 0; n < N; ++n) {
          const T* xs = x + (n * C + c) * S;
#pragma omp simd reduction(+ : v)
          for (int64_t i = 0; i < S; ++i) {
            const double d = xs[i] - mu;
            v += d * d;
          }
        }
        mp[c] = static_cast<T>(mu);
        vp[c] = static_cast<T>(v / M);
        rp[c] = static_cast<T>(1.0 / std::sqrt(v / M + eps));
      }
    });
  });
}

// y = (x - mean_c) rstd_c w_c + b_c, as y = x scale_c + shift_c.
void cpu_batch_norm_apply(const Tensor& x3, const Tensor& mean, const Tensor& rstd, const Tensor& w, const Tensor& b,
                          Tensor& y3) {
  const int64_t N = x3.size(0), C = x3.size(1), S = x3.size(2);
  dispatch_floating(x3.dtype(), "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    const T *mp = static_cast<const T*>(mean.data_ptr()), *rp = static_cast<const T*>(rstd.data_ptr());
    const T* wp = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
    const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    T* y = static_cast<T*>(y3.data_ptr());
    parallel_for(0, N * C, channel_grain(S), [&](int64_t lo, int64_t hi) {
      for (int64_t nc = lo; nc < hi; ++nc) {
        const int64_t c = nc % C;
        const T scale = rp[c] * (wp ? wp[c] : T(1));
        const T shift = (bp ? bp[c] : T(0)) - mp[c] * scale;
        const T* xs = x + nc * S;
        T* ys = y + nc * S;
        for (int64_t i = 0; i < S; ++i) ys[i] = xs[i] * scale + shift;
      }
    });
  });
}

void cpu_batch_norm_backward(const Tensor& g3, const Tensor& x3, const Tensor& mean, const Tensor& rstd,
                             const Tensor& w, bool training, Tensor& dx3, Tensor& dw, Tensor& db) {
  const int64_t N = x3.size(0), C = x3.size(1), S = x3.size(2);
  dispatch_floating(x3.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *g = static_cast<const T*>(g3.data_ptr()), *x = static_cast<const T*>(x3.data_ptr());
    const T *mp = static_cast<const T*>(mean.data_ptr()), *rp = static_cast<const T*>(rstd.data_ptr());
    const T* wp = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
    T* dx = dx3.defined() ? static_cast<T*>(dx3.data_ptr()) : nullptr;
    T* dwp = dw.defined() ? static_cast<T*>(dw.data_ptr()) : nullptr;
    T* dbp = db.defined() ? static_cast<T*>(db.data_ptr()) : nullptr;
    const auto M = static_cast<double>(N * S);
    parallel_for(0, C, channel_grain(N * S), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const T m = mp[c], rs = rp[c];
        double sg = 0, sgx = 0;  // sum dy, sum dy xhat
        for (int64_t n = 0; n < N; ++n) {
          const T *gs = g + (n * C + c) * S, *xs = x + (n * C + c) * S;
#pragma omp simd reduction(+ : sg, sgx)
          for (int64_t i = 0; i < S; ++i) {
            sg += gs[i];
            sgx += gs[i] * ((xs[i] - m) * rs);
          }
        }
        if (dwp) dwp[c] = static_cast<T>(sgx);
        if (dbp) dbp[c] = static_cast<T>(sg);
        if (!dx) continue;
        const T k = rs * (wp ? wp[c] : T(1));  // w_c rstd_c
        // training: dx = k (dy - mg - xhat mgx); eval: dx = k dy.
        const T mg = training ? static_cast<T>(sg / M) : T(0), mgx = training ? static_cast<T>(sgx / M) : T(0);
        for (int64_t n = 0; n < N; ++n) {
          const T *gs = g + (n * C + c) * S, *xs = x + (n * C + c) * S;
          T* ds = dx + (n * C + c) * S;
          for (int64_t i = 0; i < S; ++i) ds[i] = k * (gs[i] - mg - (xs[i] - m) * rs * mgx);
        }
      }
    });
  });
}

// running = (1 - momentum) running + momentum batch statistic, in place (when
// both buffers exist), with the unbiased variance var_b * n / (n - 1).
void update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mu, const Tensor& var_b,
                    int64_t n, double momentum) {
  if (!running_mean.defined() || !running_var.defined()) return;
  NoGradGuard no_grad;
  Tensor rm = running_mean, rv = running_var;
  const Tensor var_u = mul(var_b.detach(), static_cast<double>(n) / static_cast<double>(n - 1));
  mul_(rm, 1.0 - momentum);
  add_(rm, mul(mu.detach(), momentum));
  mul_(rv, 1.0 - momentum);
  add_(rv, mul(var_u, momentum));
}

// The same computation from ops, for backends without the kernels.
Tensor batch_norm_composed(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                           const Tensor& bias, bool training, double momentum, double eps) {
  const int64_t C = x.size(1);
  // Per-channel tensors broadcast as (1, C, 1, ...); statistics over every dim but C.
  std::vector<int64_t> pdims{1, C}, rdims{0};
  for (int d = 2; d < x.dim(); ++d) {
    pdims.push_back(1);
    rdims.push_back(d);
  }
  const Shape pshape(pdims), dims(rdims);
  Tensor y;
  if (training) {
    const int64_t n = x.numel() / std::max<int64_t>(C, 1);
    const Tensor mu = mean(x, dims, true);
    const Tensor centered = sub(x, mu);
    const Tensor var_b = mean(square(centered), dims, true);  // biased: used to normalise
    y = mul(centered, rsqrt(add(var_b, eps)));
    update_running(running_mean, running_var, mu.reshape({C}), var_b.reshape({C}), n, momentum);
  } else {
    y = mul(sub(x, running_mean.reshape(pshape)), rsqrt(add(running_var.reshape(pshape), eps)));
  }
  if (weight.defined()) y = mul(y, weight.reshape(pshape));
  if (bias.defined()) y = add(y, bias.reshape(pshape));
  return y;
}

}  // namespace

EMBER_REGISTER_KERNEL(batch_norm_stats_kernel, CPU, cpu_batch_norm_stats);
EMBER_REGISTER_KERNEL(batch_norm_apply_kernel, CPU, cpu_batch_norm_apply);
EMBER_REGISTER_KERNEL(batch_norm_backward_kernel, CPU, cpu_batch_norm_backward);

namespace {

// 16-bit handling is the body's: x, weight and bias go to float32 copies
// (statistics in float32) while the running buffers, updated in place, stay
// the caller's tensors in their own dtype. Not on an autocast list.
namespace {
// Inference BatchNormalization with the running statistics (export records eval mode).
void lower_batch_norm(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  EMBER_CHECK(!c.i(5) && c.has_tensor(1) && c.has_tensor(2), ValueError,
              "ONNX export: batch_norm ran with batch statistics (training mode, or no running statistics); "
              "export writes the inference form");
  const int64_t C = x.size(1);
  const std::string w = c.has_tensor(3) ? g.value(c.tensor(3)) : g.value(ones({C}, TensorOptions(x.dtype())));
  const std::string b = c.has_tensor(4) ? g.value(c.tensor(4)) : g.value(zeros({C}, TensorOptions(x.dtype())));
  g.bind(c.outputs[0], g.node("BatchNormalization", {g.value(x), w, b, g.value(c.tensor(1)), g.value(c.tensor(2))},
                              {{"epsilon", c.f(7)}, {"momentum", 1.0 - c.f(6)}})[0]);
}
}  // namespace

constexpr OpDef batch_norm_op{
    .name = "batch_norm",
    .half = Half::InBody,
    .fast_paths = {{{.table = &batch_norm_apply_kernel,
                     .without = "batch_norm composed from reductions and elementwise ops (batch_norm_composed)"}}},
    .onnx = lower_batch_norm};
EMBER_REGISTER_OP(batch_norm_op);

Tensor batch_norm_body(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps) {
  EMBER_CHECK(x.dim() >= 2 && x.dim() <= 5, ShapeError,
              "batch_norm: expected input of shape (N, C), (N, C, L), (N, C, H, W) or (N, C, D, H, W), got ",
              x.shape().str());
  EMBER_CHECK(x.is_floating_point(), DTypeError, "batch_norm: expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  if (any_half({&x, &weight, &bias}))  // statistics in float32; running buffers keep their dtype
    return batch_norm_body(upcast_half(x), running_mean, running_var, upcast_half(weight), upcast_half(bias), training,
                           momentum, eps)
        .to(x.dtype());
  const int64_t C = x.size(1);
  for (const Tensor* p : {&running_mean, &running_var, &weight, &bias})
    EMBER_CHECK(!p->defined() || p->shape() == Shape{C}, ShapeError, "batch_norm: parameters and running statistics ",
                "must have shape [", C, "] for input of shape ", x.shape().str(), ", got ", p->shape().str());
  const int64_t n = x.numel() / std::max<int64_t>(C, 1);
  if (training)
    EMBER_CHECK(n > 1, ValueError,
                "batch_norm: expected more than 1 value per channel when training, got input of shape ",
                x.shape().str());
  else
    EMBER_CHECK(running_mean.defined() && running_var.defined(), ValueError,
                "batch_norm: eval mode needs running_mean and running_var");
  // The fused kernels take weight and bias of x's dtype and device (PyTorch's
  // mixed cases, e.g. a float64 input with float32 parameters, go composed).
  bool fused = op::fast_path<batch_norm_op>(batch_norm_apply_kernel, x.device());
  for (const Tensor* p : {&weight, &bias})
    fused = fused && (!p->defined() || (p->dtype() == x.dtype() && p->device() == x.device()));
  if (!fused) return batch_norm_composed(x, running_mean, running_var, weight, bias, training, momentum, eps);

  const Tensor x3 = x.detach().contiguous().view({x.size(0), C, n / std::max<int64_t>(x.size(0), 1)});
  const TensorOptions opts(x.dtype(), x.device());
  Tensor mu, rstd;
  if (training) {
    mu = empty({C}, opts);
    rstd = empty({C}, opts);
    Tensor var_b = empty({C}, opts);
    if (x.numel()) batch_norm_stats_kernel(x.device(), x3, eps, mu, var_b, rstd);
    update_running(running_mean, running_var, mu, var_b, n, momentum);
  } else {
    NoGradGuard no_grad;  // copies: later updates of the running buffers do not reach this backward
    mu = running_mean.detach().to(x.dtype()).to(x.device()).clone();
    rstd = rsqrt(add(running_var.detach().to(x.dtype()).to(x.device()), eps));
  }
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty(x.shape(), opts);
  Tensor y3 = y.view(x3.shape());
  if (x.numel()) batch_norm_apply_kernel(x.device(), x3, mu, rstd, w, b, y3);
  if (autograd::needs_grad({x, weight, bias}))
    autograd::record("batch_norm", {x, weight, bias}, y,
                     [sx = autograd::SavedTensor(x3), sw = autograd::SavedTensor(w), mu, rstd, training,
                      shape = x.shape()](autograd::BackwardContext& ctx) {
                       const Tensor xs = sx.get(), ws = sw.get();
                       const Tensor g3 = ctx.grad_output().contiguous().view(xs.shape());
                       const TensorOptions o(xs.dtype(), xs.device());
                       Tensor dx = ctx.needs_grad(0) ? empty(xs.shape(), o) : Tensor();
                       Tensor dw = ctx.needs_grad(1) ? empty(mu.shape(), o) : Tensor();
                       Tensor db = ctx.needs_grad(2) ? empty(mu.shape(), o) : Tensor();
                       if (xs.numel())
                         batch_norm_backward_kernel(xs.device(), g3, xs, mu, rstd, ws, training, dx, dw, db);
                       else
                         for (Tensor* t : {&dw, &db})
                           if (t->defined()) t->zero_();
                       if (ctx.needs_grad(0)) ctx.set_grad(0, dx.view(shape));
                       if (ctx.needs_grad(1)) ctx.set_grad(1, dw);
                       if (ctx.needs_grad(2)) ctx.set_grad(2, db);
                     });
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return op::call<batch_norm_op>(batch_norm_body, x, running_mean, running_var, weight, bias, training, momentum, eps);
}

}  // namespace ember
