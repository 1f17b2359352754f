// Softmax, log_softmax and masked softmax: fused CPU kernels and backward.
//
// Softmax over dim d sees the input as a contiguous [A, R, B] block (R the
// softmax dim; B = 1 when d is last, so rows are contiguous). One row is one
// (a, b) pair, walked with stride B; rows run in parallel. Contiguous rows
// have paths of their own (rows of up to 64 across the vector lanes, longer
// ones as plain vectorised loops); masks and B > 1 take the general loop.
//
// Backward, with y the saved output and g the incoming gradient:
//   softmax:      dx = y * (g - sum_j g_j y_j)
//   log_softmax:  dx = g - exp(y) * sum_j g_j
// Masked positions have y = 0, so the softmax formula already gives them 0.
#include <ember/ops/softmax.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <ember/core/autograd.h>
#include <ember/core/dispatch.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/elementwise.h>
#include <ember/ops/factory.h>
#include <ember/ops/functors.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>

namespace ember {

// x3, y3: [A, R, B] contiguous; mask3: bool of the same shape or undefined.
decltype(softmax_kernel) softmax_kernel("softmax");
// y3, g3, dx3: [A, R, B] contiguous.
decltype(softmax_backward_kernel) softmax_backward_kernel("softmax_backward");

namespace {

int64_t row_grain(int64_t R) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1)); }

// Rows this short (attention over a few dozen tokens) go 16 at a time with
// the rows across the vector lanes: a row of 17 would otherwise fill one
// vector and a one-element tail, and pay two horizontal reductions.
constexpr int64_t kShortRow = 64, kRowsPerBlock = 16;

// Softmax (or log_softmax) of rows [lo, hi) of x, each of length R <= kShortRow
// and contiguous, into y. The block is transposed into buf[r][i] (element r
// of row i), so max, exp and sum run down the columns in whole vectors.
template <class T>
void short_rows_softmax(const T* x, T* y, int64_t R, int64_t lo, int64_t hi, bool log) {
  alignas(64) T buf[kShortRow][kRowsPerBlock];
  alignas(64) T mx[kRowsPerBlock], sum[kRowsPerBlock];
  for (int64_t row0 = lo; row0 < hi; row0 += kRowsPerBlock) {
    const int64_t nr = std::min(kRowsPerBlock, hi - row0);
    const T* xb = x + row0 * R;
    for (int64_t i = 0; i < kRowsPerBlock; ++i)
      for (int64_t r = 0; r < R; ++r) buf[r][i] = i < nr ? xb[i * R + r] : T(0);
    for (int64_t i = 0; i < kRowsPerBlock; ++i) {
      mx[i] = -std::numeric_limits<T>::infinity();
      sum[i] = 0;
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < kRowsPerBlock; ++i) mx[i] = buf[r][i] > mx[i] ? buf[r][i] : mx[i];
    // A row of -inf gives exp(-inf - -inf) = NaN throughout, as the long-row
    // path's explicit NaN does.
    if (log)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < kRowsPerBlock; ++i) sum[i] += fn::hd::exp(buf[r][i] - mx[i]);
    else
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < kRowsPerBlock; ++i) {
          buf[r][i] = fn::hd::exp(buf[r][i] - mx[i]);
          sum[i] += buf[r][i];
        }
    if (log) {
      for (int64_t i = 0; i < kRowsPerBlock; ++i) sum[i] = mx[i] + std::log(sum[i]);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < kRowsPerBlock; ++i) buf[r][i] -= sum[i];
    } else {
      for (int64_t i = 0; i < kRowsPerBlock; ++i) sum[i] = T(1) / sum[i];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < kRowsPerBlock; ++i) buf[r][i] *= sum[i];
    }
    T* yb = y + row0 * R;
    for (int64_t i = 0; i < nr; ++i)
      for (int64_t r = 0; r < R; ++r) yb[i * R + r] = buf[r][i];
  }
}

// Softmax (or log_softmax) of one contiguous, unmasked row of R elements:
// three passes, each a plain loop the compiler vectorises, over a row that
// stays in L1 between them (memory sees one read of x and one write of y).
template <class T>
void contiguous_row_softmax(const T* __restrict xr, T* __restrict yr, int64_t R, bool log) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t r = 0; r < R; ++r) mx = xr[r] > mx ? xr[r] : mx;
  if (mx == -std::numeric_limits<T>::infinity()) {  // all -inf
    for (int64_t r = 0; r < R; ++r) yr[r] = std::numeric_limits<T>::quiet_NaN();
    return;
  }
  T s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t r = 0; r < R; ++r) s += fn::hd::exp(xr[r] - mx);
    const T lse = mx + std::log(s);
