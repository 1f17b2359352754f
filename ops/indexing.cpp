// Indexing ops: index_select / index_add, gather / scatter_add, embedding and
// one_hot, with their CPU kernels.
//
// Every op checks its indices with one scan (index_check_kernel) before any
// kernel reads through them, so kernels can trust them and a bad index is an
// IndexError, not a wild read.
//
// The adding kernels (index_add, scatter_add) are the backward of the
// selecting ones, and several indices may name the same destination. They
// never race and are deterministic for any thread count: work is split by
// destination, and each destination sums its contributions in index order.
//  - index_add groups the indices by destination row (a counting sort), then
//    runs (destination row, column chunk) tasks in parallel. Column chunks
//    keep a very frequent row (a common token in embedding) from becoming one
//    thread's serial job.
//  - scatter_add parallelises over the positions of the non-indexed dims:
//    two index entries can only collide when they agree on all those dims.
#include <ember/core/op.h>
#include <ember/ops/indexing.h>
#include <ember/ops/onnx_lowerings.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include <ember/core/autograd.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/core/parallel.h>
#include <ember/ops/factory.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/pointwise.h>

namespace ember {

decltype(index_check_kernel) index_check_kernel("index_check");
decltype(index_max_kernel) index_max_kernel("index_max");
decltype(index_select_kernel) index_select_kernel("index_select");
decltype(index_add_kernel) index_add_kernel("index_add");
decltype(gather_kernel) gather_kernel("gather");
decltype(scatter_add_kernel) scatter_add_kernel("scatter_add");
decltype(one_hot_kernel) one_hot_kernel("one_hot");

// ---- CPU kernels ------------------------------------------------------------
namespace {

constexpr int64_t kGrain = 32768;  // elements per parallel chunk

int64_t grain_for(int64_t work_per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(work_per_item, 1)); }

IndexCheckResult cpu_index_check(const Tensor& index, int64_t size, bool has_ignore, int64_t ignore) {
  const int64_t* p = index.data<int64_t>();
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
  std::atomic<int64_t> count{0};
  parallel_for(0, index.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    int64_t bad = std::numeric_limits<int64_t>::max(), n = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t v = p[i];
      const bool ignored = has_ignore && v == ignore;
      n += !ignored;
      if (!ignored && (v < 0 || v >= size) && i < bad) bad = i;
    }
    count.fetch_add(n);
    int64_t cur = first_bad.load();
    while (bad < cur && !first_bad.compare_exchange_weak(cur, bad)) {}
  });
  IndexCheckResult r;
  r.count = count.load();
  const int64_t b = first_bad.load();
  r.bad_pos = b == std::numeric_limits<int64_t>::max() ? -1 : b;
  return r;
}

int64_t cpu_index_max(const Tensor& index) {
  const int64_t* p = index.data<int64_t>();
  std::atomic<int64_t> best{std::numeric_limits<int64_t>::min()};
  parallel_for(0, index.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    int64_t m = std::numeric_limits<int64_t>::min();
    for (int64_t i = lo; i < hi; ++i) m = std::max(m, p[i]);
    int64_t cur = best.load();
    while (m > cur && !best.compare_exchange_weak(cur, m)) {}
  });
  return best.load();
}

void cpu_index_select(const Tensor& x3, const Tensor& index, Tensor& out3) {
  const int64_t A = x3.size(0), N = x3.size(1), B = x3.size(2), K = index.numel();
  const int64_t* idx = index.data<int64_t>();
  dispatch_all(x3.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x3.data_ptr());
    T* o = static_cast<T*>(out3.data_ptr());
    parallel_for(0, A * K, grain_for(B), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t a = r / K, k = r % K;
        const T* src = x + (a * N + idx[k]) * B;
        T* dst = o + r * B;
        for (int64_t b = 0; b < B; ++b) dst[b] = src[b];
      }
    });
  });
}

