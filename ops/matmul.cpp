// Matrix products: matmul, mm, bmm, linear, matmul_into, and the GEMM
// kernel table they share (its CPU kernel: ops/matmul_cpu.cpp).
//
// Every product reduces to one GemmDesc (ops/matmul.h). The op functions do
// the device-neutral planning:
//  - 1-D operands become [1, k] / [k, 1] views and the extra dim is dropped
//    from the result, as in PyTorch;
//  - each operand matrix is given to the kernel in place when its last two
//    strides make it row-major (no transpose) or column-major (transpose
//    flag); only a matrix that is neither (both strides > 1, a stride-0 row)
//    is copied;
//  - broadcast batch dims get stride 0 in the descriptor and are never
//    materialised; when b has no batch and a's batch and row dims merge into
//    one strided dim (a contiguous stack), the whole batch is one GEMM with
//    batch * m rows (x @ W for a [batch, seq, in] activation).
#include <ember/ops/matmul.h>

#include <algorithm>
#include <climits>

#include <ember/core/autocast.h>
#include <ember/core/autocast_cache.h>
#include <ember/core/autograd.h>
#include <ember/core/dtype_dispatch.h>
#include <ember/core/op.h>
#include <ember/ops/half_ops.h>
#include <ember/ops/onnx_lowerings.h>
#include <ember/ops/pointwise.h>

namespace ember {

namespace {

using autograd::BackwardContext;
using autograd::SavedTensor;

// ---- planning -----------------------------------------------------------------

// How BLAS can read the matrix in the last two dims of t (rows r, cols c).
struct MatLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

MatLayout blas_layout(const Tensor& t) {
  const int64_t r = t.size(-2), c = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  // Row-major: a row's elements adjacent, rows ld >= c apart. A size-1 dim's
  // stride never matters, so it is replaced by a valid one.
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<int64_t>(c, 1)))
    return {true, false, r == 1 ? std::max<int64_t>(c, 1) : sr};
  // Column-major: the transpose of a row-major [c, r] matrix.
  if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<int64_t>(r, 1)))
    return {true, true, c == 1 ? std::max<int64_t>(r, 1) : sc};
  return {};
}

// When a's batch and row dims (all but the last) form one evenly strided
// run, the row stride of that run (its rows as one [batch * m, k] matrix).
bool fold_rows(const Tensor& a, int64_t& ld) {
  const int64_t k = a.size(-1);
  if (k != 1 && a.stride(-1) != 1) return false;
  int64_t expected = -1;  // stride the next larger non-1 dim must have
  ld = std::max<int64_t>(k, 1);
  bool first = true;
  for (int i = a.dim() - 2; i >= 0; --i) {
    if (a.size(i) == 1) continue;
    if (first) {
      ld = a.stride(i);
      if (ld < std::max<int64_t>(k, 1)) return false;
      first = false;
    } else if (a.stride(i) != expected) {
      return false;
    }
    expected = a.stride(i) * a.size(i);
  }
  return true;
}