#pragma omp simd
    for (int64_t r = 0; r < R; ++r) yr[r] = xr[r] - lse;
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t r = 0; r < R; ++r) {
      const T e = fn::hd::exp(xr[r] - mx);
      yr[r] = e;
      s += e;
    }
    const T inv = T(1) / s;
#pragma omp simd
    for (int64_t r = 0; r < R; ++r) yr[r] *= inv;
  }
}

void cpu_softmax(const Tensor& x3, const Tensor& mask3, Tensor& y3, bool log) {
  const int64_t A = x3.size(0), R = x3.size(1), B = x3.size(2);
  if (x3.numel() == 0) return;  // no rows, or rows of nothing (and no data pointer to offset)
  dispatch_floating(x3.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    const bool* m = mask3.defined() ? static_cast<const bool*>(mask3.data_ptr()) : nullptr;
    T* y = static_cast<T*>(y3.data_ptr());
    if (!m && B == 1 && R <= kShortRow) {
      parallel_for(0, A, std::max<int64_t>(kRowsPerBlock, row_grain(R)),
                   [&](int64_t lo, int64_t hi) { short_rows_softmax<T>(x, y, R, lo, hi, log); });
      return;
    }
    if (!m && B == 1) {
      parallel_for(0, A, row_grain(R), [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row) contiguous_row_softmax<T>(x + row * R, y + row * R, R, log);
      });
      return;
    }
    parallel_for(0, A * B, row_grain(R), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t base = (row / B) * R * B + row % B;
        const T* xr = x + base;
        T* yr = y + base;
        const bool* mr = m ? m + base : nullptr;
        // 1. the max over kept positions (subtracted for stability)
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t r = 0; r < R; ++r)
          if (!mr || !mr[r * B]) mx = std::max(mx, xr[r * B]);
        if (mx == -std::numeric_limits<T>::infinity()) {  // all masked (or all -inf)
          for (int64_t r = 0; r < R; ++r) yr[r * B] = mr ? T(0) : std::numeric_limits<T>::quiet_NaN();
          continue;
        }
        // 2. sum of exp(x - max)
        T s = 0;
        for (int64_t r = 0; r < R; ++r) {
          const bool keep = !mr || !mr[r * B];
          const T e = keep ? fn::hd::exp(xr[r * B] - mx) : T(0);
          if (!log) yr[r * B] = e;
          s += e;
        }
        // 3. normalise
        if (log) {
          const T lse = mx + std::log(s);
          for (int64_t r = 0; r < R; ++r) yr[r * B] = xr[r * B] - lse;
        } else {
          const T inv = T(1) / s;
          for (int64_t r = 0; r < R; ++r) yr[r * B] *= inv;
        }
      }
    });
  });
}

