// conv2d's CPU kernels: the forward and backward of a 2-D convolution as
// GEMMs over tiles of output rows, each tile's im2col columns built in a
// small buffer that stays in cache, and the output written straight into
// NCHW. The composed form (ops/conv.cpp: im2row of the whole batch, then one
// linear) writes and reads an (N*Ho*Wo) x (C*kh*kw) matrix, 115 MB for a
// 32-channel 28x28 layer at batch 128, plus an NHWC -> NCHW copy each way;
// here nothing of that size exists, and backward keeps only x and the weight.
//
// Per image n and tile of P output positions (whole output rows, P <= 256
// where a row allows), with K = C*kh*kw and L = Ho*Wo:
//   col (K x P)        = im2col(x_n) restricted to the tile
//   y_n[:, tile]       = W (O x K) @ col + b                    (forward)
//   dW                += dy_n[:, tile] (O x P) @ col^T          (col rebuilt)
//   db                += sum over the tile of dy_n[:, tile]
//   dcol (K x P)       = W^T @ dy_n[:, tile];  dx_n += col2im(dcol)
// Images are split over the pool in contiguous ranges, one per task; each
// task accumulates its own dW and db, summed in task order at the end.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include <ember/core/dtype_dispatch.h>
#include <ember/core/parallel.h>
#include <ember/ops/conv_kernels.h>
#include <ember/ops/sgemm_avx512.h>

namespace ember {

decltype(conv2d_forward_kernel) conv2d_forward_kernel("conv2d");
decltype(conv2d_backward_kernel) conv2d_backward_kernel("conv2d_backward");

namespace {

// Positions per tile: whole output rows, about 256 of them (the widest
// output Ember's SGEMM takes in one call; K x 256 floats of col stay in L2
// for K up to about 1000).
int64_t tile_rows(const WindowGeom& g) { return std::clamp<int64_t>(256 / g.Wo, 1, g.Ho); }

// C (m x n, row stride ldc) = alpha op(A) op(B) + beta C, row-major, for the
// small per-tile products: Ember's AVX-512 SGEMM where
// the build has it, else BLAS. Runs on the calling thread (OpenBLAS is pinned
// to one thread; core/parallel.h).
// An empty inner dim (a convolution over zero channels) leaves beta C.
template <class T>
bool empty_product(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (k > 0 || m == 0 || n == 0) return m == 0 || n == 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = beta == T(0) ? T(0) : beta * c[r * ldc + j];
  return true;
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  if constexpr (cpu::kHaveSgemmAvx512) {
    cpu::sgemm_avx512(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// The output columns ow whose input column ow*sw - pw + j lies inside [0, W):
// [lo, hi).
struct ColRange {
  int64_t lo, hi;
};
ColRange valid_cols(const WindowGeom& g, int64_t j) {
  // ow*sw - pw + j >= 0  <=>  ow >= ceil((pw - j) / sw);  ow*sw - pw + j <= W - 1.
  const int64_t lo = g.pw - j > 0 ? (g.pw - j + g.sw - 1) / g.sw : 0;
  const int64_t top = g.W - 1 + g.pw - j;
  const int64_t hi = top < 0 ? 0 : std::min(g.Wo, top / g.sw + 1);
  return {std::min(lo, hi), hi};
}

// col[k * P + (oh - oh0) * Wo + ow] = x_n[c, oh*sh - ph + i, ow*sw - pw + j],
// k = (c*kh + i)*kw + j, for output rows [oh0, oh1); 0 outside the image.
template <class T>
void im2col_tile(const T* xn, T* col, const WindowGeom& g, int64_t oh0, int64_t oh1) {
  const int64_t P = (oh1 - oh0) * g.Wo;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const ColRange r = valid_cols(g, j);
        T* dst = col + ((c * g.kh + i) * g.kw + j) * P;
        for (int64_t oh = oh0; oh < oh1; ++oh, dst += g.Wo) {
          const int64_t h = oh * g.sh - g.ph + i;
          if (h < 0 || h >= g.H) {
            std::fill(dst, dst + g.Wo, T(0));
            continue;
          }
          const T* src = xn + (c * g.H + h) * g.W - g.pw + j;  // src[ow*sw] is x_n[c, h, ow*sw - pw + j]
          std::fill(dst, dst + r.lo, T(0));
          if (g.sw == 1)
            std::copy(src + r.lo, src + r.hi, dst + r.lo);
          else
            for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow] = src[ow * g.sw];
          std::fill(dst + r.hi, dst + g.Wo, T(0));
        }
      }
}

// The adjoint: dx_n[c, h, w] += every col entry that im2col_tile read from it.
template <class T>
void col2im_tile(const T* col, T* dxn, const WindowGeom& g, int64_t oh0, int64_t oh1) {
  const int64_t P = (oh1 - oh0) * g.Wo;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const ColRange r = valid_cols(g, j);
        const T* src = col + ((c * g.kh + i) * g.kw + j) * P;
        for (int64_t oh = oh0; oh < oh1; ++oh, src += g.Wo) {
          const int64_t h = oh * g.sh - g.ph + i;
          if (h < 0 || h >= g.H) continue;
          T* dst = dxn + (c * g.H + h) * g.W - g.pw + j;
          for (int64_t ow = r.lo; ow < r.hi; ++ow) dst[ow * g.sw] += src[ow];
        }
      }
}

void cpu_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const WindowGeom& g) {
  dispatch_floating(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = static_cast<const T*>(w.data_ptr());
    const T* bp = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    T* yp = static_cast<T*>(out.data_ptr());
    const int64_t O = w.size(0), K = g.C * g.kh * g.kw, L = g.Ho * g.Wo, rows = tile_rows(g);
    parallel_for(0, g.N, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> col(static_cast<size_t>(K * rows * g.Wo));
      for (int64_t n = lo; n < hi; ++n) {
        const T* xn = xp + n * g.C * g.H * g.W;
        T* yn = yp + n * O * L;
        for (int64_t oh0 = 0; oh0 < g.Ho; oh0 += rows) {
          const int64_t oh1 = std::min(g.Ho, oh0 + rows), P = (oh1 - oh0) * g.Wo;
          im2col_tile(xn, col.data(), g, oh0, oh1);
          T* yt = yn + oh0 * g.Wo;
          if (bp)  // b_o in every position of channel o, then the product added (beta 1)
            for (int64_t o = 0; o < O; ++o) std::fill(yt + o * L, yt + o * L + P, bp[o]);
          gemm(false, false, O, P, K, T(1), wp, K, col.data(), P, bp ? T(1) : T(0), yt, L);
        }
      }
    });
  });
}