// out[batch..., m, n] = alpha * a[..., m, k] @ b[..., k, n] + beta * out,
// with a's and b's batch dims broadcast to out's. a and b are plain
// (autograd-free) views of dim >= 2; out is any view whose matrices are
// row-major (contiguous rows, any row and batch strides: a contiguous tensor,
// or heads side by side in an (N, L, H, D) buffer) and, when beta is 1,
// already holds the addend.
void run_gemm(Tensor a, Tensor b, Tensor& out, double alpha, double beta, const Tensor& bias = Tensor()) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: the product is zero
    if (bias.defined())
      out.copy_(bias);
    else if (beta == 0)
      out.zero_();
    return;
  }
  MatLayout la = blas_layout(a), lb = blas_layout(b);
  if (!la.ok) {
    a = a.contiguous();
    la = blas_layout(a);
  }
  if (!lb.ok) {
    b = b.contiguous();
    lb = blas_layout(b);
  }
  const MatLayout lc = blas_layout(out);
  EMBER_CHECK(lc.ok && !lc.trans, ShapeError, "matmul: the output of shape ", out.shape().str(), " with strides ",
              out.strides().str(), " does not hold row-major matrices");
  GemmDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  d.trans_b = lb.trans;
  d.ldb = lb.ld;
  d.ldc = lc.ld;
  d.a = a;
  d.b = b;
  d.c = out;
  d.alpha = alpha;
  d.beta = beta;
  d.bias = bias;
  Shape b_batch;
  for (int i = 0; i < b.dim() - 2; ++i) b_batch.push_back(b.size(i));
  int64_t fold_lda = 0, fold_ldc = 0;
  if (b_batch.numel() == 1 && a.dim() > 2 && out.numel() / n <= INT_MAX && fold_rows(a, fold_lda) &&
      fold_rows(out, fold_ldc)) {
    // One GEMM over all of a's rows: [batch * m, k] @ [k, n] -> out as [batch * m, n].
    d.m = out.numel() / n;
    d.lda = fold_lda;
    d.ldc = fold_ldc;
  } else {
    d.trans_a = la.trans;
    d.lda = la.ld;
    const int nb = out.dim() - 2;
    for (int i = 0; i < nb; ++i) {
      d.batch.push_back(out.size(i));
      // Operand dim aligned with out's dim i from the right; absent or size 1: broadcast.
      const int ia = i - (nb - (a.dim() - 2)), ib = i - (nb - (b.dim() - 2));
      d.a_batch_strides.push_back(ia >= 0 && a.size(ia) != 1 ? a.stride(ia) : 0);
      d.b_batch_strides.push_back(ib >= 0 && b.size(ib) != 1 ? b.stride(ib) : 0);
      d.c_batch_strides.push_back(out.size(i) != 1 ? out.stride(i) : 0);
    }
  }
  profiler::add_matmul_flops(static_cast<uint64_t>(2 * d.m * d.n * d.k * d.batch.numel()));
  gemm_kernel(out.device(), d);
}

// Product of all but the last `trailing` sizes (1 when there are none).
int64_t leading_numel(const Shape& s, int trailing) {
  int64_t p = 1;
  for (int i = 0; i + trailing < s.size(); ++i) p *= s[i];
  return p;
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), ValueError, op, ": got an undefined tensor");
  check_same_device(op, a, b);
  EMBER_CHECK(a.is_floating_point() && b.is_floating_point(), DTypeError, op, ": expected floating-point tensors, got ",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  EMBER_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": expected both operands to have the same dtype, got ",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
}

// Whether a product of a and b into dtype out_dt is the bfloat16 form: every
// one of the three float32 or bfloat16, at least one bfloat16, on the CPU
// (whose bf16 GEMM reads either operand type and writes either output type).
// Autocast's bf16 products take this form with float32 inputs, so the casts
// of activations and master weights happen inside the GEMM's packing and
// each gradient comes back in its input's dtype without a cast pass.
bool bf16_form(const Tensor& a, const Tensor& b, DType out_dt) {
  auto f32_or_bf16 = [](DType t) { return t == DType::Float32 || t == DType::BFloat16; };
  return a.defined() && b.defined() && a.device().is_cpu() && b.device().is_cpu() && f32_or_bf16(a.dtype()) &&
         f32_or_bf16(b.dtype()) && f32_or_bf16(out_dt) &&
         (a.dtype() == DType::BFloat16 || b.dtype() == DType::BFloat16 || out_dt == DType::BFloat16);
}