void cpu_index_add(Tensor& out3, const Tensor& index, const Tensor& src3, int64_t skip) {
  const int64_t A = out3.size(0), N = out3.size(1), B = out3.size(2), K = index.numel();
  const int64_t* idx = index.data<int64_t>();
  // Counting sort of the positions k by destination row, stable so every
  // destination sees its contributions in increasing k.
  std::vector<int64_t> start(static_cast<size_t>(N) + 1, 0), order(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) ++start[idx[k] + 1];
  for (int64_t n = 0; n < N; ++n) start[n + 1] += start[n];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t k = 0; k < K; ++k) order[fill[idx[k]]++] = k;
  }
  std::vector<int64_t> dests;
  for (int64_t n = 0; n < N; ++n)
    if (start[n + 1] > start[n] && n != skip) dests.push_back(n);
  const int64_t U = static_cast<int64_t>(dests.size());
  if (U == 0) return;
  const int64_t chunk = 64;  // columns per task
  const int64_t nc = (B + chunk - 1) / chunk;
  const int64_t work = std::max<int64_t>(1, K / U) * std::min(B, chunk);
  dispatch_numeric(out3.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out3.data_ptr());
    const T* s = static_cast<const T*>(src3.data_ptr());
    parallel_for(0, A * U * nc, grain_for(work), [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t c = t % nc, u = (t / nc) % U, a = t / (nc * U);
        const int64_t n = dests[u], b0 = c * chunk, b1 = std::min(B, b0 + chunk);
        T* dst = o + (a * N + n) * B;
        for (int64_t j = start[n]; j < start[n + 1]; ++j) {
          const T* row = s + (a * K + order[j]) * B;
          for (int64_t b = b0; b < b1; ++b) dst[b] += row[b];
        }
      }
    });
  });
}

// Geometry shared by gather and scatter_add: index (and src/out of gather)
// seen as [A, K, B] around dim; the data tensor x has the same number of dims
// but may be larger in the non-indexed ones. xa[a] and xb[b] are the offsets
// in x of the coordinates before and after dim.
struct GatherGeometry {
  int64_t A = 1, K = 1, B = 1, xstride = 1;
  std::vector<int64_t> xa, xb;
};

GatherGeometry gather_geometry(const Shape& xshape, int64_t dim, const Shape& ishape) {
  GatherGeometry g;
  const int nd = ishape.size();
  const Shape xs = contiguous_strides(xshape);
  for (int d = 0; d < dim; ++d) g.A *= ishape[d];
  g.K = ishape[static_cast<int>(dim)];
  for (int d = static_cast<int>(dim) + 1; d < nd; ++d) g.B *= ishape[d];
  g.xstride = xs[static_cast<int>(dim)];
  // Offsets by counting through the coordinates in row-major order.
  auto offsets = [&](int d0, int d1, int64_t count) {
    std::vector<int64_t> off(static_cast<size_t>(count));
    std::vector<int64_t> c(static_cast<size_t>(nd), 0);
    int64_t cur = 0;
    for (int64_t i = 0; i < count; ++i) {
      off[i] = cur;
      for (int d = d1 - 1; d >= d0; --d) {
        if (++c[d] < ishape[d]) {
          cur += xs[d];
          break;
        }
        cur -= (c[d] - 1) * xs[d];
        c[d] = 0;
      }
    }
    return off;
  };
  g.xa = offsets(0, static_cast<int>(dim), g.A);
  g.xb = offsets(static_cast<int>(dim) + 1, nd, g.B);
  return g;
}

void cpu_gather(const Tensor& x, int64_t dim, const Tensor& index, Tensor& out) {
  const GatherGeometry g = gather_geometry(x.shape(), dim, index.shape());
  const int64_t* idx = index.data<int64_t>();
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, g.A * g.K, grain_for(g.B), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* base = xp + g.xa[r / g.K];
        const int64_t* ir = idx + r * g.B;
        T* orow = o + r * g.B;
        for (int64_t b = 0; b < g.B; ++b) orow[b] = base[ir[b] * g.xstride + g.xb[b]];
      }
    });
  });
}

