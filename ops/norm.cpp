// layer_norm with fused CPU kernels (batch_norm: ops/batch_norm.cpp).
//
// layer_norm forward, per row of N elements:
//   mean = sum x / N;  rstd = 1 / sqrt(sum (x - mean)^2 / N + eps)
//   xhat = (x - mean) * rstd;  y = xhat * w + b
// Backward, with g = dy * w (or dy without affine):
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//        term 1: direct path; term 2: through mean; term 3: through rstd
//   dw = sum over rows of dy * xhat;  db = sum over rows of dy
// dw and db are reduced with one partial buffer per chunk of rows, summed
// afterwards: no atomics, and the same result for any thread count.
#include <ember/ops/norm.h>

#include <cmath>

#include <ember/core/autocast.h>
#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/parallel.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/pointwise.h>
#include <ember/ops/reduce.h>

namespace ember {

decltype(layer_norm_kernel) layer_norm_kernel("layer_norm");
decltype(layer_norm_backward_kernel) layer_norm_backward_kernel("layer_norm_backward");

namespace {

void cpu_layer_norm(const Tensor& x2, const Tensor& w, const Tensor& b, double eps, Tensor& y2, Tensor& mean,
                    Tensor& rstd) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  dispatch_floating(x2.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x2.data_ptr());
    const T* wp = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
    const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    T* y = static_cast<T*>(y2.data_ptr());
    T* mp = static_cast<T*>(mean.data_ptr());
    T* rp = static_cast<T*>(rstd.data_ptr());
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(N, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = x + r * N;
        T* yr = y + r * N;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < N; ++i) s += xr[i];
        const double mu = s / static_cast<double>(N);
        double v = 0;  // two passes: no cancellation as in E[x^2] - E[x]^2
#pragma omp simd reduction(+ : v)
        for (int64_t i = 0; i < N; ++i) {
          const double d = xr[i] - mu;
          v += d * d;
        }
        const T rs = static_cast<T>(1.0 / std::sqrt(v / static_cast<double>(N) + eps));
        const T m = static_cast<T>(mu);
        mp[r] = m;
        rp[r] = rs;
        if (wp && bp) {  // the usual affine case, without branches in the loop
          for (int64_t i = 0; i < N; ++i) yr[i] = (xr[i] - m) * rs * wp[i] + bp[i];
        } else {
          for (int64_t i = 0; i < N; ++i) {
            T h = (xr[i] - m) * rs;
            if (wp) h *= wp[i];
            if (bp) h += bp[i];
            yr[i] = h;
          }
        }
      }
    });
  });
}

void cpu_layer_norm_backward(const Tensor& g2, const Tensor& x2, const Tensor& w, const Tensor& mean,
                             const Tensor& rstd, Tensor& dx2, Tensor& dw, Tensor& db) {
  const int64_t rows = x2.size(0), N = x2.size(1);
  dispatch_floating(x2.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(g2.data_ptr());
    const T* x = static_cast<const T*>(x2.data_ptr());
    const T* wp = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
    const T* mp = static_cast<const T*>(mean.data_ptr());
    const T* rp = static_cast<const T*>(rstd.data_ptr());
    T* dx = dx2.defined() ? static_cast<T*>(dx2.data_ptr()) : nullptr;
    const bool want_wb = dw.defined() || db.defined();
    // Fixed chunks (independent of the thread count) so dw/db sum in one order.
    const int64_t chunk = std::max<int64_t>(1, 8192 / std::max<int64_t>(N, 1));
    const int64_t nchunks = (rows + chunk - 1) / chunk;
    std::vector<double> part_w(want_wb ? static_cast<size_t>(nchunks * N) : 0),
        part_b(want_wb ? static_cast<size_t>(nchunks * N) : 0);
    parallel_for(0, nchunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double* pw = want_wb ? part_w.data() + c * N : nullptr;
        double* pb = want_wb ? part_b.data() + c * N : nullptr;
        for (int64_t r = c * chunk; r < std::min(rows, (c + 1) * chunk); ++r) {
          const T *gr = g + r * N, *xr = x + r * N;
          const T m = mp[r], rs = rp[r];
          double sg = 0, sgx = 0;
          if (wp) {
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t i = 0; i < N; ++i) {
              const T gi = gr[i] * wp[i];
              sg += gi;
              sgx += gi * ((xr[i] - m) * rs);
            }
          } else {
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t i = 0; i < N; ++i) {
              sg += gr[i];
              sgx += gr[i] * ((xr[i] - m) * rs);
            }
          }
          if (pw) {
            for (int64_t i = 0; i < N; ++i) {
              pw[i] += gr[i] * ((xr[i] - m) * rs);
              pb[i] += gr[i];
            }
          }
          if (!dx) continue;
          const T mg = static_cast<T>(sg / static_cast<double>(N));
          const T mgx = static_cast<T>(sgx / static_cast<double>(N));
          T* dr = dx + r * N;
          if (wp) {
            for (int64_t i = 0; i < N; ++i) dr[i] = rs * (gr[i] * wp[i] - mg - (xr[i] - m) * rs * mgx);
          } else {
            for (int64_t i = 0; i < N; ++i) dr[i] = rs * (gr[i] - mg - (xr[i] - m) * rs * mgx);
          }
        }
      }
    });
    if (want_wb) {
      T* dwp = dw.defined() ? static_cast<T*>(dw.data_ptr()) : nullptr;
      T* dbp = db.defined() ? static_cast<T*>(db.data_ptr()) : nullptr;
      for (int64_t i = 0; i < N; ++i) {
        double sw = 0, sb = 0;
        for (int64_t c = 0; c < nchunks; ++c) {
          sw += part_w[c * N + i];
          sb += part_b[c * N + i];
        }
        if (dwp) dwp[i] = static_cast<T>(sw);
        if (dbp) dbp[i] = static_cast<T>(sb);
      }
    }
  });
}