// Whether a 16-bit product must run as float32 copies rounded once (the
// fallback of docs/PRECISION.md): float16 on the CPU (no kernel), or 16-bit
// on a device whose GEMM kernel is not marked for 16-bit operands (CUDA's
// is: cublasGemmEx with float32 compute, cuda/matmul.cu).
bool half_needs_upcast(const Tensor& a, DType out_dt) {
  if (!is_half(a.dtype())) return false;
  if (a.device().is_cpu()) return !(a.dtype() == DType::BFloat16 && out_dt == DType::BFloat16);
  return !(out_dt == a.dtype() && takes_half(gemm_kernel, a.device()));
}

// The autocast region's product form for a and b: true when autocast asks
// for bfloat16 on the CPU and both are float32 or bfloat16 (float64 and
// integer operands take the cast path, which leaves them as they are).
bool autocast_bf16_form(DType ac, const Tensor& a, const Tensor& b) {
  return ac == DType::BFloat16 && a.defined() && b.defined() && bf16_form(a, b, DType::BFloat16);
}

// ---- matmul and its strict forms ----------------------------------------------

// The GEMM-shaped ops are on PyTorch's lower-precision autocast list. They
// apply it in their bodies: on the CPU in a bfloat16 region, float32 and
// bfloat16 operands go to the bf16 GEMM as they are (bf16_form), which
// rounds float32 ones as it packs them, the same numbers as a cast, without
// the copy. Their 16-bit handling is the body's too (half_needs_upcast).
// FLOPs: 2 per multiply-add, 2 m n k.
int64_t product_flops(const Tensor* const* in, int, const Tensor& out) { return 2 * out.numel() * in[0]->size(-1); }
}  // namespace

// y = x W^T + b: Gemm for a matrix, MatMul and Add otherwise (as torch.onnx writes Linear).
std::string lowering::linear_value(Graph& g, const Call& c) {
  const Tensor& x = c.tensor(0);
  const std::string w = g.value(c.tensor(1));
  if (x.dim() == 2) {
    std::vector<std::string> in{g.value(x), w};
    if (c.has_tensor(2)) in.push_back(g.value(c.tensor(2)));
    return g.node("Gemm", in, {{"transB", int64_t{1}}})[0];
  }
  const std::string wt = g.node("Transpose", {w}, {{"perm", std::vector<int64_t>{1, 0}}})[0];
  std::string y = g.node("MatMul", {g.value(x), wt})[0];
  if (c.has_tensor(2)) y = g.node("Add", {y, g.value(c.tensor(2))})[0];
  return y;
}