void cpu_softmax_backward(const Tensor& y3, const Tensor& g3, Tensor& dx3, bool log) {
  const int64_t A = y3.size(0), R = y3.size(1), B = y3.size(2);
  dispatch_floating(y3.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* y = static_cast<const T*>(y3.data_ptr());
    const T* g = static_cast<const T*>(g3.data_ptr());
    T* dx = static_cast<T*>(dx3.data_ptr());
    if (B == 1) {  // contiguous rows: each loop vectorises
      parallel_for(0, A, row_grain(R), [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row) {
          const T* __restrict yr = y + row * R;
          const T* __restrict gr = g + row * R;
          T* __restrict dr = dx + row * R;
          T dot = 0;
          if (log) {
#pragma omp simd reduction(+ : dot)
            for (int64_t r = 0; r < R; ++r) dot += gr[r];
#pragma omp simd
            for (int64_t r = 0; r < R; ++r) dr[r] = gr[r] - fn::hd::exp(yr[r]) * dot;
          } else {
#pragma omp simd reduction(+ : dot)
            for (int64_t r = 0; r < R; ++r) dot += gr[r] * yr[r];
#pragma omp simd
            for (int64_t r = 0; r < R; ++r) dr[r] = yr[r] * (gr[r] - dot);
          }
        }
      });
      return;
    }
    parallel_for(0, A * B, row_grain(R), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t base = (row / B) * R * B + row % B;
        const T *yr = y + base, *gr = g + base;
        T* dr = dx + base;
        T dot = 0;  // softmax: sum g*y; log_softmax: sum g
        for (int64_t r = 0; r < R; ++r) dot += log ? gr[r * B] : gr[r * B] * yr[r * B];
        if (log)
          for (int64_t r = 0; r < R; ++r) dr[r * B] = gr[r * B] - fn::hd::exp(yr[r * B]) * dot;
        else
          for (int64_t r = 0; r < R; ++r) dr[r * B] = yr[r * B] * (gr[r * B] - dot);
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(softmax_kernel, CPU, cpu_softmax);
EMBER_REGISTER_KERNEL(softmax_backward_kernel, CPU, cpu_softmax_backward);

namespace {

// Geometry of a softmax over dim of x: [A, R, B].
Shape softmax_dims(const Tensor& x, int dim) {
  int64_t A = 1, B = 1;
  for (int i = 0; i < dim; ++i) A *= x.shape()[i];
  for (int i = dim + 1; i < x.dim(); ++i) B *= x.shape()[i];
  return Shape{A, x.dim() ? x.shape()[dim] : 1, B};
}

Tensor softmax_impl(const Tensor& x, int64_t dim, const Tensor& mask, bool log, const char* name) {
  EMBER_CHECK(x.is_floating_point(), DTypeError, name, ": expected a floating-point tensor, got ",
              dtype_name(x.dtype()));
  const int d = wrap_dim(dim, x.dim(), name);
  const Shape g = softmax_dims(x, d);
  const Tensor xc = x.detach().contiguous();
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
  Tensor y3 = out.view(g);
  softmax_kernel(x.device(), xc.view(g), mask.defined() ? mask.view(g) : Tensor(), y3, log);
  if (autograd::needs_grad({x}))
    autograd::record(name, {x}, out, [so = autograd::SavedTensor(out), g, log](autograd::BackwardContext& ctx) {
      const Tensor& y = so.get();
      Tensor gy = ctx.grad_output().contiguous();
      Tensor dx = empty(y.shape(), TensorOptions(y.dtype(), y.device()));
      Tensor dx3 = dx.view(g);
      softmax_backward_kernel(y.device(), y.view(g), gy.view(g), dx3, log);
      ctx.set_grad(0, dx);
    });
  return out;
}

// A 16-bit input: by the kernels where the device's are marked, on a
// float32 copy otherwise. softmax and log_softmax are on PyTorch's float32
// autocast list; masked_softmax is on neither.
namespace {
void lower_softmax_node(lowering::Graph& g, const lowering::Call& c, const char* op) {
  g.bind(c.outputs[0], g.node(op, {g.value(c.tensor(0))}, {{"axis", c.i(1)}})[0]);
}
void lower_softmax(lowering::Graph& g, const lowering::Call& c) { lower_softmax_node(g, c, "Softmax"); }
void lower_log_softmax(lowering::Graph& g, const lowering::Call& c) { lower_softmax_node(g, c, "LogSoftmax"); }
// Softmax over the last dim with masked positions at -inf, then zero (a fully masked row is NaN before).
void lower_masked_softmax(lowering::Graph& g, const lowering::Call& c) {
  const Tensor& x = c.tensor(0);
  const Tensor& mask = c.tensor(1);
  std::string m = g.value(mask);
  if (mask.dtype() == DType::Int64) {  // valid lengths: key k is masked when k >= length
    const std::string K = g.node("Shape", {g.value(x)}, {{"start", int64_t{-1}}})[0];
    const std::string zero = g.scalar(0, DType::Int64), one = g.scalar(1, DType::Int64);
    const std::string pos = g.node("Range", {zero, g.node("Squeeze", {K, g.constant_ints({0})})[0], one})[0];
    std::string lens;
    if (mask.dim() == 1 && x.dim() >= 2 && mask.size(0) == x.size(0)) {
      std::vector<int64_t> shape(x.dim(), 1);
      shape[0] = -1;
      lens = g.node("Reshape", {m, g.constant_ints(shape)})[0];
    } else {
      lens = g.node("Unsqueeze", {m, g.constant_ints({-1})})[0];
    }
    m = g.node("GreaterOrEqual", {pos, lens})[0];
  }
  const DType dt = x.dtype();
  const std::string s = g.node("Where", {m, g.scalar(-INFINITY, dt), g.value(x)})[0];
  const std::string p = g.node("Softmax", {s}, {{"axis", int64_t{-1}}})[0];
  g.bind(c.outputs[0], g.node("Where", {m, g.scalar(0, dt), p})[0]);
}
}  // namespace

constexpr OpDef softmax_op{.name = "softmax",
                           .autocast = Autocast::Float32,
                           .half = Half::NativeWhere,
                           .native_half = op::marked<softmax_kernel, softmax_backward_kernel>,
                           .onnx = lower_softmax};
constexpr OpDef log_softmax_op{.name = "log_softmax",
                               .autocast = Autocast::Float32,
                               .half = Half::NativeWhere,
                               .native_half = op::marked<softmax_kernel, softmax_backward_kernel>,
                               .onnx = lower_log_softmax};
constexpr OpDef masked_softmax_op{.name = "masked_softmax",
                                  .half = Half::NativeWhere,
                                  .native_half = op::marked<softmax_kernel, softmax_backward_kernel>,
                                  .onnx = lower_masked_softmax};
EMBER_REGISTER_OP(softmax_op);
EMBER_REGISTER_OP(log_softmax_op);
EMBER_REGISTER_OP(masked_softmax_op);

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return op::call<softmax_op>(softmax_impl, x, dim, Tensor(), false, "softmax");
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return op::call<log_softmax_op>(softmax_impl, x, dim, Tensor(), true, "log_softmax");
}

Tensor causal_mask(int64_t q, int64_t k, Device device) {
  const Tensor rows = arange(static_cast<double>(q), TensorOptions(DType::Int64, device)).unsqueeze(1);
  const Tensor cols = arange(static_cast<double>(k), TensorOptions(DType::Int64, device)).unsqueeze(0);
  return gt(cols, rows);
}

Tensor masked_softmax(const Tensor& x, const Tensor& mask) {
  // Recorded with the mask as given (lengths or bool), which its lowering reads.
  return op::call<masked_softmax_op>(
      [](const Tensor& x, const Tensor& mask) {
        EMBER_CHECK(x.dim() >= 1, ShapeError, "masked_softmax: expected at least 1 dim, got shape ", x.shape().str());
        check_same_device("masked_softmax", x, mask);
        Tensor m;
        if (mask.dtype() == DType::Int64) {
          // Valid lengths: per batch entry (B,) or per row (x's shape minus the last dim).
          const int64_t K = x.shape().back();
          Shape lens_shape;
          if (mask.dim() == 1 && x.dim() >= 2 && mask.size(0) == x.size(0)) {
            lens_shape = Shape::filled(x.dim(), 1);
            lens_shape[0] = x.size(0);
          } else {
            Shape rows(x.shape());
            rows.erase(rows.size() - 1);
            EMBER_CHECK(mask.shape() == rows, ShapeError, "masked_softmax: valid_lens of shape ", mask.shape().str(),
                        " fit neither the batch (", x.dim() ? x.size(0) : 0, ",) nor the rows ", rows.str(),
                        " of input shape ", x.shape().str());
            lens_shape = mask.shape();
            lens_shape.push_back(1);
          }
          const Tensor pos = arange(static_cast<double>(K), TensorOptions(DType::Int64, x.device()));
          m = ge(pos, mask.reshape(lens_shape));  // true where k >= valid length
        } else {
          EMBER_CHECK(mask.dtype() == DType::Bool, DTypeError,
                      "masked_softmax: mask must be int64 valid lengths or a bool mask, got ",
                      dtype_name(mask.dtype()));
          m = mask;
        }
        EMBER_CHECK(broadcast_shapes(x.shape(), m.shape(), "masked_softmax") == x.shape(), ShapeError,
                    "masked_softmax: mask of shape ", m.shape().str(), " does not broadcast to the input's shape ",
                    x.shape().str());
        const Tensor full = broadcast_view(m, x.shape()).contiguous();
        return softmax_impl(x, -1, full, false, "masked_softmax");
      },
      x, mask);
}

}  // namespace ember