void cpu_scatter_add(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const GatherGeometry g = gather_geometry(out.shape(), dim, index.shape());
  const int64_t* idx = index.data<int64_t>();
  dispatch_numeric(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* s = static_cast<const T*>(src.data_ptr());
    // Columns c = a * B + b own disjoint destinations; each walks k in order.
    parallel_for(0, g.A * g.B, grain_for(g.K), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi;) {
        const int64_t a = c / g.B, b0 = c % g.B, b1 = std::min(g.B, b0 + (hi - c));
        T* base = o + g.xa[a];
        for (int64_t k = 0; k < g.K; ++k) {
          const int64_t row = (a * g.K + k) * g.B;
          for (int64_t b = b0; b < b1; ++b) base[idx[row + b] * g.xstride + g.xb[b]] += s[row + b];
        }
        c += b1 - b0;
      }
    });
  });
}

void cpu_one_hot(const Tensor& index, Tensor& out) {
  const int64_t M = index.numel(), C = out.size(-1);
  const int64_t* idx = index.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  parallel_for(0, M, grain_for(C), [&](int64_t lo, int64_t hi) {
    std::fill(o + lo * C, o + hi * C, int64_t{0});
    for (int64_t m = lo; m < hi; ++m) o[m * C + idx[m]] = 1;
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(index_check_kernel, CPU, cpu_index_check);
EMBER_REGISTER_KERNEL(index_max_kernel, CPU, cpu_index_max);
EMBER_REGISTER_KERNEL(index_select_kernel, CPU, cpu_index_select);
EMBER_REGISTER_KERNEL(index_add_kernel, CPU, cpu_index_add);
EMBER_REGISTER_KERNEL(gather_kernel, CPU, cpu_gather);
EMBER_REGISTER_KERNEL(scatter_add_kernel, CPU, cpu_scatter_add);
EMBER_REGISTER_KERNEL(one_hot_kernel, CPU, cpu_one_hot);

std::optional<int64_t> find_bad_index(const Tensor& index, int64_t size, std::optional<int64_t> ignore_index,
                                      int64_t* count, Tensor* count_device) {
  const Tensor flat = index.contiguous().view({index.numel()});
  IndexCheckResult r;
  if (index.numel() > 0)
    r = index_check_kernel(index.device(), flat, size, ignore_index.has_value(), ignore_index.value_or(0));
  if (count) *count = r.count;
  if (count_device) *count_device = r.count_device;
  if (r.bad_pos < 0) return std::nullopt;
  return flat.select(0, r.bad_pos).item<int64_t>();
}

// ---- ops --------------------------------------------------------------------
using autograd::BackwardContext;
using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

void check_index_dtype(const char* op, const Tensor& index, const Tensor& x) {
  EMBER_CHECK(index.dtype() == DType::Int64, DTypeError, op, ": index must be an int64 tensor, got ",
              dtype_name(index.dtype()), " (index shape ", index.shape().str(), ")");
  check_same_device(op, x, index);
}

// x as a contiguous [A, N, B] block around dim (no autograd).
Tensor as_3d(const Tensor& x, int d) {
  int64_t A = 1, B = 1;
  for (int i = 0; i < d; ++i) A *= x.size(i);
  for (int i = d + 1; i < x.dim(); ++i) B *= x.size(i);
  return x.detach().contiguous().view({A, x.size(d), B});
}

Shape with_dim(Shape s, int d, int64_t n) {
  s[d] = n;
  return s;
}

// The selecting and adding cores, without checks or autograd; x and src have
// at least one dim, index is int64 and already checked.
Tensor index_select_impl(const Tensor& x, int d, const Tensor& index) {
  const int64_t K = index.numel();
  Tensor out = empty(with_dim(x.shape(), d, K), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    Tensor out3 = as_3d(out, d);
    index_select_kernel(x.device(), as_3d(x, d), index.contiguous().view({K}), out3);
  }
  return out;
}

// out (contiguous, fresh) += src added at index along d.
void index_add_into(Tensor& out, int d, const Tensor& index, const Tensor& src, int64_t skip = -1) {
  if (src.numel() == 0) return;
  Tensor out3 = as_3d(out, d);
  index_add_kernel(out.device(), out3, index.contiguous().view({index.numel()}), as_3d(src, d), skip);
}

Tensor gather_impl(const Tensor& x, int d, const Tensor& index) {
  Tensor out = empty(index.shape(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) gather_kernel(x.device(), x.detach().contiguous(), d, index.contiguous(), out);
  return out;
}

void scatter_add_into(Tensor& out, int d, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  scatter_add_kernel(out.device(), out, d, index.contiguous(), src.detach().contiguous());
}

Tensor copy_of(const Tensor& x) {
  Tensor out = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
  out.copy_(x.detach());
  return out;
}

void lower_index_select(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Gather", {g.value(c.tensor(0)), g.value(c.tensor(2))}, {{"axis", c.i(1)}})[0]);
}
void lower_gather(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("GatherElements", {g.value(c.tensor(0)), g.value(c.tensor(2))}, {{"axis", c.i(1)}})[0]);
}
// embedding(weight, indices): rows of the weight.
void lower_embedding(lowering::Graph& g, const lowering::Call& c) {
  g.bind(c.outputs[0], g.node("Gather", {g.value(c.tensor(0)), g.value(c.tensor(1))}, {{"axis", int64_t{0}}})[0]);
}
void lower_one_hot(lowering::Graph& g, const lowering::Call& c) {
  const int64_t n = c.outputs[0].size(-1);
  g.bind(c.outputs[0], g.node("OneHot", {g.value(c.tensor(0)), g.scalar(static_cast<double>(n), DType::Int64),
                                         g.value(from_vector(std::vector<int64_t>{0, 1}))})[0]);
}
}  // namespace

constexpr OpDef index_select_op{.name = "index_select", .onnx = lower_index_select};
EMBER_REGISTER_OP(index_select_op);

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return op::call_captured<index_select_op>(
      [&](const auto&...) -> Tensor {
        check_index_dtype("index_select", index, x);
        EMBER_CHECK(index.dim() <= 1, ShapeError, "index_select: index must be 1-D or 0-dim, got shape ",
                    index.shape().str(), " (x shape ", x.shape().str(), ")");
        const int d = wrap_dim(dim, x.dim(), "index_select");
        const Tensor xv = x.dim() == 0 ? x.detach().view({1}) : x;
        const int64_t N = xv.size(d);
        if (auto bad = find_bad_index(index, N))
          EMBER_CHECK(false, IndexError, "index_select: index ", *bad, " is out of range for dim ", dim, " with size ",
                      N, " (x shape ", x.shape().str(), ", index shape ", index.shape().str(), ")");
        Tensor out = index_select_impl(xv, d, index);
        if (x.dim() == 0) out = out.view({});
        if (needs_grad({x}))
          record("index_select", {x}, out, [si = SavedTensor(index), xshape = xv.shape(), d](BackwardContext& ctx) {
            // d out[.., k, ..] / d x[.., n, ..] = [index[k] == n]: the gradient of
            // every selected slice goes back to the slice it came from, summed over
            // repeats (index_add into zeros; a 16-bit gradient summed in float32).
            const Tensor g = upcast_half(ctx.grad_output());
            Tensor gx = zeros(xshape, TensorOptions(g.dtype(), g.device()));
            index_add_into(gx, d, si.get(), g.reshape(with_dim(xshape, d, si.get().numel())));
            ctx.set_grad(0, gx.reshape(ctx.input_meta(0).shape).to(ctx.grad_output().dtype()));
          });
        return out;
      },
      x, dim, index);
}

namespace {

// 16-bit x and src: the sums in float32, rounded once.
constexpr OpDef index_add_op{.name = "index_add", .half = Half::Float32};
constexpr OpDef scatter_add_op{.name = "scatter_add", .half = Half::Float32};
EMBER_REGISTER_OP(index_add_op);
EMBER_REGISTER_OP(scatter_add_op);

Tensor index_add_body(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  EMBER_CHECK(index.dim() <= 1, ShapeError, "index_add: index must be 1-D or 0-dim, got shape ", index.shape().str());
  const int d = wrap_dim(dim, x.dim(), "index_add");
  const Tensor xv = x.dim() == 0 ? x.detach().view({1}) : x;
  const Tensor sv = src.dim() == 0 ? src.detach().view({1}) : src;
  EMBER_CHECK(sv.shape() == with_dim(xv.shape(), d, index.numel()), ShapeError, "index_add: src of shape ",
              src.shape().str(), " does not match x of shape ", x.shape().str(), " with dim ", dim,
              " replaced by the index length ", index.numel());
  if (auto bad = find_bad_index(index, xv.size(d)))
    EMBER_CHECK(false, IndexError, "index_add: index ", *bad, " is out of range for dim ", dim, " with size ",
                xv.size(d), " (x shape ", x.shape().str(), ", index shape ", index.shape().str(), ")");
  Tensor out = copy_of(xv);
  index_add_into(out, d, index, sv);
  if (x.dim() == 0) out = out.view({});
  if (needs_grad({x, src}))
    record("index_add", {x, src}, out,
           [si = needs_grad({src}) ? SavedTensor(index) : SavedTensor(), d, xshape = xv.shape()](BackwardContext& ctx) {
             // out = x + P src with P the 0/1 placement matrix: dx = g, dsrc = P^T g.
             const Tensor& g = ctx.grad_output();
             if (ctx.needs_grad(0)) ctx.set_grad(0, g);
             if (ctx.needs_grad(1))
               ctx.set_grad(1, index_select_impl(g.reshape(xshape), d, si.get()).reshape(ctx.input_meta(1).shape));
           });
  return out;
}

}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_dtype("index_add", index, x);
  check_same_device("index_add", x, src);
  EMBER_CHECK(x.dtype() == src.dtype(), DTypeError, "index_add: x and src must have the same dtype, got ",
              dtype_name(x.dtype()), " and ", dtype_name(src.dtype()));
  return op::call<index_add_op>(index_add_body, x, dim, index, src);
}