namespace {
// MatMul of the two tensors among the arguments (mm and bmm carry their name first).
void lower_matmul(lowering::Graph& g, const lowering::Call& c) {
  const size_t a = c.has_tensor(0) ? 0 : 1;
  g.bind(c.outputs[0], g.node("MatMul", {g.value(c.tensor(a)), g.value(c.tensor(a + 1))})[0]);
}
void lower_linear(lowering::Graph& g, const lowering::Call& c) { g.bind(c.outputs[0], lowering::linear_value(g, c)); }

constexpr OpDef matmul_op{.name = "matmul",
                          .autocast = Autocast::LowerPrecision,
                          .autocast_in_body = true,
                          .half = Half::InBody,
                          .flops = product_flops,
                          .onnx = lower_matmul};
constexpr OpDef mm_op{.name = "mm",
                      .autocast = Autocast::LowerPrecision,
                      .autocast_in_body = true,
                      .half = Half::InBody,
                      .flops = product_flops,
                      .onnx = lower_matmul};
constexpr OpDef bmm_op{.name = "bmm",
                       .autocast = Autocast::LowerPrecision,
                       .autocast_in_body = true,
                       .half = Half::InBody,
                       .flops = product_flops,
                       .onnx = lower_matmul};
constexpr OpDef linear_op{
    .name = "linear",
    .autocast = Autocast::LowerPrecision,
    .autocast_in_body = true,
    .half = Half::InBody,
    .flops = [](const Tensor* const* in, int, const Tensor& out) { return 2 * out.numel() * in[1]->size(-1); },
    .onnx = lower_linear};
EMBER_REGISTER_OP(matmul_op);
EMBER_REGISTER_OP(mm_op);
EMBER_REGISTER_OP(bmm_op);
EMBER_REGISTER_OP(linear_op);

Tensor matmul_impl(const char* op, const Tensor& a, const Tensor& b, DType out_dt, bool allow_mixed);
// A product in the gradient formulas: into the dtype of the input whose
// gradient it is (the bfloat16 form when the operands are mixed).
Tensor product(const Tensor& a, const Tensor& b, DType out_dt) { return matmul_impl("matmul", a, b, out_dt, true); }

// matmul's backward: C = A B  =>  dA = dC B^T,  dB = A^T dC  (per batch
// entry). sa / sb: the saved operands (each only when the other one needs a
// gradient); a1 / b1: the operand was 1-D and the forward dropped its dim.
void matmul_backward(BackwardContext& ctx, const SavedTensor& sa, const SavedTensor& sb, bool a1, bool b1) {
  // Restore the dims 1-D operands dropped, so everything is batched [.., m, n].
  Tensor g = ctx.grad_output();
  if (a1 && b1)
    g = g.reshape({1, 1});
  else if (a1)
    g = g.unsqueeze(g.dim() - 1);
  else if (b1)
    g = g.unsqueeze(g.dim());
  if (ctx.needs_grad(0)) {
    const Tensor& B = sb.get();
    const Tensor Bn = b1 ? B.unsqueeze(1) : B;
    // [batch.., m, n] @ [.., n, k]: broadcast batch dims of a are summed back
    // by the engine.
    Tensor dA = product(g, Bn.transpose(-1, -2), ctx.input_meta(0).dtype);
    if (a1) dA = dA.squeeze(dA.dim() - 2);
    ctx.set_grad(0, dA);
  }
  if (ctx.needs_grad(1)) {
    const Tensor& A = sa.get();
    const Tensor An = a1 ? A.unsqueeze(0) : A;
    Tensor dB;
    const Shape& b_shape = ctx.input_meta(1).shape;
    if (An.dim() > 2 && leading_numel(b_shape, 2) == 1) {
      // b is one matrix shared by every batch entry: the batch sum folds into
      // the GEMM, dB = A^T dC over all batch * m rows.
      const int64_t rows = leading_numel(An.shape(), 1);
      dB = product(An.reshape({rows, An.size(-1)}).t(), g.reshape({rows, g.size(-1)}), ctx.input_meta(1).dtype);
      if (!b1) dB = dB.reshape(b_shape);
    } else {
      dB = product(An.transpose(-1, -2), g, ctx.input_meta(1).dtype);
    }
    if (b1) dB = dB.squeeze(dB.dim() - 1);
    ctx.set_grad(1, dB);
  }
}

// The shared forward and backward of matmul, mm and bmm (op names the node
// and the errors; the caller has checked what is specific to mm / bmm).
// out_dt: the result's dtype; a's dtype, with a and b of one dtype, except
// in the bfloat16 form (bf16_form), which only autocast and the gradients of
// its products use (allow_mixed; the public ops refuse mixed dtypes, as
// PyTorch's do).
Tensor matmul_impl(const char* op, const Tensor& a, const Tensor& b, DType out_dt, bool allow_mixed) {
  // matmul, mm and bmm (and the gradients' products) share one category.
  if (auto ac = op::autocast_dtype<matmul_op>(a)) {
    AutocastSuspend off;
    if (autocast_bf16_form(*ac, a, b)) return matmul_impl(op, a, b, DType::BFloat16, true);
    const Tensor ca = autocast_cast(a, *ac), cb = autocast_cast(b, *ac);
    return matmul_impl(op, ca, cb, ca.dtype(), false);
  }
  const bool mixed = allow_mixed && bf16_form(a, b, out_dt) && (a.dtype() != out_dt || b.dtype() != out_dt);
  if (!mixed) check_operands(op, a, b);
  // float16, or 16-bit off the CPU: the float32 GEMM, result rounded once.
  if (!mixed && half_needs_upcast(a, out_dt)) {
    const Tensor a32 = upcast_half(a), b32 = upcast_half(b);
    return matmul_impl(op, a32, b32, a32.dtype(), false).to(out_dt);
  }
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, op, ": both arguments need at least 1 dim, got shapes ",
              a.shape().str(), " and ", b.shape().str());
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  // [k] -> [1, k] on the left, [k] -> [k, 1] on the right.
  const Tensor an = a1 ? a.detach().unsqueeze(0) : a.detach();
  const Tensor bn = b1 ? b.detach().unsqueeze(1) : b.detach();
  EMBER_CHECK(an.size(-1) == bn.size(-2), ShapeError, op, ": shapes ", a.shape().str(), " and ", b.shape().str(),
              " cannot be multiplied (", an.size(-1), " != ", bn.size(-2), ")");
  // Batch dims broadcast like elementwise shapes, aligned from the right.
  const int nba = an.dim() - 2, nbb = bn.dim() - 2, nb = std::max(nba, nbb);
  Shape out_nd;
  for (int i = 0; i < nb; ++i) {
    const int64_t sa = i - (nb - nba) >= 0 ? an.size(i - (nb - nba)) : 1;
    const int64_t sb = i - (nb - nbb) >= 0 ? bn.size(i - (nb - nbb)) : 1;
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, op, ": the batch dims of shapes ", a.shape().str(), " and ",
                b.shape().str(), " cannot be broadcast (", sa, " vs ", sb, ")");
    out_nd.push_back(sa == 1 ? sb : sa);
  }
  out_nd.push_back(an.size(-2));
  out_nd.push_back(bn.size(-1));
  Tensor out = empty(out_nd, TensorOptions(out_dt, a.device()));
  run_gemm(an, bn, out, 1.0, 0.0);
  // Drop the dims that 1-D operands added.
  if (a1 || b1) {
    Shape final_shape;
    for (int i = 0; i < nb; ++i) final_shape.push_back(out_nd[i]);
    if (!a1) final_shape.push_back(out_nd[nb]);
    if (!b1) final_shape.push_back(out_nd[nb + 1]);
    out = out.view(final_shape);
  }
  if (autograd::needs_grad({a, b})) {
    // Each gradient needs the other operand only, so only that one is saved.
    autograd::record(op, {a, b}, out,
                     [sa = b.requires_grad() ? SavedTensor(a) : SavedTensor(),
                      sb = a.requires_grad() ? SavedTensor(b) : SavedTensor(), a1,
                      b1](BackwardContext& ctx) { matmul_backward(ctx, sa, sb, a1, b1); });
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  return op::call<matmul_op>(
      [](const Tensor& a, const Tensor& b) {
        return matmul_impl("matmul", a, b, a.defined() ? a.dtype() : kFloat32, false);
      },
      a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), ValueError, "mm: got an undefined tensor");
  EMBER_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "mm: expected 2-D tensors, got shapes ", a.shape().str(),
              " and ", b.shape().str());
  return op::call<mm_op>(matmul_impl, "mm", a, b, a.dtype(), false);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), ValueError, "bmm: got an undefined tensor");
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: expected 3-D tensors, got shapes ", a.shape().str(),
              " and ", b.shape().str());
  EMBER_CHECK(a.size(0) == b.size(0), ShapeError, "bmm: batch sizes of shapes ", a.shape().str(), " and ",
              b.shape().str(), " differ (", a.size(0), " != ", b.size(0), ")");
  return op::call<bmm_op>(matmul_impl, "bmm", a, b, a.dtype(), false);
}