void cpu_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& dx, Tensor& dw, Tensor& db,
                         const WindowGeom& g) {
  dispatch_floating(x.dtype(), "conv2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* wp = static_cast<const T*>(w.data_ptr());
    const T* gp = static_cast<const T*>(gy.data_ptr());
    T* dxp = dx.defined() ? static_cast<T*>(dx.data_ptr()) : nullptr;
    const int64_t O = w.size(0), K = g.C * g.kh * g.kw, L = g.Ho * g.Wo, rows = tile_rows(g);
    const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(g.N, num_threads()));
    // One dW (O x K) and db (O) per task, zeroed; summed below.
    std::vector<T> dw_part(dw.defined() ? static_cast<size_t>(tasks * O * K) : 0);
    std::vector<T> db_part(db.defined() ? static_cast<size_t>(tasks * O) : 0);
    parallel_for(0, tasks, 1, [&](int64_t t_lo, int64_t t_hi) {
      const size_t tile = static_cast<size_t>(K * rows * g.Wo);
      std::vector<T> col(dw.defined() ? tile : 0), dcol(dxp ? tile : 0);
      for (int64_t t = t_lo; t < t_hi; ++t) {
        T* dwt = dw.defined() ? dw_part.data() + t * O * K : nullptr;
        T* dbt = db.defined() ? db_part.data() + t * O : nullptr;
        for (int64_t n = t * g.N / tasks; n < (t + 1) * g.N / tasks; ++n) {
          const T* xn = xp + n * g.C * g.H * g.W;
          const T* gn = gp + n * O * L;
          T* dxn = dxp ? dxp + n * g.C * g.H * g.W : nullptr;
          if (dxn) std::fill(dxn, dxn + g.C * g.H * g.W, T(0));
          for (int64_t oh0 = 0; oh0 < g.Ho; oh0 += rows) {
            const int64_t oh1 = std::min(g.Ho, oh0 + rows), P = (oh1 - oh0) * g.Wo;
            const T* gt = gn + oh0 * g.Wo;  // dy_n[:, tile], row stride L
            if (dwt) {
              // y = W col  =>  dW += dy col^T: (O x P) @ (P x K), col read transposed in place.
              im2col_tile(xn, col.data(), g, oh0, oh1);
              gemm(false, true, O, K, P, T(1), gt, L, col.data(), P, T(1), dwt, K);
            }
            if (dbt)  // y = ... + b_o  =>  db_o += sum of dy over channel o's positions
              for (int64_t o = 0; o < O; ++o) {
                T s = 0;
                for (int64_t p = 0; p < P; ++p) s += gt[o * L + p];
                dbt[o] += s;
              }
            if (dxn) {
              // y = W col  =>  dcol = W^T dy: (K x O) @ (O x P), W read transposed in place;
              // col = im2col(x)  =>  dx = col2im(dcol), its adjoint.
              gemm(true, false, K, P, O, T(1), wp, K, gt, L, T(0), dcol.data(), P);
              col2im_tile(dcol.data(), dxn, g, oh0, oh1);
            }
          }
        }
      }
    });
    // The tasks' partial sums, added in task order.
    auto reduce = [tasks](const std::vector<T>& part, Tensor& to, int64_t size) {
      T* dst = static_cast<T*>(to.data_ptr());
      std::copy(part.begin(), part.begin() + size, dst);
      for (int64_t t = 1; t < tasks; ++t)
        for (int64_t e = 0; e < size; ++e) dst[e] += part[static_cast<size_t>(t * size + e)];
    };
    if (dw.defined()) reduce(dw_part, dw, O * K);
    if (db.defined()) reduce(db_part, db, O);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(conv2d_forward_kernel, CPU, cpu_conv2d_forward);
EMBER_REGISTER_KERNEL(conv2d_backward_kernel, CPU, cpu_conv2d_backward);

}  // namespace ember