namespace {
// The shape rules gather and scatter_add share; returns the wrapped dim.
int check_gather_shapes(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_dtype(op, index, x);
  const int d = wrap_dim(dim, x.dim(), op);
  EMBER_CHECK(index.dim() == x.dim(), ShapeError, op, ": index must have as many dims as x, got index shape ",
              index.shape().str(), " and x shape ", x.shape().str());
  for (int i = 0; i < x.dim(); ++i)
    EMBER_CHECK(i == d || index.size(i) <= x.size(i), ShapeError, op, ": index shape ", index.shape().str(),
                " is larger than x shape ", x.shape().str(), " in dim ", i, " (only dim ", dim, " may differ)");
  return d;
}
}  // namespace

constexpr OpDef gather_op{.name = "gather", .onnx = lower_gather};
EMBER_REGISTER_OP(gather_op);

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return op::call_captured<gather_op>(
      [&](const auto&...) -> Tensor {
        const int d = check_gather_shapes("gather", x, dim, index);
        const Tensor xv = x.dim() == 0 ? x.detach().view({1}) : x;
        const Tensor iv = index.dim() == 0 ? index.view({1}) : index;
        if (auto bad = find_bad_index(iv, xv.size(d)))
          EMBER_CHECK(false, IndexError, "gather: index ", *bad, " is out of range for dim ", dim, " with size ",
                      xv.size(d), " (x shape ", x.shape().str(), ", index shape ", index.shape().str(), ")");
        Tensor out = gather_impl(xv, d, iv).view(index.shape());
        if (needs_grad({x}))
          record("gather", {x}, out, [si = SavedTensor(iv), xshape = xv.shape(), d](BackwardContext& ctx) {
            // Each output element is one x element: scatter-add the gradients back
            // (repeated indices sum, a 16-bit gradient in float32).
            const Tensor g = upcast_half(ctx.grad_output());
            Tensor gx = zeros(xshape, TensorOptions(g.dtype(), g.device()));
            scatter_add_into(gx, d, si.get(), g.reshape(si.get().shape()));
            ctx.set_grad(0, gx.reshape(ctx.input_meta(0).shape).to(ctx.grad_output().dtype()));
          });
        return out;
      },
      x, dim, index);
}