void matmul_into(const Tensor& a, const Tensor& b, Tensor out, double alpha, double beta) {
  // One dtype, or the CPU's bfloat16 form (bf16_form: float32 and bfloat16
  // mixed, e.g. float32 attention weights times bfloat16 values).
  const bool mixed = out.defined() && bf16_form(a, b, out.dtype()) && out.device().is_cpu() &&
                     (a.dtype() != out.dtype() || b.dtype() != out.dtype());
  if (!mixed) check_operands("matmul_into", a, b);
  check_same_device("matmul_into", a, out);
  if (mixed) check_same_device("matmul_into", a, b);
  EMBER_CHECK(mixed || out.dtype() == a.dtype(), DTypeError, "matmul_into: output dtype ", dtype_name(out.dtype()),
              " differs from the operands' ", dtype_name(a.dtype()));
  if (!mixed && half_needs_upcast(a, out.dtype())) {
    // float16 on the CPU: float32 copies, the result rounded into out.
    Tensor o32 = empty(out.shape(), TensorOptions(DType::Float32, out.device()));
    if (beta != 0) o32.copy_(out);
    matmul_into(upcast_half(a), upcast_half(b), o32, alpha, beta);
    out.copy_(o32);
    return;
  }
  EMBER_CHECK(
      a.dim() >= 2 && b.dim() >= 2 && out.dim() >= 2 && a.size(-1) == b.size(-2) && out.size(-2) == a.size(-2) &&
          out.size(-1) == b.size(-1) && a.dim() <= out.dim() && b.dim() <= out.dim(),
      ShapeError, "matmul_into: shapes ", a.shape().str(), " @ ", b.shape().str(), " do not give ", out.shape().str());
  for (const Tensor* t : {&a, &b})
    for (int i = 0; i < t->dim() - 2; ++i) {
      const int64_t s = t->size(i), o = out.size(i + out.dim() - t->dim());
      EMBER_CHECK(s == o || s == 1, ShapeError, "matmul_into: batch dims of ", t->shape().str(),
                  " do not broadcast to the output's ", out.shape().str());
    }
  run_gemm(a.detach(), b.detach(), out, alpha, beta);
}

