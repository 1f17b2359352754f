// layer_norm's CPU kernels (the op, its formulas and backward: ops/norm.cpp).
// dw and db are reduced with one partial buffer per chunk of rows, summed
// afterwards: no atomics, and the same result for any thread count.
#include <cmath>

#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/parallel.h>
#include <ember/ops/norm.h>

namespace ember {

// The tables are defined here, beside their CPU kernels, so that an op
// naming them pulls this object file out of the static library.
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

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_kernel, CPU, cpu_layer_norm);
EMBER_REGISTER_KERNEL(layer_norm_backward_kernel, CPU, cpu_layer_norm_backward);

}  // namespace ember