namespace {

// out = x + S src with S the 0/1 scatter: dx = g, dsrc = S^T g = gather(g)
// on the covered part, zero on the rest of src. si holds the index when src
// needs a gradient; xshape and sshape are x's and src's shapes (1-D for 0-dim).
void scatter_add_backward(BackwardContext& ctx, const SavedTensor& si, int d, const Shape& xshape,
                          const Shape& sshape) {
  const Tensor& g = ctx.grad_output();
  if (ctx.needs_grad(0)) ctx.set_grad(0, g);
  if (!ctx.needs_grad(1)) return;
  const Tensor& idx = si.get();
  Tensor gs = gather_impl(g.reshape(xshape), d, idx);
  if (gs.shape() != sshape) {
    Tensor full = zeros(sshape, TensorOptions(gs.dtype(), gs.device()));
    Tensor region = full;
    for (int i = 0; i < region.dim(); ++i) region = region.narrow(i, 0, idx.size(i));
    region.copy_(gs);
    gs = full;
  }
  ctx.set_grad(1, gs.reshape(ctx.input_meta(1).shape));
}

// Row m of embedding's output is row indices[m] of weight (V x D, M rows
// looked up): the weight gradient adds each output row's gradient into that
// row (index_add over dim 0), except the padding row, which is a constant
// and stays zero. A 16-bit gradient is summed in float32 and rounded once;
// a tied weight's rows go into its other uses' gradient in place.
void embedding_backward(BackwardContext& ctx, const SavedTensor& flat, int64_t V, int64_t D, int64_t M, int64_t pad) {
  const Tensor g = upcast_half(ctx.grad_output());
  Tensor gw = g.dtype() == ctx.grad_output().dtype() ? ctx.take_accumulated_grad(0) : Tensor();
  if (!gw.defined()) gw = zeros({V, D}, TensorOptions(g.dtype(), g.device()));
  if (M > 0 && D > 0) {
    Tensor gw3 = gw.view({1, V, D});
    index_add_kernel(g.device(), gw3, flat.get(), g.contiguous().view({1, M, D}), pad);
  }
  ctx.set_grad(0, gw.to(ctx.grad_output().dtype()));
}

Tensor scatter_add_body(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const int d = check_gather_shapes("scatter_add", x, dim, index);
  EMBER_CHECK(src.dim() == index.dim(), ShapeError, "scatter_add: src must have as many dims as index, got src shape ",
              src.shape().str(), " and index shape ", index.shape().str());
  for (int i = 0; i < src.dim(); ++i)
    EMBER_CHECK(index.size(i) <= src.size(i), ShapeError, "scatter_add: index shape ", index.shape().str(),
                " is larger than src shape ", src.shape().str(), " in dim ", i);
  const Tensor xv = x.dim() == 0 ? x.detach().view({1}) : x;
  const Tensor iv = index.dim() == 0 ? index.view({1}) : index;
  const Tensor sv = src.dim() == 0 ? src.detach().view({1}) : src;
  if (auto bad = find_bad_index(iv, xv.size(d)))
    EMBER_CHECK(false, IndexError, "scatter_add: index ", *bad, " is out of range for dim ", dim, " with size ",
                xv.size(d), " (x shape ", x.shape().str(), ", index shape ", index.shape().str(), ")");
  // Only the part of src that index covers takes part.
  Tensor part = sv.detach();
  for (int i = 0; i < part.dim(); ++i)
    if (part.size(i) != iv.size(i)) part = part.narrow(i, 0, iv.size(i));
  Tensor out = copy_of(xv);
  scatter_add_into(out, d, iv, part);
  if (x.dim() == 0) out = out.view({});
  if (needs_grad({x, src}))
    record("scatter_add", {x, src}, out,
           [si = needs_grad({src}) ? SavedTensor(iv) : SavedTensor(), d, xshape = xv.shape(),
            sshape = sv.shape()](BackwardContext& ctx) { scatter_add_backward(ctx, si, d, xshape, sshape); });
  return out;
}

}  // namespace

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_gather_shapes("scatter_add", x, dim, index);
  check_same_device("scatter_add", x, src);
  EMBER_CHECK(x.dtype() == src.dtype(), DTypeError, "scatter_add: x and src must have the same dtype, got ",
              dtype_name(x.dtype()), " and ", dtype_name(src.dtype()));
  return op::call<scatter_add_op>(scatter_add_body, x, dim, index, src);
}