// ---- linear -------------------------------------------------------------------

namespace {

// linear into dtype out_dt: x's dtype with x, weight and bias of one dtype,
// or the bfloat16 form (bf16_form), where each of x and weight may be float32
// or bfloat16 and the bias is rounded to bfloat16 (as autocast's cast would).
Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, DType out_dt, bool allow_mixed) {
  const bool mixed = allow_mixed && bf16_form(x, weight, out_dt) && (x.dtype() != out_dt || weight.dtype() != out_dt);
  if (!mixed) check_operands("linear", x, weight);
  if (!mixed && (half_needs_upcast(x, out_dt) || (bias.defined() && is_half(bias.dtype()) && !is_half(x.dtype()))))
    return linear(upcast_half(x), upcast_half(weight), upcast_half(bias)).to(out_dt);
  EMBER_CHECK(weight.dim() == 2, ShapeError, "linear: weight must be 2-D [out_features, in_features], got shape ",
              weight.shape().str());
  EMBER_CHECK(x.dim() >= 1, ShapeError, "linear: input must have at least 1 dim, got shape ", x.shape().str());
  const int64_t n = weight.size(0), k = weight.size(1);
  EMBER_CHECK(x.size(-1) == k, ShapeError, "linear: input ", x.shape().str(), " and weight ", weight.shape().str(),
              " cannot be multiplied (input's last dim ", x.size(-1), " != in_features ", k, ")");
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = n;
  Tensor out = empty(out_shape, TensorOptions(out_dt, x.device()));
  double beta = 0;
  Tensor row_bias;
  if (bias.defined()) {
    check_same_device("linear", x, bias);
    EMBER_CHECK(mixed || bias.dtype() == x.dtype(), DTypeError, "linear: bias has dtype ", dtype_name(bias.dtype()),
                " but input and weight have ", dtype_name(x.dtype()));
    EMBER_CHECK(!mixed || bias.dtype() == DType::Float32 || bias.dtype() == DType::BFloat16, DTypeError,
                "linear: bias has dtype ", dtype_name(bias.dtype()), " in a bfloat16 product");
    bool fits = bias.dim() <= out_shape.size();
    for (int i = 1; fits && i <= bias.dim(); ++i)
      fits = bias.shape()[bias.dim() - i] == 1 || bias.shape()[bias.dim() - i] == out_shape[out_shape.size() - i];
    EMBER_CHECK(fits, ShapeError, "linear: bias of shape ", bias.shape().str(),
                " does not broadcast to the output shape ", out_shape.str(), " (input ", x.shape().str(), ", weight ",
                weight.shape().str(), ")");
    // In the bfloat16 form the bias is rounded to bfloat16 first, as
    // PyTorch's autocast casts it, and added in float32 before the output's
    // one rounding.
    const Tensor b = mixed ? bias.detach().to(DType::BFloat16) : bias.detach();
    if (bias.dim() == 1 && bias.size(0) == n) {
      // The usual [out] bias goes to the GEMM kernel, which writes it into
      // each block of the output just before that block's product.
      row_bias = b.contiguous();
    } else {
      // Any other broadcast: written first, and the GEMM accumulates onto it
      // (beta = 1).
      out.copy_(b);
      beta = 1;
    }
  }
  // x @ W^T with W^T a column-major view: BLAS reads W transposed in place.
  const Tensor xn = x.dim() == 1 ? x.detach().unsqueeze(0) : x.detach();
  Tensor out_nd = x.dim() == 1 ? out.view({1, n}) : out;
  run_gemm(xn, weight.detach().t(), out_nd, 1.0, beta, row_bias);
  if (autograd::needs_grad({x, weight, bias})) {
    // y = x W^T + b  =>  dx = dy W,  dW = dy^T x (summed over every leading
    // index of x, as one GEMM over all rows),  db = dy (the engine sums it
    // back to the bias's shape and casts it to the bias's dtype). Each GEMM
    // writes the dtype of the input whose gradient it is.
    const int64_t rows = leading_numel(x.shape(), 1);
    autograd::record(
        "linear", {x, weight, bias}, out,
        [sx = weight.requires_grad() ? SavedTensor(x) : SavedTensor(),
         sw = x.requires_grad() ? SavedTensor(weight) : SavedTensor(), rows, n, k](BackwardContext& ctx) {
          const Tensor& g = ctx.grad_output();
          if (ctx.needs_grad(0)) ctx.set_grad(0, product(g, sw.get(), ctx.input_meta(0).dtype));
          if (ctx.needs_grad(1))
            ctx.set_grad(1, product(g.reshape({rows, n}).t(), sx.get().reshape({rows, k}), ctx.input_meta(1).dtype));
          if (ctx.needs_grad(2)) ctx.set_grad(2, g);
        });
  }
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return op::call<linear_op>(
      [](const Tensor& x, const Tensor& weight, const Tensor& bias) {
        if (auto ac = op::autocast_dtype<linear_op>(x)) {
          AutocastSuspend off;
          // With gradients off the parameters' casts come from the region's
          // cache (core/autocast_cache.h): decoding reads a 16-bit weight
          // per token instead of the float32 one.
          const Tensor w = autocast_param_cast(weight, *ac), b = autocast_param_cast(bias, *ac);
          if (autocast_bf16_form(*ac, x, w)) return linear_impl(x, w, b, DType::BFloat16, true);
          const Tensor cx = autocast_cast(x, *ac);
          return linear_impl(cx, autocast_cast(w, *ac), autocast_cast(b, *ac), cx.dtype(), false);
        }
        EMBER_CHECK(x.defined() && weight.defined(), ValueError, "linear: got an undefined tensor");
        return linear_impl(x, weight, bias, x.dtype(), false);
      },
      x, weight, bias);
}

}  // namespace ember