// layer_norm's gradients from the fused kernel (the formulas are at the top
// of this file): x viewed as (rows, N), the saved per-row mean
// and 1/std; each gradient only where an input needs it.
void layer_norm_backward(autograd::BackwardContext& ctx, const autograd::SavedTensor& sx,
                         const autograd::SavedTensor& sw, const Tensor& mean, const Tensor& rstd, int64_t rows,
                         int64_t N, bool has_b) {
  const Tensor& xs = sx.get();
  const TensorOptions o(xs.dtype(), xs.device());
  const Tensor g = ctx.grad_output().contiguous();
  Tensor dx = ctx.needs_grad(0) ? empty(xs.shape(), o) : Tensor();
  Tensor dw = ctx.needs_grad(1) ? empty({N}, o) : Tensor();
  Tensor db = has_b && ctx.needs_grad(2) ? empty({N}, o) : Tensor();
  Tensor dx2 = dx.defined() ? dx.view({rows, N}) : Tensor();
  layer_norm_backward_kernel(xs.device(), g.view({rows, N}), xs.view({rows, N}), sw.get(), mean, rstd, dx2, dw, db);
  if (dx.defined()) ctx.set_grad(0, dx);
  if (dw.defined()) ctx.set_grad(1, dw.view(ctx.input_meta(1).shape));
  if (db.defined()) ctx.set_grad(2, db.view(ctx.input_meta(2).shape));
}

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_kernel, CPU, cpu_layer_norm);
EMBER_REGISTER_KERNEL(layer_norm_backward_kernel, CPU, cpu_layer_norm_backward);

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (auto ac = autocast_dtype_for("layer_norm", x)) {  // core/autocast.h
    AutocastSuspend off;
    return layer_norm(autocast_cast(x, *ac), normalized_shape, autocast_cast(weight, *ac), autocast_cast(bias, *ac),
                      eps);
  }
  // 16-bit input, weights of either dtype: computed in float32, returned in
  // the input's dtype; by the kernel itself (statistics in float32) where
  // the device's kernels take 16-bit tensors and the weights have the
  // input's dtype, on float32 copies otherwise.
  const auto same_dtype = [&](const Tensor& t) { return !t.defined() || t.dtype() == x.dtype(); };
  const bool native_half = is_half(x.dtype()) && same_dtype(weight) && same_dtype(bias) &&
                           takes_half(layer_norm_kernel, x.device()) &&
                           takes_half(layer_norm_backward_kernel, x.device());
  if (any_half({&x, &weight, &bias}) && !native_half)
    return layer_norm(upcast_half(x), normalized_shape, upcast_half(weight), upcast_half(bias), eps)
        .to(is_half(x.dtype()) ? x.dtype() : half_result_dtype({&weight, &bias}));
  EMBER_CHECK(x.is_floating_point(), DTypeError, "layer_norm: expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  const int k = normalized_shape.size();
  bool fits = k >= 1 && k <= x.dim();
  for (int i = 0; fits && i < k; ++i) fits = x.shape()[x.dim() - k + i] == normalized_shape[i];
  EMBER_CHECK(fits, ShapeError, "layer_norm: normalized_shape ", normalized_shape.str(),
              " does not match the trailing dims of the input's shape ", x.shape().str());
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    EMBER_CHECK(p->shape() == normalized_shape, ShapeError, "layer_norm: weight/bias of shape ", p->shape().str(),
                " must have normalized_shape ", normalized_shape.str());
    EMBER_CHECK(p->dtype() == x.dtype(), DTypeError, "layer_norm: weight/bias dtype ", dtype_name(p->dtype()),
                " differs from the input's ", dtype_name(x.dtype()));
    check_same_device("layer_norm", x, *p);
  }
  const int64_t N = normalized_shape.numel();
  const int64_t rows = N ? x.numel() / N : 0;
  const TensorOptions opts(x.dtype(), x.device());
  const Tensor xc = x.detach().contiguous();
  const Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty(x.shape(), opts);
  // The statistics in the compute dtype: float32 for a 16-bit input.
  const TensorOptions stat_opts(is_half(x.dtype()) ? DType::Float32 : x.dtype(), x.device());
  Tensor mean = empty({rows}, stat_opts), rstd = empty({rows}, stat_opts);
  Tensor y2 = out.view({rows, N});
  layer_norm_kernel(x.device(), xc.view({rows, N}), wc, bc, eps, y2, mean, rstd);
  if (autograd::needs_grad({x, weight, bias})) {
    autograd::record(
        "layer_norm", {x, weight, bias}, out,
        [sx = autograd::SavedTensor(xc), sw = autograd::SavedTensor(wc), mean, rstd, rows, N, has_b = bias.defined()](
            autograd::BackwardContext& ctx) { layer_norm_backward(ctx, sx, sw, mean, rstd, rows, N, has_b); });
  }
  return out;
}

}  // namespace ember