constexpr OpDef embedding_op{.name = "embedding", .onnx = lower_embedding};
EMBER_REGISTER_OP(embedding_op);

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  return op::call_captured<embedding_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(indices.dtype() == DType::Int64, DTypeError, "embedding: indices must be an int64 tensor, got ",
                    dtype_name(indices.dtype()), " (indices shape ", indices.shape().str(), ")");
        check_same_device("embedding", weight, indices);
        EMBER_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be 2-D [num_embeddings, dim], got shape ",
                    weight.shape().str());
        const int64_t V = weight.size(0), D = weight.size(1), M = indices.numel();
        int64_t pad = -1;
        if (padding_idx) {
          EMBER_CHECK(*padding_idx >= -V && *padding_idx < V, IndexError, "embedding: padding_idx ", *padding_idx,
                      " is out of range for ", V, " embeddings (weight shape ", weight.shape().str(), ")");
          pad = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
        }
        if (auto bad = find_bad_index(indices, V))
          EMBER_CHECK(false, IndexError, "embedding: index ", *bad, " is out of range for ", V,
                      " embeddings (weight shape ", weight.shape().str(), ", indices shape ", indices.shape().str(),
                      ")");
        Shape out_shape = indices.shape();
        out_shape.push_back(D);
        const Tensor flat = indices.contiguous().view({M});
        Tensor out = empty(out_shape, TensorOptions(weight.dtype(), weight.device()));
        if (out.numel() > 0) {
          Tensor out3 = out.view({1, M, D});
          index_select_kernel(weight.device(), weight.detach().contiguous().view({1, V, D}), flat, out3);
        }
        if (needs_grad({weight}))
          record("embedding", {weight}, out, [sf = SavedTensor(flat), V, D, M, pad](BackwardContext& ctx) {
            embedding_backward(ctx, sf, V, D, M, pad);
          });
        return out;
      },
      weight, indices, padding_idx);
}

constexpr OpDef one_hot_op{.name = "one_hot", .onnx = lower_one_hot};
EMBER_REGISTER_OP(one_hot_op);

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  return op::call_captured<one_hot_op>(
      [&](const auto&...) -> Tensor {
        EMBER_CHECK(indices.dtype() == DType::Int64, DTypeError, "one_hot: indices must be an int64 tensor, got ",
                    dtype_name(indices.dtype()));
        EMBER_CHECK(num_classes >= -1, ValueError, "one_hot: num_classes must be -1 (infer) or >= 0, got ",
                    num_classes);
        const Tensor flat = indices.contiguous().view({indices.numel()});
        if (num_classes == -1) {
          EMBER_CHECK(indices.numel() > 0, ValueError, "one_hot: cannot infer num_classes from an empty tensor (shape ",
                      indices.shape().str(), ")");
          if (auto bad = find_bad_index(flat, std::numeric_limits<int64_t>::max()))
            EMBER_CHECK(false, IndexError, "one_hot: class value ", *bad, " is negative (indices shape ",
                        indices.shape().str(), ")");
          num_classes = index_max_kernel(indices.device(), flat) + 1;
        } else if (auto bad = find_bad_index(flat, num_classes)) {
          EMBER_CHECK(false, IndexError, "one_hot: class value ", *bad, " is out of range for num_classes ",
                      num_classes, " (indices shape ", indices.shape().str(), ")");
        }
        Shape out_shape = indices.shape();
        out_shape.push_back(num_classes);
        Tensor out = empty(out_shape, TensorOptions(DType::Int64, indices.device()));
        if (out.numel() > 0) {
          Tensor o2 = out.view({indices.numel(), num_classes});
          one_hot_kernel(indices.device(), flat, o2);
        }
        return out;
      },
      indices, num_classes);
}

}  // namespace ember
